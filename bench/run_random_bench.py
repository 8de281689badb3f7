"""Random small reads of a large file from a warm node cache, versions side by side.

Run (root, /dev/fuse): ``python bench/run_random_bench.py --variant new=<worktree>
--variant old=<worktree> [--size-mib 512] [--reads 2000] [--rounds 2]``; a worktree is a
folder that holds a ``fusecache`` package (a ``git archive`` of a commit, a ``git
worktree``).

Why: training data read at random inside big files (an LMDB dataset, ``np.load(mmap_mode=
'r')``, HDF5 chunks) reaches the node cache as small reads far apart. Each version mounts
one object of --size-mib, reads it once whole (the node cache holds it), is remounted (an
empty RAM tier), and then, page cache dropped before each pass, answers --reads preads
of 4 KiB at the same random offsets; the same reads of a local copy are the reference.
Every pass's bytes are hashed and must agree. Prints one line per pass.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from _common import drop_caches  # noqa: E402

from fusecache.locals3 import LocalS3  # noqa: E402

BUCKET = "randombench"


def _preads(path: Path, offsets: list[int]) -> tuple[float, str]:
    fd = os.open(path, os.O_RDONLY)
    try:
        digest = hashlib.sha256()
        t = time.perf_counter()
        for off in offsets:
            digest.update(os.pread(fd, 4096, off))
        return time.perf_counter() - t, digest.hexdigest()[:12]
    finally:
        os.close(fd)


def _cli(src: str, env: dict[str, str], *args: str) -> None:
    # (from the worktree: ``python -m`` puts its working directory before PYTHONPATH, so
    # run from a checkout it would mount that checkout's code whatever the variant)
    subprocess.run([sys.executable, "-m", "fusecache.cli", *args],
                   env={**env, "PYTHONPATH": src}, cwd=src, check=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variant", action="append", required=True, metavar="NAME=WORKTREE")
    ap.add_argument("--size-mib", type=int, default=512)
    ap.add_argument("--reads", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    variants = dict(v.split("=", 1) for v in a.variant)
    size = a.size_mib << 20
    rnd = random.Random(5)
    offsets = [rnd.randrange(0, size - 4096) for _ in range(a.reads)]
    work = Path(tempfile.mkdtemp(prefix="random-bench-", dir="/var/tmp"))
    mounted: list[tuple[str, Path]] = []
    try:
        with LocalS3(work / "s3") as s3:
            env = {**os.environ, **s3.env()}
            client = s3.client()
            client.create_bucket(Bucket=BUCKET)
            data = os.urandom(size)
            local = work / "local.bin"
            local.write_bytes(data)
            client.put_object(Bucket=BUCKET, Key="big.bin", Body=data)
            del data
            paths = {"local": local}
            for name, src in variants.items():
                mp, cache = work / f"m-{name}", work / f"cache-{name}"
                mp.mkdir()
                _cli(src, env, "mount", f"s3://{BUCKET}", str(mp), "--cache-dir", str(cache))
                mounted.append((src, mp))
                with open(mp / "big.bin", "rb") as f:  # the node cache holds it all
                    while f.read(8 << 20):
                        pass
                time.sleep(3)  # (its write-behind)
                _cli(src, env, "umount", str(mp))
                _cli(src, env, "mount", f"s3://{BUCKET}", str(mp), "--cache-dir", str(cache))
                paths[name] = mp / "big.bin"
            for r in range(a.rounds):
                for name, path in paths.items():
                    drop_caches()
                    t, digest = _preads(path, offsets)
                    print(f"round {r} {name}: {a.reads} random 4 KiB reads in {t:.2f} s "
                          f"({a.reads / t:.0f}/s) sha256 {digest}", flush=True)
            for src, mp in mounted:
                with contextlib.suppress(subprocess.CalledProcessError):
                    _cli(src, env, "umount", str(mp))
            mounted.clear()
    finally:
        for _src, mp in mounted:
            subprocess.run(["fusermount3", "-u", "-z", str(mp)], check=False)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
