"""Two or more versions of fusecache side by side on cold reads of large objects, alternated.

Run (root, /dev/fuse): ``python bench/run_pair_bench.py --variant new=<worktree>
--variant old=<worktree> [--rounds 4] [--mid-files 40]``; a worktree is a folder that
holds a ``fusecache`` package (a copy of one, or a ``git worktree``);
``--variant NAME=<worktree>,KEY=VALUE`` also sets KEY in that mount's environment.

Why: on a shared 2-core machine a pass's speed moves by a third from one minute to the
next, so a change to the data path is judged by rounds in which each version reads the
same bytes right after the other (the order swapped every round), with the costs that
explain the speed: the mount's CPU seconds and minor page faults (a fresh 8 MiB buffer
costs 2,048) during the pass, and its VmHWM. Each round, for each version, on a fresh
mount and an empty node cache, page cache dropped before each pass:

* ``seq``: one object of --size-mib read from start to end in 1 MiB reads (MB/s);
* ``mid``: --mid-files objects of 1-8 MiB read whole by 4 threads (MB/s), the sizes
  whose blocks are neither a small file's nor a full block.

Every byte is compared with what was uploaded. boto3's parallel download of the large
object (16 x 8 MiB ranges, to /dev/null) is the reference, once a round. Prints one
line per pass and a JSON summary (--out to keep it).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from _common import cpu_seconds, drop_caches, local_s3, log, minor_faults  # noqa: E402
from _mounts import Remote, cleanup_all, mount_fusecache, unmount_and_stop  # noqa: E402
from run_bench import BIG_KEY, BUCKET, MiB, RssSampler, boto3_parallel  # noqa: E402


def _variants(specs: list[str]) -> list[tuple[str, Path, dict[str, str]]]:
    """(name, code folder, extra environment) of each ``NAME=FOLDER[,KEY=VALUE...]``."""
    out = []
    for spec in specs:
        name, sep, rest = spec.partition("=")
        path, *settings = rest.split(",")
        env = dict(kv.partition("=")[::2] for kv in settings)
        if not sep or not name or not (Path(path) / "fusecache" / "__init__.py").is_file() \
                or any(not k or not v for k, v in env.items()):
            raise SystemExit(f"run_pair_bench: --variant {spec!r}: expected "
                             "NAME=FOLDER[,KEY=VALUE...], FOLDER holding a fusecache package")
        out.append((name, Path(path).resolve(), env))
    if len({n for n, _, _ in out}) != len(out):
        raise SystemExit("run_pair_bench: variant names must differ")
    return out


def _seq(mp: Path, big: bytes) -> tuple[float, bool]:
    t0 = time.perf_counter()
    ok, off = True, 0
    with open(mp / BIG_KEY, "rb", buffering=0) as f:
        while chunk := f.read(MiB):
            ok = ok and chunk == big[off:off + len(chunk)]
            off += len(chunk)
    return len(big) / (time.perf_counter() - t0) / 1e6, ok and off == len(big)


def _mid(mp: Path, mids: dict[str, bytes]) -> tuple[float, bool]:
    def read(item: tuple[str, bytes]) -> bool:
        with open(mp / item[0], "rb") as f:
            return f.read() == item[1]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(4) as ex:
        ok = all(ex.map(read, mids.items()))
    return sum(map(len, mids.values())) / (time.perf_counter() - t0) / 1e6, ok


def _pass(pid: int, run) -> dict:
    drop_caches()
    cpu0, faults0 = cpu_seconds(pid), minor_faults(pid)
    mb_s, ok = run()
    return {"MB_s": round(mb_s, 1), "cpu_s": round(cpu_seconds(pid) - cpu0, 2),
            "kfaults": (minor_faults(pid) - faults0) // 1000, "verified": ok}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variant", action="append", required=True, metavar="NAME=FOLDER")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--size-mib", type=int, default=512)
    ap.add_argument("--mid-files", type=int, default=40)
    ap.add_argument("--ram-cache-size", default="256MiB")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    if a.rounds < 1 or a.size_mib < 1 or a.mid_files < 0:
        ap.error("--rounds and --size-mib must be at least 1, --mid-files at least 0")
    if os.geteuid() != 0:
        print("run_pair_bench: needs root (drop_caches, FUSE mounts)", file=sys.stderr)
        return 2
    variants = _variants(a.variant)
    rng = random.Random(a.seed)
    big = b"".join(rng.randbytes(MiB) for _ in range(a.size_mib))
    mids = {f"mid/{i:03d}.bin": rng.randbytes(rng.randint(MiB, 8 * MiB))
            for i in range(a.mid_files)}
    work = Path(tempfile.mkdtemp(prefix="fcpair-", dir="/var/tmp"))
    res: dict = {"params": {**vars(a), "out": str(a.out)}, "boto3_MB_s": [],
                 "variants": {n: [] for n, _, _ in variants}}
    try:
        with contextlib.ExitStack() as stack:
            s3 = stack.enter_context(local_s3(work / "s3", None, stack, {}))
            remote = Remote(s3.endpoint_url, s3)
            client = s3.client(s3.endpoint_url)
            client.create_bucket(Bucket=BUCKET)
            client.put_object(Bucket=BUCKET, Key=BIG_KEY, Body=big)
            with ThreadPoolExecutor(8) as ex:
                list(ex.map(lambda kv: client.put_object(Bucket=BUCKET, Key=kv[0], Body=kv[1]),
                            mids.items()))
            for r in range(a.rounds):
                res["boto3_MB_s"].append(
                    boto3_parallel(remote, {"big_bytes": len(big)}, 1)["MB_s"])
                for name, path, env in (variants if r % 2 == 0 else variants[::-1]):
                    cache = work / "cache"
                    shutil.rmtree(cache, ignore_errors=True)
                    p, mp, _ = mount_fusecache(remote, BUCKET, work, cache, a.ram_cache_size,
                                               name, [], {"PYTHONPATH": str(path), **env})
                    rss = RssSampler(p.pid)
                    os.listdir(mp)
                    row = {"seq": _pass(p.pid, lambda mp=mp: _seq(mp, big))}
                    if mids:
                        os.listdir(mp / "mid")
                        row["mid"] = _pass(p.pid, lambda mp=mp: _mid(mp, mids))
                    row["vmhwm_mib"] = rss.stop()["vmhwm_mib"]
                    unmount_and_stop(mp, p)
                    res["variants"][name].append(row)
                    log(f"round {r} {name}: {json.dumps(row)}")
                log(f"round {r} boto3: {res['boto3_MB_s'][-1]} MB/s")
    finally:
        cleanup_all()
        shutil.rmtree(work, ignore_errors=True)
    text = json.dumps(res, indent=1)
    print(text)
    if a.out:
        a.out.write_text(text)
    ok = all(p["verified"] for rows in res["variants"].values() for row in rows
             for p in (row["seq"], row.get("mid", {"verified": True})))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
