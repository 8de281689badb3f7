"""The demo: a local S3, a generated dataset, a fusecache mount read cold then cached.

Run with ``bash scripts/demo.sh`` (or ``python -m fusecache.demo`` once set up).
Everything runs on 127.0.0.1 and is removed at the end.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from fusecache.locals3 import LocalS3


def _drop_page_cache() -> bool:
    try:
        subprocess.run(["sync"], check=False)
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def _read_all(root: Path, threads: int = 4) -> tuple[int, int]:
    files = [p for p in root.rglob("*") if p.is_file()]

    def read(p: Path) -> int:
        n = 0
        with open(p, "rb", buffering=0) as f:
            while chunk := f.read(1 << 20):
                n += len(chunk)
        return n
    with ThreadPoolExecutor(threads) as ex:
        total = sum(ex.map(read, files))
    return len(files), total


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fusecache.cli", *args], env=env,
                          capture_output=True, text=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--small-files", type=int, default=400)
    ap.add_argument("--large-mib", type=int, default=256)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="fusecache-demo-"))
    mnt, cache = work / "mnt", work / "cache"
    mnt.mkdir()
    s3 = LocalS3(data_dir=work / "s3")
    env = dict(os.environ)
    env.pop("AWS_CA_BUNDLE", None)
    try:
        print(f"[1/5] starting a local S3 (SeaweedFS) in {work}/s3 ...", flush=True)
        s3.start()
        env.update(s3.env())
        c = s3.client()
        c.create_bucket(Bucket="datasets")
        rnd = random.Random(42)
        print(f"[2/5] uploading a dataset: {a.small_files} images of 60-160 KiB in 10 "
              f"classes and one {a.large_mib} MiB shard ...", flush=True)
        items = [(f"imagenet-mini/train/class{i % 10:02d}/img{i:05d}.jpg",
                  rnd.randbytes(rnd.randrange(60_000, 160_000))) for i in range(a.small_files)]
        items.append(("imagenet-mini/shards/shard-0000.tar", os.urandom(a.large_mib << 20)))
        with ThreadPoolExecutor(16) as ex:
            list(ex.map(lambda kv: c.put_object(Bucket="datasets", Key=kv[0], Body=kv[1]),
                        items))
        total = sum(len(v) for _, v in items)
        print(f"[3/5] fusecache mount s3://datasets/imagenet-mini {mnt} "
              f"--cache-dir {cache}", flush=True)
        r = _cli("mount", "s3://datasets/imagenet-mini", str(mnt), "--cache-dir", str(cache),
                 "--metadata-ttl", "indefinite", env=env)
        if r.returncode != 0:
            print(r.stderr, file=sys.stderr)
            return 1
        print(f"      {sorted(os.listdir(mnt))}  train/: {len(os.listdir(mnt / 'train'))} "
              f"classes", flush=True)
        times = []
        for n, label in ((1, "cold: every byte from S3"), (2, "cached: node cache")):
            dropped = _drop_page_cache()
            t = time.monotonic()
            nfiles, nbytes = _read_all(mnt)
            dt = time.monotonic() - t
            times.append(dt)
            assert nbytes == total, f"read {nbytes} bytes, expected {total}"
            print(f"[{3 + n}/5] pass {n} ({label}{', page cache dropped' if dropped else ''}):"
                  f" {nfiles} files, {nbytes / 1e6:.0f} MB in {dt:.2f}s = "
                  f"{nbytes / 1e6 / dt:.0f} MB/s", flush=True)
        print(f"\ncached pass is {times[0] / times[1]:.1f}x faster than the cold pass\n")
        print("fusecache stats:")
        _cli("umount", str(mnt), env=env)
        time.sleep(1.0)
        print(_cli("stats", "--cache-dir", str(cache), env=env).stdout)
        return 0
    finally:
        subprocess.run(["fusermount3", "-u", "-z", str(mnt)], capture_output=True)
        s3.cleanup()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
