#!/usr/bin/env python3
"""Side-by-side read benchmark: local disk, s3fs, rclone, fusecache, boto3.

One run, one dataset, one embedded SeaweedFS on 127.0.0.1. See bench/README.md for
what each number means. Run as root (drops the page cache, mounts FUSE):

    source scripts/setup.sh && python bench/run_bench.py

Every mount and every process this script starts is recorded and torn down in a
``finally`` (fusermount3 -u -z, then SIGTERM/SIGKILL of the process group), also on
Ctrl-C, SIGTERM or an exception.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _common import PROCS as _PROCS
from _common import drop_caches, local_s3, log, start_run
from _mounts import (
    Remote,
    cleanup_all,
    mount_fusecache,
    mount_rclone,
    mount_s3fs,
    start_pyspy,
    stop_pyspy,
    unmount_and_stop,
)

MiB = 1 << 20
KiB = 1 << 10
READ_SIZE = 1 * MiB
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BUCKET = "fcbench"
BIG_KEY = "big/large.bin"
SMALL_PREFIX = "small/"

# ---------------------------------------------------------------------------------------
# memory sampling

class RssSampler:
    """Peak VmRSS (and its anonymous and file-backed parts) of one process, sampled
    every 20 ms, plus the kernel's VmHWM. RssFile is mostly LMDB's memory map: page
    cache the kernel can reclaim; RssAnon is the process's own heap."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak_rss = 0
        self.hwm = 0
        self.peak_anon = 0
        self.peak_file = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _sample(self) -> None:
        v = {}
        try:
            with open(f"/proc/{self.pid}/status") as f:
                for line in f:
                    k, _, rest = line.partition(":")
                    if k in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem"):
                        v[k] = int(rest.split()[0]) * KiB
        except OSError:
            return
        self.peak_rss = max(self.peak_rss, v.get("VmRSS", 0))
        self.hwm = max(self.hwm, v.get("VmHWM", 0))
        self.peak_anon = max(self.peak_anon, v.get("RssAnon", 0))
        self.peak_file = max(self.peak_file, v.get("RssFile", 0) + v.get("RssShmem", 0))

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self._sample()

    def stop(self) -> dict:
        self._sample()
        self._stop.set()
        self._t.join()
        return {"peak_rss_mib": round(self.peak_rss / MiB, 1),
                "vmhwm_mib": round(self.hwm / MiB, 1),
                "peak_rss_anon_mib": round(self.peak_anon / MiB, 1),
                "peak_rss_file_mib": round(self.peak_file / MiB, 1)}


# ---------------------------------------------------------------------------------------
# dataset

def make_dataset(d: Path, big_mib: int, n_small: int, seed: int) -> dict:
    rnd = random.Random(seed)
    (d / "big").mkdir(parents=True, exist_ok=True)
    (d / "small").mkdir(parents=True, exist_ok=True)
    big = d / BIG_KEY
    with open(big, "wb") as f:
        for _ in range(big_mib):
            f.write(os.urandom(MiB))
    sizes = [rnd.randint(60 * KiB, 160 * KiB) for _ in range(n_small)]
    names = []
    for i, sz in enumerate(sizes):
        name = f"f{i:05d}.bin"
        (d / "small" / name).write_bytes(os.urandom(sz))
        names.append(name)
    return {"big_bytes": big_mib * MiB, "small_names": names, "small_bytes": sum(sizes),
            "small_sizes": dict(zip(names, sizes, strict=True))}


def fingerprint_big(path: Path) -> list[bytes]:
    """First 16 bytes of every 1 MiB chunk: a cheap check that a reader got the right bytes."""
    out = []
    with open(path, "rb", buffering=0) as f:
        off = 0
        size = os.fstat(f.fileno()).st_size
        while off < size:
            out.append(os.pread(f.fileno(), 16, off))
            off += READ_SIZE
    return out


