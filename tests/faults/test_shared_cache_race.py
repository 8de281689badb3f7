"""Two real mounts and a ``prefetchd warm`` on one node cache, reading the same objects at once.

Each process talks to S3 through a fault proxy of its own (every GET 0.2 s late, so the
processes' fetches overlap; warm starts first, the mounts once it fetches), so the GETs
of each block are counted per process. What holds:

- single flight applies inside one process: a mount GETs each block at most once
  (concurrent readers of a block wait for the one GET; the RAM tier serves repeats),
  and so does warm (one fetch per missing block);
- single flight does NOT apply across processes: there is no node-wide lock, so a
  block that two processes miss at the same moment is fetched by both (at most once
  per process: up to 3 GETs of a block here). The duplicate is harmless: the second
  ``put_block`` finds the block stored and stores nothing. The test reports how many
  duplicates it saw;
- bytes are exact through both mounts; the cache holds every block exactly once,
  ``used`` equals the bytes of the objects, integrity errors 0, and the node's
  ``s3_gets`` counter equals the GETs the two mounts' proxies saw.
"""

from __future__ import annotations

import hashlib
import threading
import time
import urllib.parse
from collections import Counter
from pathlib import Path

import pytest
from faultkit import BLOCK, Obj, check_cache, new_cache, put_object, run_warm, wait_counter
from s3_fault_proxy import FaultProxy, Rule

from fusecache.locals3 import LocalS3

from mounting import mounted

pytestmark = [pytest.mark.s3]

SIZES = [3 * BLOCK + 777, 2 * BLOCK, 5 * BLOCK + 1, 700_000, 4 * BLOCK - 3, 1 * BLOCK + 9]


@pytest.mark.fuse
def test_two_mounts_and_a_warm_on_one_cache(local_s3: LocalS3, s3_env: dict, bucket: str,
                                            tmp_path: Path) -> None:
    objs = {o.key: o for o in (put_object(local_s3, bucket, f"ds/{i}.bin", n)
                               for i, n in enumerate(SIZES))}
    nblocks = sum(o.blocks for o in objs.values())
    u = urllib.parse.urlsplit(local_s3.endpoint_url)
    upstream = (u.hostname or "127.0.0.1", u.port or 80)
    cache = new_cache(tmp_path / "c")
    args = ["--cache-dir", str(cache), "--block-size", str(BLOCK)]
    with FaultProxy(upstream) as p1, FaultProxy(upstream) as p2, FaultProxy(upstream) as pw, \
            mounted(f"s3://{bucket}", tmp_path / "m1", s3_env, *args,
                    "--endpoint-url", p1.url) as m1, \
            mounted(f"s3://{bucket}", tmp_path / "m2", s3_env, *args,
                    "--endpoint-url", p2.url) as m2:
        # stat everything first, so that the reads below start together
        for k in objs:
            assert (m1 / k).stat().st_size == (m2 / k).stat().st_size == len(objs[k].data)
        # every GET 0.2 s late, so that the three processes' fetches overlap
        for p in (p1, p2, pw):
            p.add(Rule("delay", seconds=0.2, times=None))
        start = threading.Barrier(2)
        errors: list[BaseException] = []
        digests: Counter[tuple[str, str]] = Counter()
        warm_result: list = []
        lock = threading.Lock()

        def read(mp: Path, order: list[str]) -> None:
            try:
                for k in order:
                    sha = hashlib.sha256((mp / k).read_bytes()).hexdigest()
                    with lock:
                        digests[(k, sha)] += 1
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        def warm() -> None:
            start.wait(timeout=60)
            warm_result.append(run_warm(f"s3://{bucket}/ds/", cache, pw.url, s3_env,
                                        "--concurrency", "4"))

        keys = sorted(objs)
        threads = [threading.Thread(target=read, args=(m1, keys)),
                   threading.Thread(target=read, args=(m1, keys[::-1])),
                   threading.Thread(target=read, args=(m2, keys)),
                   threading.Thread(target=read, args=(m2, keys[::-1])),
                   threading.Thread(target=warm)]
        threads[-1].start()
        start.wait(timeout=60)
        # the mounts start reading once warm has started fetching
        deadline = time.monotonic() + 60
        while not any(r.key in objs for r in pw.requests) and time.monotonic() < deadline:
            time.sleep(0.01)
        for t in threads[:-1]:
            t.start()
        for t in threads:
            t.join(timeout=300)
        assert not errors, errors
        assert warm_result and warm_result[0].returncode == 0, warm_result[0].stderr
        # bytes exact: each object read 4 times (2 readers x 2 mounts), always right
        assert digests == Counter({(k, o.sha): 4 for k, o in objs.items()})
        per_process = {name: _gets_per_block(p, objs) for name, p in
                       (("mount1", p1), ("mount2", p2), ("warm", pw))}
    for name, gets in per_process.items():
        # single flight inside a process: no block fetched twice by the same process
        assert max(gets.values(), default=0) <= 1, (name, gets)
    node = Counter()
    for gets in per_process.values():
        node.update(gets)
    every = {(k, i) for k, o in objs.items() for i in range(o.blocks)}
    assert set(node) == every  # every block fetched by someone
    dup = sum(node.values()) - nblocks
    print(f"{nblocks} blocks, {sum(node.values())} GETs node-wide "
          f"({dup} duplicates across processes); per process: "
          + ", ".join(f"{n} {sum(g.values())}" for n, g in per_process.items()))
    assert max(node.values()) <= 3
    # bookkeeping: every block once, used == the objects' bytes, s3_gets == every GET the
    # three processes made (mounts and prefetchd's warm count theirs into the node cache)
    assert check_cache(cache, objs) == nblocks
    all_gets = sum(sum(g.values()) for g in per_process.values())
    st = wait_counter(cache, "s3_gets", all_gets)
    assert st["s3_gets"] == all_gets
    assert st["used_bytes"] == sum(len(o.data) for o in objs.values())
    assert st["blocks"] == nblocks


def _gets_per_block(p: FaultProxy, objs: dict[str, Obj]) -> Counter[tuple[str, int]]:
    out: Counter[tuple[str, int]] = Counter()
    for r in p.requests:
        if r.method == "GET" and r.key in objs:
            assert r.range_start is not None and r.range_start % BLOCK == 0
            out[(r.key, r.range_start // BLOCK)] += 1
    return out
