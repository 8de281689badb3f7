#!/usr/bin/env python3
"""Where the machine's CPU goes in a cold read: SeaweedFS, the mount (per thread), the
reader, against boto3 reading the same bytes, on one SeaweedFS on 127.0.0.1. As root
(FUSE, drop_caches).

    python bench/run_cpu_budget.py [--size-mib 512] [--files 1200] [--readers 16] [--rounds 2]

Each round: boto3 reads the object with 16 ranged GETs of 8 MiB at once; a fresh mount
(empty node cache) reads it with 1 MiB reads; the same mount reads the small files cold
(60-160 KiB in 12 folders, one shuffled order, --readers threads). Page cache dropped
before every pass. Per pass: MB/s or files/s, the machine's CPU seconds (/proc/stat), the
SeaweedFS processes', the mount's by thread name. On this project's 2-core VM it answers
how far a cold pass can go at all: a pass cannot take less than (its CPU seconds) / 2,
so a target ratio against boto3 or a peer fixes how much CPU per byte or per file the
mount may spend.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import cpu_seconds, drop_caches, machine_cpu_seconds  # noqa: E402
from _mounts import unmount_and_stop, wait_mounted  # noqa: E402

from fusecache.locals3 import LocalS3  # noqa: E402

BUCKET = "cpubudget"


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds of each thread of *pid*, summed by thread name (digits dropped)."""
    out: dict[str, float] = {}
    for t in glob.glob(f"/proc/{pid}/task/*"):
        try:
            name = Path(t, "comm").read_text().strip().rstrip("0123456789-")
        except OSError:
            continue
        out[name] = out.get(name, 0.0) + (cpu_seconds(pid, int(t.rsplit("/", 1)[1])) or 0.0)
    return out


def pids_of(pattern: str) -> list[int]:
    r = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True)
    return [int(p) for p in r.stdout.split()]


class Pass:
    """CPU of the machine, SeaweedFS and (optionally) one mount over a timed pass."""

    def __init__(self, weed: list[int], mount_pid: int | None = None) -> None:
        self.weed, self.mount_pid = weed, mount_pid

    def __enter__(self) -> Pass:
        self.m0, self.w0 = machine_cpu_seconds(), self._weed()
        self.t0 = thread_cpu(self.mount_pid) if self.mount_pid else {}
        self.start = time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.monotonic() - self.start
        self.machine = machine_cpu_seconds() - self.m0
        self.weed_s = self._weed() - self.w0
        t1 = thread_cpu(self.mount_pid) if self.mount_pid else {}
        self.threads = {k: round(v - self.t0.get(k, 0.0), 3) for k, v in t1.items()
                        if v - self.t0.get(k, 0.0) >= 0.005}

    def _weed(self) -> float:
        return sum(cpu_seconds(p) or 0.0 for p in self.weed)

    def row(self, **extra: object) -> dict[str, object]:
        return {**extra, "wall_s": round(self.wall, 3), "machine_cpu_s": round(self.machine, 3),
                "seaweedfs_cpu_s": round(self.weed_s, 3),
                "mount_cpu_s": round(sum(self.threads.values()), 3) if self.threads else None,
                "mount_threads": self.threads or None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mib", type=int, default=512)
    ap.add_argument("--files", type=int, default=1200)
    ap.add_argument("--readers", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--fusecache-opt", action="append", default=[], metavar="OPT")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("run as root (FUSE mounts, drop_caches)", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="fc-cpu-", dir="/var/tmp"))
    s3 = LocalS3(data_dir=work / "s3").start()
    rows: list[dict[str, object]] = []
    try:
        c = s3.client()
        c.create_bucket(Bucket=BUCKET)
        c.put_object(Bucket=BUCKET, Key="big", Body=os.urandom(64 << 20) * (args.size_mib // 64))
        size = (args.size_mib // 64) * (64 << 20)
        rnd = random.Random(1)
        names = [f"small/d{i % 12}/f{i:05d}.bin" for i in range(args.files)]
        with ThreadPoolExecutor(16) as ex:
            list(ex.map(lambda k: c.put_object(Bucket=BUCKET, Key=k, Body=os.urandom(
                rnd.randint(60, 160) * 1024)), names))
        weed = pids_of(str(work / "s3"))
        env = {**os.environ, **s3.env()}
        for rnd_i in range(args.rounds):
            drop_caches(5)

            def rng(i: int) -> int:
                r = c.get_object(Bucket=BUCKET, Key="big",
                                 Range=f"bytes={i << 23}-{((i + 1) << 23) - 1}")
                return len(r["Body"].read())

            with Pass(weed) as p, ThreadPoolExecutor(16) as ex:
                n = sum(ex.map(rng, range(size >> 23)))
            rows.append(p.row(round=rnd_i, reader="boto3 16 x 8 MiB", MB_s=round(n / p.wall / 1e6)))
            mp = work / "mnt"
            mp.mkdir(exist_ok=True)
            proc = subprocess.Popen(
                [sys.executable, "-m", "fusecache.cli", "mount", f"s3://{BUCKET}", str(mp),
                 "--endpoint-url", s3.endpoint_url, "--cache-dir", str(work / f"cache{rnd_i}"),
                 "--metadata-ttl", "indefinite", "--foreground", "--log-level", "warning",
                 *args.fusecache_opt], env=env, cwd=work)
            try:
                wait_mounted(mp, proc)
                os.stat(mp / "big")
                drop_caches(5)
                with Pass(weed, proc.pid) as p:
                    n = 0
                    with open(mp / "big", "rb", buffering=0) as f:
                        while b := f.read(1 << 20):
                            n += len(b)
                assert n == size, f"read {n} of {size} bytes"
                rows.append(p.row(round=rnd_i, reader="mount, cold, 1 MiB reads",
                                  MB_s=round(n / p.wall / 1e6)))
                order = names[:]
                random.Random(rnd_i).shuffle(order)
                drop_caches(5)

                def read(k: str, mp: Path = mp) -> int:  # (this round's mount)
                    with open(mp / k, "rb") as f:
                        return len(f.read())

                with Pass(weed, proc.pid) as p, ThreadPoolExecutor(args.readers) as ex:
                    sum(ex.map(read, order))
                row = p.row(round=rnd_i, reader=f"mount, cold small files, {args.readers} "
                            "readers", files_s=round(len(order) / p.wall))
                for k in ("machine_cpu_s", "seaweedfs_cpu_s", "mount_cpu_s"):
                    if row[k] is not None:
                        row[k.replace("_s", "_ms_per_file")] = round(
                            float(row[k]) / len(order) * 1e3, 3)  # type: ignore[arg-type]
                rows.append(row)
            finally:
                unmount_and_stop(mp, proc)
    finally:
        s3.stop()
        subprocess.run(["rm", "-rf", str(work)], check=False)
    for r in rows:
        print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