def upload(s3, data: Path, ds: dict) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from boto3.s3.transfer import TransferConfig

    c = s3.client()
    c.create_bucket(Bucket=BUCKET)
    cfg = TransferConfig(multipart_threshold=8 * MiB, multipart_chunksize=8 * MiB,
                         max_concurrency=16)
    c.upload_file(str(data / BIG_KEY), BUCKET, BIG_KEY, Config=cfg)
    with ThreadPoolExecutor(16) as ex:
        list(ex.map(lambda n: c.put_object(Bucket=BUCKET, Key=SMALL_PREFIX + n,
                                           Body=(data / "small" / n).read_bytes()),
                    ds["small_names"]))


# ---------------------------------------------------------------------------------------
# workloads

def seq_read(root: Path, ds: dict, expect: list[bytes]) -> dict:
    """One reader, 1 MiB reads, start to end of the large object."""
    drop_caches()
    buf = bytearray(READ_SIZE)
    mv = memoryview(buf)
    heads = []
    total = 0
    t0 = time.perf_counter()
    with open(root / BIG_KEY, "rb", buffering=0) as f:
        while True:
            n = f.readinto(mv)
            if not n:
                break
            if n == READ_SIZE or total % READ_SIZE == 0:
                heads.append(bytes(mv[:16]))
            total += n
    dt = time.perf_counter() - t0
    ok = total == ds["big_bytes"] and heads == expect
    return {"seconds": round(dt, 3), "MB_s": round(total / dt / 1e6, 1), "bytes": total,
            "verified": ok}


def small_read(root: Path, ds: dict, threads: int) -> dict:
    """List the small-file directory, then read every file whole with *threads* readers."""
    drop_caches()
    sizes = ds["small_sizes"]
    q: queue.SimpleQueue = queue.SimpleQueue()
    bad: list[str] = []
    nbytes = [0] * threads

    def worker(i: int) -> None:
        while True:
            try:
                name = q.get_nowait()
            except queue.Empty:
                return
            with open(root / "small" / name, "rb", buffering=0) as f:
                data = f.readall()
            nbytes[i] += len(data)
            if len(data) != sizes[name]:
                bad.append(name)

    t0 = time.perf_counter()
    names = sorted(os.listdir(root / "small"))
    t_list = time.perf_counter() - t0
    for n in names:
        q.put(n)
    ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    dt = time.perf_counter() - t0
    ok = not bad and names == sorted(sizes) and sum(nbytes) == ds["small_bytes"]
    return {"seconds": round(dt, 3), "files_s": round(len(names) / dt, 1),
            "list_seconds": round(t_list, 3), "files": len(names), "verified": ok}


def two_passes(root: Path, ds: dict, expect: list[bytes], threads: int,
               passes: tuple[str, ...] = ("pass1", "pass2")) -> dict:
    out = {}
    for p in passes:
        out[p] = {"seq": seq_read(root, ds, expect), "small": small_read(root, ds, threads)}
        log(f"    {p}: seq {out[p]['seq']['MB_s']} MB/s, small {out[p]['small']['files_s']} "
            f"files/s (verified {out[p]['seq']['verified'] and out[p]['small']['verified']})")
    return out


def boto3_parallel(s3, ds: dict, runs: int) -> dict:
    """Direct parallel ranged download of the large object into /dev/null."""
    from boto3.s3.transfer import TransferConfig

    cfg = TransferConfig(multipart_threshold=8 * MiB, multipart_chunksize=8 * MiB,
                         max_concurrency=16, use_threads=True)
    c = s3.client()
    res = []
    for _ in range(runs):
        drop_caches()
        t0 = time.perf_counter()
        with open("/dev/null", "wb") as f:
            c.download_fileobj(BUCKET, BIG_KEY, f, Config=cfg)
        dt = time.perf_counter() - t0
        res.append(round(ds["big_bytes"] / dt / 1e6, 1))
    return {"runs_MB_s": res, "MB_s": max(res)}


# ---------------------------------------------------------------------------------------

