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
    dozens of short-lived GET threads once went missing from a breakdown that way."""
    import threading
    import time

    seen: list[float | None] = []

    def spin() -> None:
        tid = threading.get_native_id()
        before = cpu_seconds(os.getpid(), tid)
        end = time.thread_time() + 0.005
        while time.thread_time() < end:
            pass
        after = cpu_seconds(os.getpid(), tid)
        seen.append(None if before is None or after is None else after - before)

    t = threading.Thread(target=spin)
    t.start()
    t.join()
    assert seen[0] is not None and 0.004 <= seen[0] < 0.009, seen
