"""The per-process counters the benchmarks report beside their speeds (bench/_common.py):
a mount's CPU seconds and its minor page faults, read from /proc; and the machine's
page-cache fill probe."""

from __future__ import annotations

import mmap
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from _common import cpu_seconds, minor_faults, page_cache_fill  # noqa: E402


def test_minor_faults_count_the_pages_a_fresh_buffer_is_written_into() -> None:
    pages = 4096
    buf = mmap.mmap(-1, pages * mmap.PAGESIZE)  # fresh anonymous memory, not touched yet
    before = minor_faults(os.getpid())
    for i in range(pages):
        buf[i * mmap.PAGESIZE] = 1
    after = minor_faults(os.getpid())
    buf.close()
    assert before is not None and after is not None
    # a huge page (THP) would take fewer faults; this machine's THP is madvise-only
    assert pages // 512 <= after - before <= pages + 1000


def test_counters_of_no_process_are_none() -> None:
    assert minor_faults(None) is None and cpu_seconds(None) is None
    assert minor_faults(2 ** 22 + 12345) is None  # no such pid


def test_page_cache_fill_times_both_writes_and_leaves_nothing(tmp_path: Path) -> None:
    got = page_cache_fill(tmp_path, mib=16)
    assert set(got) == {"fresh_s", "reused_s"}
    assert all(0 <= v < 60 for v in got.values()), got
    assert list(tmp_path.iterdir()) == []


def test_a_threads_cpu_is_read_finer_than_clock_ticks() -> None:
    """A thread that ran 5 ms reads as about 5 ms, not as 0 or 10 (whole clock ticks):
    dozens of short-lived GET threads once went missing from a breakdown that way. Read
    from another thread while it waits, as the benchmarks do (its count is then final)."""
    import threading
    import time

    go, spun, leave = threading.Event(), threading.Event(), threading.Event()
    tid: list[int] = []

    def spin() -> None:
        tid.append(threading.get_native_id())
        go.wait()
        end = time.thread_time() + 0.005
        while time.thread_time() < end:
            pass
        spun.set()
        leave.wait()

    t = threading.Thread(target=spin)
    t.start()
    try:
        while not tid:
            time.sleep(0.001)
        time.sleep(0.05)  # waiting on `go` by now
        before = cpu_seconds(os.getpid(), tid[0])
        go.set()
        assert spun.wait(10)
        time.sleep(0.05)  # waiting on `leave`
        after = cpu_seconds(os.getpid(), tid[0])
    finally:
        go.set()
        leave.set()
        t.join()
    assert before is not None and after is not None
    assert 0.004 <= after - before < 0.009, (before, after)