def ratio(a, b):
    return round(a / b, 2) if a and b else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mib", type=int, default=512, help="large object size (MiB)")
    ap.add_argument("--small-files", type=int, default=600)
    ap.add_argument("--threads", type=int, default=4, help="small-file readers")
    ap.add_argument("--ram-cache-size", default="256MiB", help="fusecache RAM tier")
    ap.add_argument("--fusecache-opt", action="append", default=[],
                    help="extra option for 'fusecache mount' (repeatable)")
    ap.add_argument("--fusecache-env", action="append", default=[], metavar="KEY=VALUE",
                    help="extra environment variable for the fusecache mount process, "
                         "e.g. MALLOC_ARENA_MAX=2 (repeatable)")
    ap.add_argument("--readers", default="local,boto3,s3fs,rclone,fusecache",
                    help="comma-separated subset to run")
    ap.add_argument("--boto3-runs", type=int, default=2)
    ap.add_argument("--profile", action="store_true",
                    help="attach 'py-spy record --format raw' to the fusecache mount "
                         "process (perturbs its numbers; profile in bench/results/)")
    ap.add_argument("--workdir", type=Path, default=None,
                    help="scratch dir on local disk (default: a new dir in /var/tmp)")
    ap.add_argument("--keep", action="store_true", help="keep the workdir")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--bandwidth", type=int, default=None, metavar="MBIT",
                    help="run S3 in a network namespace of its own behind a tbf-shaped "
                         "veth link of MBIT Mbit/s (link-bound instead of CPU-bound)")
    ap.add_argument("--out", type=Path, default=None, help="JSON output path")
    a = ap.parse_args()

    if os.geteuid() != 0:
        print("run_bench: needs root (drop_caches, FUSE mounts)", file=sys.stderr)
        return 2
    sys.path.insert(0, str(ROOT))
    from fusecache.config import parse_size

    fc_env = dict(kv.split("=", 1) for kv in a.fusecache_env)
    readers = [r.strip() for r in a.readers.split(",") if r.strip()]
    ram_bytes = parse_size(a.ram_cache_size)
    work = a.workdir or Path(tempfile.mkdtemp(prefix="fcbench-", dir="/var/tmp"))
    work.mkdir(parents=True, exist_ok=True)
    results_dir = HERE / "results"
    results_dir.mkdir(exist_ok=True)
    res: dict = start_run()
    stamp = res["started"]
    out_path = a.out or results_dir / f"bench-{stamp}.json"
    res.update({
        "params": {"size_mib": a.size_mib, "small_files": a.small_files,
                   "threads": a.threads, "read_size": READ_SIZE,
                   "ram_cache_size": a.ram_cache_size, "fusecache_opts": a.fusecache_opt,
                   "fusecache_env": fc_env},
        "metadata_caching": (
            "fusecache --metadata-ttl indefinite; s3fs stat_cache_expire=86400 + "
            "enable_noobj_cache; rclone --dir-cache-time 24h --attr-timeout 24h"),
        "readers": {},
    })
    link = contextlib.ExitStack()
    s3 = local_s3(work / "s3", a.bandwidth, link, res["params"])
    t_start = time.monotonic()
    try:
        log(f"workdir {work}; starting SeaweedFS")
        s3.start()
        _PROCS.append(s3.proc)
        data = work / "data"
        log(f"generating dataset: {a.size_mib} MiB object + {a.small_files} small files")
        ds = make_dataset(data, a.size_mib, a.small_files, a.seed)
        res["params"]["small_bytes_avg_kib"] = round(ds["small_bytes"] / a.small_files / KiB, 1)
        expect = fingerprint_big(data / BIG_KEY)
        log("uploading to S3")
        upload(s3, data, ds)
        log(f"dataset ready ({time.monotonic() - t_start:.0f}s)")

        if "local" in readers:
            log("local disk")
            res["readers"]["local"] = two_passes(data, ds, expect, a.threads)

        if "boto3" in readers:
            log("boto3 parallel download (16 x 8 MiB ranged GETs, into /dev/null)")
            res["readers"]["boto3"] = boto3_parallel(s3, ds, a.boto3_runs)
            log(f"    {res['readers']['boto3']}")

        remote = Remote(s3.endpoint_url, s3)
        for name, mounter in (("s3fs", mount_s3fs), ("rclone", mount_rclone)):
            if name not in readers:
                continue
            log(name)
            p, mp, cmd = mounter(remote, BUCKET, work)
            rss = RssSampler(p.pid)
            try:
                r = two_passes(mp, ds, expect, a.threads)
            finally:
                r["rss"] = rss.stop()
                unmount_and_stop(mp, p)
            r["cmd"] = remote.mask(cmd)
            res["readers"][name] = r

        if "fusecache" in readers:
            cache = work / "cache-fusecache"
            shutil.rmtree(cache, ignore_errors=True)
            log("fusecache: fresh cache dir, pass 1 (cold) and pass 2 (same mount)")
            p, mp, cmd = mount_fusecache(remote, BUCKET, work, cache, a.ram_cache_size, "a",
                                         a.fusecache_opt, fc_env)
            rss = RssSampler(p.pid)
            spy = start_pyspy(p.pid, results_dir / f"profile-{stamp}-mount1.txt", work) \
                if a.profile else None
            try:
                r = two_passes(mp, ds, expect, a.threads)
            finally:
                stop_pyspy(spy)
                r["rss"] = rss.stop()
                unmount_and_stop(mp, p)
            log("fusecache: remount on the warm node cache (fresh RAM tier), pass 3")
            p, mp, _ = mount_fusecache(remote, BUCKET, work, cache, a.ram_cache_size, "b",
                                       a.fusecache_opt, fc_env)
            rss = RssSampler(p.pid)
            spy = start_pyspy(p.pid, results_dir / f"profile-{stamp}-mount2.txt", work) \
                if a.profile else None
            try:
                r.update(two_passes(mp, ds, expect, a.threads, passes=("pass3_remount",)))
            finally:
                stop_pyspy(spy)
                r["rss_remount"] = rss.stop()
                unmount_and_stop(mp, p)
            r["cmd"] = " ".join(cmd)
            r["ram_cache_mib"] = round(ram_bytes / MiB, 1)
            st = subprocess.run([sys.executable, "-m", "fusecache.cli", "stats",
                                 "--cache-dir", str(cache), "--json"],
                                capture_output=True, text=True)
            with contextlib.suppress(ValueError):
                r["node_cache_stats"] = json.loads(st.stdout)
            res["readers"]["fusecache"] = r
    finally:
        cleanup_all()
        s3.stop()
        link.close()
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            log(f"kept {work}")

    res["elapsed_s"] = round(time.monotonic() - t_start, 1)
    res["ratios"] = ratios_and_targets(res, ram_bytes)
    out_path.write_text(json.dumps(res, indent=2))
    print_table(res)
    log(f"JSON: {out_path}")
    return 0


