"""kill -9 of a real mount and of a real ``prefetchd warm`` in the middle of node-cache writes.

The kill is placed by the test: the child process gets ``FUSECACHE_FAILPOINT=SITE:N``
(fusecache/nodecache.py) and SIGKILLs itself the Nth time it reaches SITE, a point
inside or right after a write transaction (block bytes written but not their metadata,
all written but not committed, in the middle of an eviction, ...). Site and N are drawn
at random per trial (the seed is printed; ``FUSECACHE_KILL_SEED`` replays it). After
each kill the cache is reopened and must hold every block byte-exact or not at all,
with zero integrity errors, ``used`` equal to the sum of the live blocks' lengths, and
blocks, metadata, slots, LRU order, offsets and object records agreeing with each other.

Trials: ``FUSECACHE_KILL_TRIALS`` in all (half mount, half warm), 24 by default;
the issue's 200 with ``FUSECACHE_KILL_TRIALS=200``.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest
from faultkit import BLOCK, Obj, check_cache, new_cache, put_object

from fusecache.locals3 import LocalS3

from mounting import FUSECACHE, force_unmount

pytestmark = [pytest.mark.s3, pytest.mark.slow]

TRIALS = int(os.environ.get("FUSECACHE_KILL_TRIALS", "24"))
SEED = int(os.environ.get("FUSECACHE_KILL_SEED", str(secrets.randbits(32))))
# 5 + 4 + 1 = 10 blocks of 1 MiB (some short), 7.2 MiB in all
SIZES = {"k/a.bin": 4 * BLOCK + 12_345, "k/b.bin": 3 * BLOCK + 1, "k/c.bin": 200_000}
NBLOCKS = 10
# the short ones (a's and b's last blocks, c): LMDB values, whose offsets are recorded
# in a transaction of their own; the 7 full blocks lie in slots (nodecache.py)
VALUE_BLOCKS = 3
# A mount's cache is smaller than the data: at least 3 evictions per pass.
MOUNT_CACHE = 4 * BLOCK
# Sites and the number of hits each is sure to get in one pass over the data.
MOUNT_SITES = {"put:begin": NBLOCKS, "put:data": NBLOCKS, "put:commit": NBLOCKS,
               "put:committed": NBLOCKS, "offset:commit": VALUE_BLOCKS, "evict:delete": 3}
WARM_SITES = {"put:begin": NBLOCKS, "put:data": NBLOCKS, "put:commit": NBLOCKS,
              "put:committed": NBLOCKS, "offset:commit": VALUE_BLOCKS}


@pytest.fixture(scope="module")
def dataset(local_s3: LocalS3) -> dict[str, Obj]:
    bucket = "kill-" + secrets.token_hex(5)
    local_s3.client().create_bucket(Bucket=bucket)
    return {k: put_object(local_s3, bucket, k, n) for k, n in SIZES.items()}


def _draw(sites: dict[str, int], trial: int, kind: str) -> tuple[str, int]:
    rng = random.Random(f"{SEED}-{kind}-{trial}")
    site = rng.choice(sorted(sites))
    n = rng.randint(1, sites[site])
    print(f"seed {SEED} trial {kind}-{trial}: FUSECACHE_FAILPOINT={site}:{n}")
    return site, n


def _child_env(s3_env: dict[str, str], failpoint: str | None) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("AWS_CA_BUNDLE", None)
    env.pop("FUSECACHE_FAILPOINT", None)
    env.update(s3_env)
    if failpoint:
        env["FUSECACHE_FAILPOINT"] = failpoint
    return env


@contextlib.contextmanager
def _foreground_mount(source: str, mp: Path, cache: Path, env: dict[str, str]):
    mp.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        FUSECACHE + ["mount", source, str(mp), "--foreground", "--cache-dir", str(cache),
                     "--block-size", str(BLOCK), "--disk-cache-size", str(MOUNT_CACHE),
                     "--log-file", str(mp.parent / "mount.log")],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not os.path.ismount(mp):
            assert proc.poll() is None, f"mount exited {proc.returncode}"
            assert time.monotonic() < deadline, "mount not ready in 60 s"
            time.sleep(0.05)
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=15)
        force_unmount(mp)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _read_through(mp: Path, objs: dict[str, Obj]) -> int:
    """Read every object; bytes served before the kill must be exact. Returns files read."""
    done = 0
    for k, o in objs.items():
        try:
            got = (mp / k).read_bytes()
        except OSError:
            return done  # the mount is dead
        assert got == o.data, f"mount served wrong bytes for {k}"
        done += 1
    return done


@pytest.mark.fuse
@pytest.mark.parametrize("trial", range(TRIALS - TRIALS // 2))
def test_kill9_mount_mid_cache_write(trial: int, dataset: dict[str, Obj], s3_env: dict,
                                     tmp_path: Path) -> None:
    site, n = _draw(MOUNT_SITES, trial, "mount")
    cache = tmp_path / "c"
    bucket = next(iter(dataset.values())).bucket
    env = _child_env(s3_env, f"{site}:{n}")
    with _foreground_mount(f"s3://{bucket}", tmp_path / "m", cache, env) as proc:
        _read_through(tmp_path / "m", dataset)
        # write-behind may still be storing: the kill comes at the Nth hit
        assert proc.wait(timeout=60) == -9, "the mount did not die at its failpoint"
    live = check_cache(cache, dataset)
    print(f"after the kill: {live} of {NBLOCKS} blocks live, all exact")
    # the cache is usable: a new mount serves exact bytes through it
    with _foreground_mount(f"s3://{bucket}", tmp_path / "m", cache,
                           _child_env(s3_env, None)):
        assert _read_through(tmp_path / "m", dataset) == len(dataset)
    check_cache(cache, dataset)


@pytest.mark.parametrize("trial", range(TRIALS // 2))
def test_kill9_warm_mid_cache_write(trial: int, dataset: dict[str, Obj], s3_env: dict,
                                    tmp_path: Path) -> None:
    site, n = _draw(WARM_SITES, trial, "warm")
    cache = new_cache(tmp_path / "c")
    bucket = next(iter(dataset.values())).bucket
    cmd = [sys.executable, "-m", "prefetchd.cli", "warm", f"s3://{bucket}/k/",
           "--cache-dir", str(cache), "--json", "--concurrency", "4"]
    r = subprocess.run(cmd, env=_child_env(s3_env, f"{site}:{n}"), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == -9, f"warm did not die at its failpoint: {r.returncode} {r.stderr}"
    live = check_cache(cache, dataset)
    print(f"after the kill: {live} of {NBLOCKS} blocks live, all exact")
    # a second warm on the reopened cache completes it
    r = subprocess.run(cmd, env=_child_env(s3_env, None), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["failed_objects"] == 0
    assert check_cache(cache, dataset) == NBLOCKS


def test_failpoint_off_by_default_and_bad_spec_ignored(tmp_path: Path) -> None:
    code = ("import fusecache.nodecache as n; print(n._FAILPOINT)")
    env = _child_env({}, None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.stdout.strip() == "None"
    env["FUSECACHE_FAILPOINT"] = "put:begin:zero"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.stdout.strip() == "None"
    assert "ignoring FUSECACHE_FAILPOINT" in out.stderr
    env["FUSECACHE_FAILPOINT"] = "put:begin:3"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.stdout.strip() == "('put:begin', 3)"

