"""The read path's worker threads (fusecache/workers.py): results and exceptions come back
to their callers, a cancelled caller leaves at once without holding up the next call, and
idle threads beyond the kept ones leave."""

from __future__ import annotations

import threading
import time

import pytest
import trio

from fusecache.workers import WorkerPool


def test_many_calls_each_get_their_own_result_or_exception() -> None:
    pool = WorkerPool("t", keep=4)

    def call(i: int) -> int:
        time.sleep(0.001 * (i % 3))
        if i % 7 == 0:
            raise ValueError(f"no {i}")
        return i * i

    got: dict[int, object] = {}

    async def one(i: int, limit: trio.CapacityLimiter) -> None:
        async with limit:
            try:
                got[i] = await pool.run(call, i)
            except ValueError as e:
                got[i] = str(e)

    async def main() -> None:
        limit = trio.CapacityLimiter(16)
        async with trio.open_nursery() as n:
            for i in range(300):
                n.start_soon(one, i, limit)

    trio.run(main)
    assert got == {i: (f"no {i}" if i % 7 == 0 else i * i) for i in range(300)}
    # a thread handing back a result counts as busy until it waits again, so a burst
    # may start a few more threads than calls run at once, never many more
    assert 1 <= pool.threads <= 32
    pool.close()


def _held_call(result: object):
    """(release, finished, call): *call* blocks until *release* is set, then sets
    *finished* and returns *result*."""
    release, finished = threading.Event(), threading.Event()

    def call() -> object:
        release.wait(10)
        finished.set()
        return result
    return release, finished, call


def test_a_cancelled_call_is_abandoned_and_does_not_hold_up_the_next() -> None:
    pool = WorkerPool("t", keep=1)
    release, finished, stuck = _held_call("late")

    async def main() -> tuple[float, str, float]:
        t0 = trio.current_time()
        with trio.move_on_after(0.2):
            await pool.run(stuck)
        abandoned_after = trio.current_time() - t0
        t1 = trio.current_time()
        fast = await pool.run(lambda: "next")  # a second thread: the first is still stuck
        return abandoned_after, fast, trio.current_time() - t1

    abandoned_after, fast, fast_s = trio.run(main)
    assert abandoned_after < 1.0 and fast == "next" and fast_s < 1.0
    assert not finished.is_set()  # the abandoned call was still running
    release.set()
    assert finished.wait(5)
    pool.close()


def test_idle_threads_beyond_the_kept_ones_leave_and_close_ends_the_rest() -> None:
    pool = WorkerPool("t", keep=1, idle_s=0.1)
    barrier = threading.Barrier(4)

    async def main() -> None:
        async with trio.open_nursery() as n:
            for _ in range(4):  # four at once: four threads
                n.start_soon(pool.run, lambda: barrier.wait(5))

    trio.run(main)
    assert pool.threads == 4
    deadline = time.monotonic() + 5
    while pool.threads > 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pool.threads == 1
    pool.close()
    while pool.threads and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pool.threads == 0
    assert trio.run(pool.run, lambda: 5) == 5  # still usable: a thread for the call


def test_a_result_for_a_finished_trio_run_is_dropped() -> None:
    """A thread ending after its trio run is gone must not fail (nobody waits for it)."""
    pool = WorkerPool("t", keep=1)
    release, done, slow = _held_call(1)

    async def main() -> None:
        with trio.move_on_after(0.05):
            await pool.run(slow)

    trio.run(main)
    release.set()
    assert done.wait(5)
    time.sleep(0.1)
    assert trio.run(pool.run, lambda: 2) == 2
    pool.close()


@pytest.mark.parametrize("n", [1, 50])
def test_results_finishing_together_wake_the_loop_once(n: int) -> None:
    """Results that finish while the loop has not yet taken the earlier ones are handed
    over together: far fewer hand-overs than calls."""
    deliveries = 0

    class Counting(WorkerPool):
        def _deliver(self, token) -> None:
            nonlocal deliveries
            deliveries += 1
            super()._deliver(token)

    pool = Counting("t", keep=n)
    gate = threading.Event()

    async def main() -> list[int]:
        out: list[int] = []

        async def one(i: int) -> None:
            out.append(await pool.run(lambda: gate.wait(5) and i))
        async with trio.open_nursery() as nursery:
            for i in range(n):
                nursery.start_soon(one, i)
            while pool.threads < n:
                await trio.sleep(0.01)
            await trio.sleep(0.05)
            # every thread wakes now; the loop is held, so they all finish before it
            # runs a hand-over
            gate.set()
            time.sleep(0.3)
        return out

    out = trio.run(main)
    assert sorted(out) == list(range(n))
    assert deliveries == 1
    pool.close()


def test_the_kernel_knows_each_worker_thread_by_its_name() -> None:
    """ps -L / top -H tell the pool's threads apart (the first 15 bytes of the name)."""
    pool = WorkerPool("fusecache-io", keep=1)

    def comm() -> str:
        with open(f"/proc/self/task/{threading.get_native_id()}/comm") as f:
            return f.read().strip()

    async def main() -> str:
        return await pool.run(comm)

    try:
        assert trio.run(main) == "fusecache-io-1"
    finally:
        pool.close()


def test_a_result_is_not_kept_alive_by_the_thread_that_made_it() -> None:
    """An idle thread must not hold the last result it returned: the read path's results
    are 8 MiB blocks, and a block the RAM tier lets go must be freed (or reused as a
    spare buffer), not kept by each of up to 16 idle GET threads."""
    import weakref

    class Block:
        pass

    pool = WorkerPool("t", keep=4)
    refs: list[weakref.ref] = []

    async def main() -> None:
        for _ in range(3):
            block = await pool.run(Block)
            refs.append(weakref.ref(block))
            del block
        deadline = time.monotonic() + 2
        while any(r() is not None for r in refs) and time.monotonic() < deadline:
            await trio.sleep(0.01)

    trio.run(main)
    pool.close()
    assert [r() for r in refs] == [None, None, None]