def _get(res, reader, p, w, k):
    try:
        return res["readers"][reader][p][w][k]
    except KeyError:
        return None


def ratios_and_targets(res: dict, ram_bytes: int) -> dict:
    fc2_seq = _get(res, "fusecache", "pass2", "seq", "MB_s")
    fc2_small = _get(res, "fusecache", "pass2", "small", "files_s")
    fc1_seq = _get(res, "fusecache", "pass1", "seq", "MB_s")
    boto = res["readers"].get("boto3", {}).get("MB_s")
    out = {
        "cached_seq_fusecache_over_s3fs": ratio(fc2_seq, _get(res, "s3fs", "pass2", "seq", "MB_s")),
        "cached_seq_fusecache_over_rclone": ratio(fc2_seq,
                                                  _get(res, "rclone", "pass2", "seq", "MB_s")),
        "cached_small_fusecache_over_s3fs": ratio(fc2_small,
                                                  _get(res, "s3fs", "pass2", "small", "files_s")),
        "cached_small_fusecache_over_rclone": ratio(
            fc2_small, _get(res, "rclone", "pass2", "small", "files_s")),
        "cold_seq_fusecache_over_boto3": ratio(fc1_seq, boto),
        "cold_small_fusecache_over_s3fs": ratio(
            _get(res, "fusecache", "pass1", "small", "files_s"),
            _get(res, "s3fs", "pass1", "small", "files_s")),
        "remount_seq_fusecache_over_s3fs_cached": ratio(
            _get(res, "fusecache", "pass3_remount", "seq", "MB_s"),
            _get(res, "s3fs", "pass2", "seq", "MB_s")),
        "remount_small_fusecache_over_s3fs_cached": ratio(
            _get(res, "fusecache", "pass3_remount", "small", "files_s"),
            _get(res, "s3fs", "pass2", "small", "files_s")),
    }
    fc = res["readers"].get("fusecache", {})
    rss = max([fc.get(k, {}).get("vmhwm_mib", 0) for k in ("rss", "rss_remount")] or [0])
    anon = max([fc.get(k, {}).get("peak_rss_anon_mib", 0) for k in ("rss", "rss_remount")]
               or [0])
    out["fusecache_peak_rss_mib"] = rss or None
    out["fusecache_peak_rss_anon_mib"] = anon or None
    out["fusecache_rss_limit_mib"] = round(ram_bytes / MiB + 200, 1)

    def chk(v, t):
        return None if v is None else bool(v >= t)
    out["targets"] = {
        "cached seq >= 2x s3fs": chk(out["cached_seq_fusecache_over_s3fs"], 2),
        "cached small >= 4x s3fs": chk(out["cached_small_fusecache_over_s3fs"], 4),
        "cached small >= 4x rclone": chk(out["cached_small_fusecache_over_rclone"], 4),
        "cold seq >= 0.9x boto3": chk(out["cold_seq_fusecache_over_boto3"], 0.9),
        "RSS (VmHWM) <= RAM tier + 200 MiB": None if not rss else bool(
            rss <= out["fusecache_rss_limit_mib"]),
        "RssAnon <= RAM tier + 200 MiB": None if not anon else bool(
            anon <= out["fusecache_rss_limit_mib"]),
    }
    return out


