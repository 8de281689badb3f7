"""Peak RSS of a mount while S3 refuses every GET of an object (an error storm).

Run (root, /dev/fuse): ``python bench/run_storm_bench.py [--seconds 20] [--readers 8]
[--fusecache-opt=--read-timeout=5] [--fusecache-env PYTHONPATH=<worktree>]``.

Why: the RAM tier's bound must hold when fetches fail, not only when they succeed. A
failed GET's error, kept alive (remembered for the kernel's re-sent reads, or in a
reference cycle until Python's cyclic collector runs), used to keep the 8 MiB buffer the
GET was streaming into. Steps, against SeaweedFS behind the fault proxy of tests/faults:

1. read 8 objects of 16 MiB whole (the RAM tier's main segment) and one of --size-mib
   sequentially (its stream segment and the node cache): the RAM tier is full;
2. the proxy answers 503 SlowDown to every GET of a second object of --size-mib;
   --readers threads read 1 MiB at random offsets of it for --seconds: every read must fail
   (EIO), none may return bytes;
3. the first object is read again, byte-checked: the mount still serves.

Prints one JSON object: the mount's VmHWM and peak RssAnon during the storm and overall,
the RAM tier, the bound (RAM tier + 200 MiB), reads failed and succeeded, GETs refused.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "faults"))

from _common import drop_caches  # noqa: E402
from _mounts import Remote, cleanup_all, mount_fusecache, unmount_and_stop  # noqa: E402
from run_bench import MiB, RssSampler  # noqa: E402
from s3_fault_proxy import FaultProxy, Rule  # noqa: E402

from fusecache.config import parse_size  # noqa: E402
from fusecache.locals3 import LocalS3  # noqa: E402

BUCKET = "fcstorm"


def _upload(s3: LocalS3, key: str, size: int) -> str:
    data = os.urandom(size)
    s3.client().put_object(Bucket=BUCKET, Key=key, Body=data)
    return hashlib.sha256(data).hexdigest()


def _sha(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        while chunk := f.read(MiB):
            h.update(chunk)
    return h.hexdigest()


def _storm(path: Path, size: int, readers: int, seconds: float) -> dict:
    """Random 1 MiB reads of *path* by *readers* threads for *seconds*: counts of failed
    (OSError) and succeeded reads."""
    counts = {"failed": 0, "succeeded": 0}
    lock = threading.Lock()
    end = time.monotonic() + seconds

    def reader(i: int) -> None:
        rnd = random.Random(i)
        with open(path, "rb", buffering=0) as f:
            while time.monotonic() < end:
                off = rnd.randrange(0, size - MiB)
                try:
                    os.pread(f.fileno(), MiB, off)
                    outcome = "succeeded"
                except OSError:
                    outcome = "failed"
                with lock:
                    counts[outcome] += 1

    ts = [threading.Thread(target=reader, args=(i,)) for i in range(readers)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return counts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size-mib", type=int, default=512, help="size of each large object")
    ap.add_argument("--seconds", type=float, default=20.0, help="length of the storm")
    ap.add_argument("--readers", type=int, default=8, help="threads reading in the storm")
    ap.add_argument("--ram-cache-size", default="256MiB")
    ap.add_argument("--fusecache-opt", action="append", default=[],
                    help="extra option for 'fusecache mount' (repeatable; e.g. "
                    "--fusecache-opt=--read-timeout=5: reads fail sooner, more of them)")
    ap.add_argument("--fusecache-env", action="append", default=[], metavar="KEY=VALUE",
                    help="extra environment variable for the mount (e.g. PYTHONPATH)")
    a = ap.parse_args(argv)
    env = dict(kv.split("=", 1) for kv in a.fusecache_env)
    size = a.size_mib * MiB
    work = Path(tempfile.mkdtemp(prefix="fcstorm-", dir="/var/tmp"))
    out: dict = {"params": vars(a)}
    try:
        with LocalS3(data_dir=work / "s3") as s3, \
                FaultProxy(("127.0.0.1", int(s3.endpoint_url.rsplit(":", 1)[1]))) as proxy:
            s3.client().create_bucket(Bucket=BUCKET)
            hot = {f"hot/h{i}.bin": _upload(s3, f"hot/h{i}.bin", 16 * MiB) for i in range(8)}
            big_sha = _upload(s3, "big.bin", size)
            _upload(s3, "storm.bin", size)
            remote = Remote(endpoint_url=proxy.url, server=s3)
            p, mp, _ = mount_fusecache(remote, BUCKET, work, work / "cache",
                                       a.ram_cache_size, "storm", a.fusecache_opt, env)
            rss = RssSampler(p.pid)
            try:
                ok = all(_sha(mp / k) == v for k, v in hot.items())
                ok = _sha(mp / "big.bin") == big_sha and ok
                before = rss.stop()
                rss = RssSampler(p.pid)
                proxy.add(Rule("status", key="storm.bin", status=503, times=None))
                t = time.monotonic()
                out["storm"] = _storm(mp / "storm.bin", size, a.readers, a.seconds)
                out["storm"]["seconds"] = round(time.monotonic() - t, 1)
                out["storm"]["gets_refused"] = proxy.spoiled("storm.bin")
                out["storm"]["rss"] = rss.stop()
                rss = RssSampler(p.pid)
                drop_caches(settle_s=5)
                ok = _sha(mp / "big.bin") == big_sha and ok
                out["after"] = rss.stop()
                out["fill"] = before
            finally:
                with contextlib.suppress(Exception):
                    rss.stop()
                unmount_and_stop(mp, p)
        out["bound_mib"] = round(parse_size(a.ram_cache_size) / MiB + 200, 1)
        out["verified"] = ok and out["storm"]["succeeded"] == 0
        print(json.dumps(out, indent=1))
        return 0 if out["verified"] else 1
    finally:
        cleanup_all()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
