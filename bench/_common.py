"""What both benchmarks share: logging, page-cache drops, child processes, the S3 server."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

# Child processes (each in its own session) that must be stopped on any exit.
PROCS: list[subprocess.Popen] = []


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def start_run(argv: list[str] | None = None) -> dict:
    """Begin a benchmark run: SIGTERM raises KeyboardInterrupt (so every ``finally``
    tears down what the run started), and the head of the result record, whose
    ``started`` stamp also names the output files."""
    def on_term(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, on_term)
    cmd = sys.argv if argv is None else [sys.argv[0], *argv]
    return {
        "command": " ".join([Path(sys.executable).name, *cmd]),
        "started": time.strftime("%Y%m%d-%H%M%S"),
        "machine": {"cpus": os.cpu_count(), "kernel": os.uname().release},
    }


def drop_caches(settle_s: float = 60.0) -> None:
    """Write back dirty pages, wait until the kernel has none left in flight, then drop
    the page cache. ``sync`` returned here while 177 MB of a warm's writes were still
    under writeback (/proc/meminfo), which then took the disk from the first second of
    the pass timed next."""
    deadline = time.monotonic() + settle_s
    while True:
        os.sync()
        if _unwritten_kib() < 8192 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def page_cache_fill(folder: Path, mib: int = 128) -> dict[str, float]:
    """How fast this machine fills page cache right now: *mib* MiB written to a new file
    in *folder* in 8 MiB writes, right after a drop (pages from the dropped cache), then
    again into pages just freed. On the 2-core VM the first took 10-50x the second at
    times (bench/README.md, "Noise"): a cold pass through a caching mount writes two page
    caches (the FUSE file's, its disk cache's), boto3 to /dev/null none, so a high
    ``fresh_s`` makes every cold ratio against boto3 lower. Seconds, each."""
    chunk = os.urandom(8 << 20)
    path = folder / ".page-cache-probe"
    out: dict[str, float] = {}
    drop_caches()
    for name in ("fresh_s", "reused_s"):
        fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
        try:
            t0 = time.perf_counter()
            for i in range(max(1, mib // 8)):
                os.pwrite(fd, chunk, i * len(chunk))
            out[name] = round(time.perf_counter() - t0, 3)
        finally:
            os.close(fd)
            path.unlink()
    return out


def _unwritten_kib() -> int:
    """Dirty + Writeback, KiB."""
    n = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(("Dirty:", "Writeback:")):
                n += int(line.split()[1])
    return n


def _stat_fields(pid: int, thread: int | None = None) -> list[str] | None:
    """The fields of /proc/PID/stat (or of its *thread*'s) after the command name, or None
    when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat" if thread is None
                  else f"/proc/{pid}/task/{thread}/stat") as f:
            return f.read().rpartition(")")[2].split()
    except OSError:
        return None


def machine_ticks() -> tuple[int, int]:
    """(busy, all) CPU ticks of the machine so far; waiting for I/O counts as idle."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    return sum(ticks) - ticks[3] - ticks[4], sum(ticks)


def machine_cpu_seconds() -> float:
    """Busy CPU seconds of the whole machine so far (every core; I/O wait is idle)."""
    return machine_ticks()[0] / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int | None, thread: int | None = None) -> float | None:
    """User + system CPU time of process *pid* so far, or of its *thread* (a thread id;
    the process's own id is its main thread) (None: no process, e.g. local disk).

    A thread's comes from /proc/PID/task/TID/schedstat (nanoseconds) where the kernel
    has it: /proc's stat counts whole clock ticks (10 ms) per thread, so dozens of GET
    threads of a few ms each read as 0 and their CPU went missing from a breakdown
    (0.3-0.4 of a 1.1 s cold pass's mount CPU)."""
    if pid is not None and thread is not None:
        try:
            with open(f"/proc/{pid}/task/{thread}/schedstat") as f:
                ns = int(f.read().split()[0])
            if ns > 0:
                return ns / 1e9
        except (OSError, IndexError, ValueError):
            pass
    fields = _stat_fields(pid, thread) if pid is not None else None
    if fields is None:
        return None
    try:
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (IndexError, ValueError):
        return None


def minor_faults(pid: int | None) -> int | None:
    """Minor page faults of process *pid* so far, all its threads (None: no process). A
    fresh buffer costs one per page it is written into: how a mount's copies show."""
    fields = _stat_fields(pid) if pid is not None else None
    if fields is None:
        return None
    try:
        return int(fields[7])
    except (IndexError, ValueError):
        return None


def stop_proc(proc: subprocess.Popen, timeout: float = 10.0) -> None:
    """SIGTERM the process group, SIGKILL after *timeout*; forget it."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    with contextlib.suppress(ValueError):
        PROCS.remove(proc)


def local_s3(data_dir: Path, bandwidth: int | None, stack: contextlib.ExitStack,
             params: dict[str, Any]) -> Any:
    """The benchmark's SeaweedFS: on loopback, or behind a shaped link of *bandwidth* Mbit/s.

    The namespace of the shaped link is torn down when *stack* closes.
    """
    from fusecache.locals3 import LocalS3

    if not bandwidth:
        return LocalS3(data_dir=data_dir)
    from shaped_link import shaped_namespace

    ip, prefix = stack.enter_context(shaped_namespace(bandwidth))
    params["bandwidth_mbit"] = bandwidth
    return LocalS3(data_dir=data_dir, ip=ip, cmd_prefix=prefix)


@contextlib.contextmanager
def latency_proxy(upstream: str, delay_ms: float, work: Path) -> Iterator[str]:
    """Run bench/training/latency_proxy.py (a delay line in front of S3: this machine's
    tc has no netem) as a process of its own; yield its endpoint."""
    host, port = upstream.removeprefix("http://").rsplit(":", 1)
    cmd = [sys.executable, str(HERE / "training" / "latency_proxy.py"), "--listen",
           "127.0.0.1:0", "--upstream", f"{host}:{port}", "--delay-ms", str(delay_ms)]
    with open(work / "latency-proxy.log", "ab") as err:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True,
                             start_new_session=True)
    PROCS.append(p)
    try:
        line = p.stdout.readline().strip()
        if not line.startswith("listening "):
            raise RuntimeError(f"latency proxy did not start (see {work / 'latency-proxy.log'})")
        yield "http://" + line.split()[1]
    finally:
        stop_proc(p)
