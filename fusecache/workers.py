"""Worker threads for the read path's blocking calls (ranged GETs, peer fetches).

Who calls it: ``BlockReader`` (reader.py), for each GET of a block, on demand and for
read-ahead, and for each call to the cache group. Data flow: ``await run(fn, *args)``
puts a job on a deque and wakes one waiting thread (or starts one), the thread runs
``fn``, appends the outcome to the finished list and, if that list was empty, asks the
trio loop once (``run_sync_soon``) to hand every finished outcome to its caller.

Why not ``trio.to_thread.run_sync``: a cold small file is one such call, and on 2 cores
trio's cost 200-241 us of CPU per call against 114-125 for this pool (20,000 calls
sleeping 0.5 ms, 16 at a time: bench/run_handoff_bench.py), CPU the FUSE loop shares:
trio starts each job through its thread cache, renames the thread, and wakes the loop
once per result; here threads wait on one condition and results come back in batches.

Like ``to_thread.run_sync(..., abandon_on_cancel=True)``: a cancelled caller stops
waiting at once and the thread finishes its call (bounded by the call's own timeouts),
its outcome dropped; a thread is started whenever no thread is idle, so an abandoned
call never holds up the next one. Threads beyond ``keep`` leave after ``idle_s`` idle.
The callers' own limiters bound how many calls run at once.
"""

from __future__ import annotations

import collections
import ctypes
import ctypes.util
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import outcome
import trio

T = TypeVar("T")

def _thread_namer() -> Any:
    """libc's pthread_setname_np, or None where there is none to load."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None
    return getattr(libc, "pthread_setname_np", None)


_SETNAME = _thread_namer()


def name_os_thread() -> None:
    """Give the calling thread its Python name in the kernel too (the first 15 bytes:
    ``top -H``, ``ps -L``, /proc/PID/task/TID/comm), so that an operator or a benchmark
    can tell the mount's write-behind from its GET threads. Best effort."""
    if _SETNAME is None:
        return
    name = threading.current_thread().name.encode(errors="replace")[:15]
    _SETNAME(ctypes.c_ulong(threading.get_ident()), name)


class _Job:
    __slots__ = ("fn", "args", "token", "done", "result")

    def __init__(self, fn: Callable[..., Any], args: tuple, token: trio.lowlevel.TrioToken):
        self.fn, self.args, self.token = fn, args, token
        self.done = trio.Event()
        self.result: outcome.Outcome | None = None


class WorkerPool:
    """Threads named *name*-N running blocking calls for trio tasks; see the module."""

    def __init__(self, name: str, keep: int = 8, idle_s: float = 10.0) -> None:
        self.name = name
        self.keep = keep
        self.idle_s = idle_s
        self._cv = threading.Condition(threading.Lock())
        self._jobs: collections.deque[_Job] = collections.deque()
        self._idle = 0  # threads waiting for a job (under _cv)
        self._threads = 0
        self._started = 0
        self._closed = False
        self._finished: dict[trio.lowlevel.TrioToken, list[_Job]] = {}
        self._finished_lock = threading.Lock()

    @property
    def threads(self) -> int:
        """Threads alive now (for tests and metrics)."""
        with self._cv:
            return self._threads

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in a worker thread; its result, or its exception raised here."""
        job = _Job(fn, args, trio.lowlevel.current_trio_token())
        with self._cv:
            self._jobs.append(job)
            if self._idle > len(self._jobs) - 1:
                self._cv.notify()
            else:
                self._threads += 1
                self._started += 1
                threading.Thread(target=self._work, name=f"{self.name}-{self._started}",
                                 daemon=True).start()
        await job.done.wait()  # a cancelled caller abandons the job here
        assert job.result is not None
        try:
            return job.result.unwrap()
        finally:
            # An error raised here has this frame in its traceback, and the frame's job
            # holds the error: a cycle that kept the failed call's frames (a GET's 8 MiB
            # buffer) until the cyclic collector ran, dozens at once in an error storm.
            del job

    def close(self) -> None:
        """Let the threads end once the queued jobs are done (a later call still runs, in a
        thread that ends after it)."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()

    def _work(self) -> None:
        name_os_thread()
        while True:
            with self._cv:
                while not self._jobs:
                    if self._closed:
                        self._threads -= 1
                        return
                    self._idle += 1
                    got = self._cv.wait(self.idle_s)
                    self._idle -= 1
                    if not got and not self._jobs and self._threads > self.keep:
                        self._threads -= 1
                        return
                job = self._jobs.popleft()
            job.result = outcome.capture(job.fn, *job.args)
            job.fn = job.args = None  # type: ignore[assignment]  # nothing kept alive
            self._finish(job)
            # nor the result: an idle thread would hold its last one (an 8 MiB block the
            # RAM tier has let go) until its next job
            del job

    def _finish(self, job: _Job) -> None:
        with self._finished_lock:
            batch = self._finished.setdefault(job.token, [])
            first = not batch
            batch.append(job)
        if first:
            try:
                job.token.run_sync_soon(self._deliver, job.token)
            except trio.RunFinishedError:  # the loop is gone: nobody waits for these
                with self._finished_lock:
                    self._finished.pop(job.token, None)

    def _deliver(self, token: trio.lowlevel.TrioToken) -> None:
        with self._finished_lock:
            batch = self._finished.pop(token, [])
        for job in batch:
            job.done.set()
