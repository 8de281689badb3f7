#!/usr/bin/env python3
"""What a blocking call from trio costs in CPU: trio.to_thread.run_sync against the read
path's WorkerPool (fusecache/workers.py), alternating, in one process.

Each of N calls sleeps --sleep-ms in its thread (a GIL-free wait, like a GET) with
--concurrency calls at a time; reported: wall time and process CPU per call.

    python bench/run_handoff_bench.py [--calls 20000] [--concurrency 16] [--rounds 2]
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from fusecache.workers import WorkerPool  # noqa: E402


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--sleep-ms", type=float, default=0.5)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args(argv)
    pause = a.sleep_ms / 1000

    def call() -> bytes:
        time.sleep(pause)
        return b"x"

    pool = WorkerPool("bench", keep=a.concurrency)

    async def drive(run_one) -> None:
        limit = trio.CapacityLimiter(a.concurrency)

        async def one() -> None:
            async with limit:
                await run_one()
        async with trio.open_nursery() as nursery:
            for i in range(a.calls):
                if i % 64 == 0:
                    await trio.lowlevel.checkpoint()
                nursery.start_soon(one)

    variants = {
        "trio.to_thread": lambda: trio.to_thread.run_sync(call, abandon_on_cancel=True),
        "WorkerPool": lambda: pool.run(call),
    }
    for r in range(a.rounds):
        for name, run_one in variants.items():
            c0, t0 = _cpu(), time.perf_counter()
            trio.run(drive, run_one)
            wall, cpu = time.perf_counter() - t0, _cpu() - c0
            print(f"round {r + 1} {name:15s} {a.calls} calls: {wall:.2f} s wall, "
                  f"{cpu / a.calls * 1e6:.0f} us CPU per call")
    pool.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