def print_table(res: dict) -> None:
    p = res["params"]
    print()
    print(f"fusecache bench: {p['size_mib']} MiB object read sequentially in 1 MiB reads "
          f"(1 reader, MB/s = 1e6 B/s); {p['small_files']} files of 60-160 KiB "
          f"(avg {p.get('small_bytes_avg_kib')} KiB), {p['threads']} readers, files/s; "
          "page cache dropped before every measurement.")
    print(f"metadata caching: {res['metadata_caching']}")
    hdr = f"{'reader':<28}{'seq p1':>10}{'seq p2':>10}{'small p1':>10}{'small p2':>10}" \
          f"{'RSS/anon MiB':>14}  ok"
    print(hdr)
    print("-" * len(hdr))
    for name, r in res["readers"].items():
        if name == "boto3":
            print(f"{'boto3 parallel (16x8MiB)':<28}{r['MB_s']:>10}{'':>30}  "
                  f"runs {r['runs_MB_s']}")
            continue
        p3 = r.get("pass3_remount")

        def cell(pn, w, k, name=name):
            v = _get(res, name, pn, w, k)
            return "-" if v is None else v
        ok = all(r[pn][w]["verified"] for pn in ("pass1", "pass2", "pass3_remount")
                 if pn in r for w in ("seq", "small"))
        rr = r.get("rss")
        rss = f"{rr['vmhwm_mib']:.0f}/{rr['peak_rss_anon_mib']:.0f}" if rr else "-"
        print(f"{name:<28}{cell('pass1', 'seq', 'MB_s'):>10}{cell('pass2', 'seq', 'MB_s'):>10}"
              f"{cell('pass1', 'small', 'files_s'):>10}{cell('pass2', 'small', 'files_s'):>10}"
              f"{rss:>14}  {'yes' if ok else 'NO'}")
        if p3:
            print(f"{'  fusecache remount (p3)':<28}{'':>10}{p3['seq']['MB_s']:>10}{'':>10}"
                  f"{p3['small']['files_s']:>10}{r['rss_remount']['vmhwm_mib']:>10.0f}/"
                  f"{r['rss_remount']['peak_rss_anon_mib']:.0f}")
    print()
    for k, v in res["ratios"].items():
        if k != "targets":
            print(f"{k:<44}{v}")
    print("targets:")
    for k, v in res["ratios"]["targets"].items():
        print(f"  {k:<36}{'n/a' if v is None else ('MET' if v else 'MISSED')}")
    print(f"elapsed {res['elapsed_s']} s")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("interrupted; mounts and processes cleaned up", file=sys.stderr)
        sys.exit(130)
