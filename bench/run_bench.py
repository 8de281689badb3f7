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
from _common import (
    cpu_seconds,
    drop_caches,
    latency_proxy,
    local_s3,
    log,
    minor_faults,
    page_cache_fill,
    start_run,
)
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
# read at random places (random_read): half the large object's size, a folder of its own
RAND_KEY = "rand/random.bin"


def small_prefix(readers: int) -> str:
    """Each reader count reads a folder of its own, so every count gets a cold pass."""
    return f"small-r{readers}/"

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

def _write_random(path: Path, mib: int) -> None:
    with open(path, "wb") as f:
        for _ in range(mib):
            f.write(os.urandom(MiB))


def make_dataset(d: Path, big_mib: int, n_small: int, seed: int,
                 small_readers: list[int]) -> dict:
    """One large object, one of half its size for random reads, and, per reader count,
    *n_small* files of 60-160 KiB."""
    rnd = random.Random(seed)
    (d / "big").mkdir(parents=True, exist_ok=True)
    _write_random(d / BIG_KEY, big_mib)
    (d / RAND_KEY).parent.mkdir(parents=True, exist_ok=True)
    _write_random(d / RAND_KEY, max(1, big_mib // 2))
    sets = {}
    for n in small_readers:
        folder = d / small_prefix(n)
        folder.mkdir(parents=True, exist_ok=True)
        sizes = {}
        for i in range(n_small):
            name = f"f{i:05d}.bin"
            sz = rnd.randint(60 * KiB, 160 * KiB)
            (folder / name).write_bytes(os.urandom(sz))
            sizes[name] = sz
        sets[n] = {"prefix": small_prefix(n), "sizes": sizes, "bytes": sum(sizes.values())}
    return {"big_bytes": big_mib * MiB, "small": sets,
            "small_bytes": sum(v["bytes"] for v in sets.values())}


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
    c.upload_file(str(data / RAND_KEY), BUCKET, RAND_KEY, Config=cfg)
    keys = [st["prefix"] + n for st in ds["small"].values() for n in st["sizes"]]
    with ThreadPoolExecutor(16) as ex:
        list(ex.map(lambda k: c.put_object(Bucket=BUCKET, Key=k, Body=(data / k).read_bytes()),
                    keys))


# ---------------------------------------------------------------------------------------
# workloads

def seq_read(root: Path, ds: dict, expect: list[bytes]) -> dict:
    """One reader, 1 MiB reads, start to end of the large object; also the time from the
    open to the first read's bytes (first_read_ms)."""
    drop_caches()
    buf = bytearray(READ_SIZE)
    mv = memoryview(buf)
    heads = []
    total = 0
    first = None
    t0 = time.perf_counter()
    with open(root / BIG_KEY, "rb", buffering=0) as f:
        while True:
            n = f.readinto(mv)
            if first is None:
                first = time.perf_counter() - t0
            if not n:
                break
            if n == READ_SIZE or total % READ_SIZE == 0:
                heads.append(bytes(mv[:16]))
            total += n
    dt = time.perf_counter() - t0
    ok = total == ds["big_bytes"] and heads == expect
    return {"seconds": round(dt, 3), "MB_s": round(total / dt / 1e6, 1), "bytes": total,
            "first_read_ms": round((first or 0.0) * 1000, 1), "verified": ok}


RANDOM_READS = 32
RANDOM_SIZE = 64 * KiB


def random_read(root: Path, ds: dict) -> dict:
    """One reader, up to RANDOM_READS reads of 64 KiB of RAND_KEY, each at the start of a
    MiB chosen at random, one in each of as many 8 MiB stretches (the same MiBs for every
    reader): the latency of a read that wants a little of a cold block (a header, a
    random sample)."""
    drop_caches()
    expect = ds["rand_expect"]
    rnd = random.Random(7)
    n = max(1, len(expect) // 8)
    stretches = rnd.sample(range(n), min(RANDOM_READS, n))
    mibs = [min(len(expect) - 1, k * 8 + rnd.randrange(8)) for k in stretches]
    took = []
    ok = True
    fd = os.open(root / RAND_KEY, os.O_RDONLY)
    try:
        for i in mibs:
            t = time.perf_counter()
            got = os.pread(fd, RANDOM_SIZE, i * MiB)
            took.append(time.perf_counter() - t)
            ok = ok and len(got) == RANDOM_SIZE and got[:16] == expect[i]
    finally:
        os.close(fd)
    took.sort()
    return {"reads": len(took), "reads_s": round(len(took) / sum(took), 1),
            "p50_ms": round(took[len(took) // 2] * 1000, 1),
            "p90_ms": round(took[int(len(took) * 0.9)] * 1000, 1), "verified": ok}


def small_read(root: Path, ds: dict, threads: int) -> dict:
    """List the folder of this reader count, then read every file whole with *threads*
    readers taking names from one shuffled queue."""
    drop_caches()
    st = ds["small"][threads]
    sizes = st["sizes"]
    q: queue.SimpleQueue = queue.SimpleQueue()
    bad: list[str] = []
    nbytes = [0] * threads
    folder = root / st["prefix"]

    def worker(i: int) -> None:
        while True:
            try:
                name = q.get_nowait()
            except queue.Empty:
                return
            with open(folder / name, "rb", buffering=0) as f:
                data = f.readall()
            nbytes[i] += len(data)
            if len(data) != sizes[name]:
                bad.append(name)

    t0 = time.perf_counter()
    names = sorted(os.listdir(folder))
    t_list = time.perf_counter() - t0
    order = list(names)
    random.Random(threads).shuffle(order)
    for n in order:
        q.put(n)
    ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    dt = time.perf_counter() - t0
    ok = not bad and names == sorted(sizes) and sum(nbytes) == st["bytes"]
    return {"seconds": round(dt, 3), "files_s": round(len(names) / dt, 1),
            "list_seconds": round(t_list, 3), "files": len(names), "readers": threads,
            "verified": ok}


def small_key(threads: int) -> str:
    return f"small_r{threads}"


def two_passes(root: Path, ds: dict, expect: list[bytes], small_readers: list[int],
               passes: tuple[str, ...] = ("pass1", "pass2"), spy=None,
               pid: int | None = None) -> dict:
    """Per pass: the large object, then each small-file set. *spy(pass, workload)* is a
    context manager that profiles one workload (``--profile``). With the *pid* of the
    mount process, each workload also records that process's CPU seconds and minor page
    faults."""
    out = {}
    spy = spy or (lambda p, w: contextlib.nullcontext())

    def timed(fn, *args) -> dict:
        c0, f0 = cpu_seconds(pid), minor_faults(pid)
        r = fn(*args)
        c1, f1 = cpu_seconds(pid), minor_faults(pid)
        if c0 is not None and c1 is not None:
            r["mount_cpu_s"] = round(c1 - c0, 2)
        if f0 is not None and f1 is not None:
            r["mount_minor_faults"] = f1 - f0
        return r
    for p in passes:
        with spy(p, "seq"):
            out[p] = {"seq": timed(seq_read, root, ds, expect)}
        for n in small_readers:
            with spy(p, small_key(n)):
                out[p][small_key(n)] = timed(small_read, root, ds, n)
        ok = all(v["verified"] for v in out[p].values())
        smalls = ", ".join(f"{n} readers {out[p][small_key(n)]['files_s']}"
                           for n in small_readers)
        cpu = ", ".join(f"{w} {v['mount_cpu_s']}" for w, v in out[p].items()
                        if "mount_cpu_s" in v)
        log(f"    {p}: seq {out[p]['seq']['MB_s']} MB/s, small files/s: {smalls} "
            f"(verified {ok})" + (f"; mount process CPU s: {cpu}" if cpu else ""))
    # Once per mount, after its passes, so that its blocks evict nothing the passes read:
    # RAND_KEY is read by nothing else, so it is cold in a fresh mount and cache, and
    # comes from the node cache after a remount.
    p = passes[-1]
    with spy(p, "random"):
        out[p]["random"] = timed(random_read, root, ds)
    r = out[p]["random"]
    log(f"    random 64 KiB reads: p50 {r['p50_ms']} ms, p90 {r['p90_ms']} ms "
        f"(verified {r['verified']})")
    return out


def boto3_parallel(remote: Remote, ds: dict, runs: int) -> dict:
    """Direct parallel ranged download of the large object into /dev/null."""
    from boto3.s3.transfer import TransferConfig

    cfg = TransferConfig(multipart_threshold=8 * MiB, multipart_chunksize=8 * MiB,
                         max_concurrency=16, use_threads=True)
    c = remote.server.client(remote.endpoint_url)
    res = []
    for _ in range(runs):
        drop_caches()
        t0 = time.perf_counter()
        with open("/dev/null", "wb") as f:
            c.download_fileobj(BUCKET, BIG_KEY, f, Config=cfg)
        dt = time.perf_counter() - t0
        res.append(round(ds["big_bytes"] / dt / 1e6, 1))
    return {"runs_MB_s": res, "MB_s": max(res)}


def boto3_small(remote: Remote, ds: dict, readers: int, runs: int) -> dict:
    """The small-file reference for ``prefetchd warm``: list the set's prefix, then 16
    threads of get_object().read() (bytes counted, then discarded)."""
    from concurrent.futures import ThreadPoolExecutor

    c = remote.server.client(remote.endpoint_url)
    st = ds["small"][readers]
    res, ok = [], True
    for _ in range(runs):
        drop_caches()
        t0 = time.perf_counter()
        keys = [o["Key"] for page in c.get_paginator("list_objects_v2").paginate(
            Bucket=BUCKET, Prefix=st["prefix"]) for o in page.get("Contents", ())]
        with ThreadPoolExecutor(16) as ex:
            got = sum(ex.map(lambda k: len(c.get_object(Bucket=BUCKET, Key=k)["Body"].read()),
                             keys))
        dt = time.perf_counter() - t0
        ok = ok and got == st["bytes"] and len(keys) == len(st["sizes"])
        res.append(round(len(keys) / dt, 1))
    return {"runs_files_s": res, "files_s": max(res), "verified": ok}


def prefetchd_warm(remote: Remote, data: Path, work: Path, prefix: str,
                   keys: dict[str, int], runs: int) -> dict:
    """``prefetchd warm s3://BUCKET/PREFIX`` into a fresh cache dir, as a user runs it;
    then every cached block is read back and compared with the uploaded bytes."""
    import fusecache

    best: dict = {}
    runs_out = []
    for i in range(runs):
        cache = work / f"cache-warm-{prefix.strip('/')}-{i}"
        shutil.rmtree(cache, ignore_errors=True)
        drop_caches()
        env = dict(os.environ)
        env.update(remote.env())
        cmd = [sys.executable, "-m", "prefetchd.cli", "warm", f"s3://{BUCKET}/{prefix}",
               "--cache-dir", str(cache), "--endpoint-url", remote.endpoint_url, "--json"]
        t0 = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        wall = time.perf_counter() - t0
        if r.returncode != 0:
            raise RuntimeError(f"prefetchd warm failed ({r.returncode}): {r.stderr[-500:]}")
        secs = json.loads(r.stdout)["seconds"]
        transfer = secs.get("list", 0) + secs.get("fetch", 0)
        nbytes = sum(keys.values())
        nc = fusecache.NodeCache.open(cache)
        try:
            cached = {o.key: o for o in nc.iter_objects(BUCKET)}
            ok = set(cached) == set(keys)
            for key, size in keys.items():
                oid = cached.get(key)
                if oid is None or oid.size != size:
                    ok = False
                    break
                with open(data / key, "rb") as f:
                    for b in range(oid.block_count(nc.block_size)):
                        got = nc.get_block(oid, b)
                        if got is None or got != f.read(nc.block_size):
                            ok = False
        finally:
            nc.close()
        shutil.rmtree(cache, ignore_errors=True)
        one = {"wall_s": round(wall, 3), "transfer_s": round(transfer, 3),
               "seconds": secs, "verified": ok,
               "transfer_MB_s": round(nbytes / transfer / 1e6, 1) if transfer else None,
               "transfer_files_s": round(len(keys) / transfer, 1) if transfer else None,
               "wall_MB_s": round(nbytes / wall / 1e6, 1),
               "wall_files_s": round(len(keys) / wall, 1)}
        runs_out.append(one)
        if not best or one["transfer_s"] < best["transfer_s"]:
            best = dict(one)
    best["runs"] = runs_out
    best["verified"] = all(x["verified"] for x in runs_out)
    return best


# ---------------------------------------------------------------------------------------
# profiling (--profile): one py-spy per fusecache workload

class Spy:
    """``spy(pass, workload)``: record that workload of the mount process *pid* with
    py-spy into ``results/profile-STAMP-TAG-PASS-WORKLOAD.txt`` (collapsed stacks), and a
    short summary of where the samples went into the run's JSON."""

    def __init__(self, pid: int, results_dir: Path, stamp: str, tag: str, work: Path,
                 into: dict, gil: bool = False) -> None:
        self.pid, self.dir, self.stamp, self.tag, self.work = pid, results_dir, stamp, tag, work
        self.into, self.gil = into, gil

    @contextlib.contextmanager
    def __call__(self, pass_name: str, workload: str):
        out = self.dir / f"profile-{self.stamp}-{self.tag}-{pass_name}-{workload}.txt"
        p = start_pyspy(self.pid, out, self.work, self.gil)
        time.sleep(0.5)  # py-spy attaches before the workload starts
        try:
            yield
        finally:
            stop_pyspy(p)
            if out.exists():
                self.into[f"{pass_name}/{workload}"] = {"file": out.name,
                                                        **summarize_profile(out)}


def summarize_profile(path: Path, top: int = 12) -> dict:
    """Samples per thread kind and the frames with the most samples (self and inclusive);
    idle waits (trio's thread cache, epoll) are counted apart."""
    import collections

    idle_marks = ("_thread_cache.py:211", "get_events (trio", "_io_epoll.py:243")
    threads: collections.Counter = collections.Counter()
    self_: collections.Counter = collections.Counter()
    incl: collections.Counter = collections.Counter()
    idle = total = 0
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        k = int(n)
        frames = stack.split(";")
        total += k
        if any(m in frames[-1] for m in idle_marks):
            idle += k
            continue
        name = frames[0].split(": ", 1)[-1]
        threads[name.split(" from ")[0].rstrip("0123456789- ")] += k
        self_[frames[-1]] += k
        for f in set(frames[1:]):
            incl[f.split(" (")[0]] += k
    return {"samples": total, "idle_samples": idle,
            "busy_by_thread": dict(threads.most_common(top)),
            "top_self": dict(self_.most_common(top)),
            "top_inclusive": dict(incl.most_common(3 * top))}


# ---------------------------------------------------------------------------------------

def ratio(a, b):
    return round(a / b, 2) if a and b else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mib", type=int, default=512, help="large object size (MiB)")
    ap.add_argument("--small-files", type=int, default=600,
                    help="small files per reader count")
    ap.add_argument("--small-readers", default="4,16",
                    help="comma-separated reader counts of the small-file passes; each reads "
                         "a folder of its own, so each has a cold pass")
    ap.add_argument("--ram-cache-size", default="256MiB", help="fusecache RAM tier")
    ap.add_argument("--fusecache-opt", action="append", default=[],
                    help="extra option for 'fusecache mount' (repeatable)")
    ap.add_argument("--fusecache-env", action="append", default=[], metavar="KEY=VALUE",
                    help="extra environment variable for the fusecache mount process, "
                         "e.g. MALLOC_ARENA_MAX=2 (repeatable)")
    ap.add_argument("--readers", default="local,boto3,s3fs,rclone,fusecache,warm",
                    help="comma-separated subset to run; not in the default, cold passes of "
                         "fusecache with one change undone: 'fusecache-boto3' (GETs through "
                         "boto3), 'fusecache-no-folder-readahead' (--folder-readahead 0)")
    ap.add_argument("--boto3-runs", type=int, default=2)
    ap.add_argument("--warm-runs", type=int, default=2)
    ap.add_argument("--profile", action="store_true",
                    help="profile each fusecache workload with 'py-spy record --format raw' "
                         "(perturbs its numbers; profiles in bench/results/, summaries in "
                         "the JSON)")
    ap.add_argument("--profile-gil", action="store_true",
                    help="with --profile: sample only the thread holding the GIL")
    ap.add_argument("--workdir", type=Path, default=None,
                    help="scratch dir on local disk (default: a new dir in /var/tmp)")
    ap.add_argument("--keep", action="store_true", help="keep the workdir")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--bandwidth", type=int, default=None, metavar="MBIT",
                    help="run S3 in a network namespace of its own behind a tbf-shaped "
                         "veth link of MBIT Mbit/s (link-bound instead of CPU-bound)")
    ap.add_argument("--latency-ms", type=float, default=0.0, metavar="MS",
                    help="every reader reaches S3 through a delay line adding MS ms to "
                         "each request (bench/training/latency_proxy.py; no netem here)")
    ap.add_argument("--out", type=Path, default=None, help="JSON output path")
    a = ap.parse_args()
    if a.latency_ms < 0:
        ap.error(f"--latency-ms must be >= 0, not {a.latency_ms}")

    if os.geteuid() != 0:
        print("run_bench: needs root (drop_caches, FUSE mounts)", file=sys.stderr)
        return 2
    try:
        small_readers = sorted({int(x) for x in a.small_readers.split(",") if x.strip()})
        if not small_readers or min(small_readers) < 1:
            raise ValueError
    except ValueError:
        print(f"run_bench: --small-readers {a.small_readers!r}: expected counts like 4,16",
              file=sys.stderr)
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
    res["machine"]["loadavg_start"] = os.getloadavg()
    res["machine"]["page_cache_fill_start"] = page_cache_fill(work.parent)
    res.update({
        "params": {"size_mib": a.size_mib, "small_files": a.small_files,
                   "small_readers": small_readers, "read_size": READ_SIZE,
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
        log(f"generating dataset: {a.size_mib} MiB object + {a.small_files} small files "
            f"for each of {small_readers} readers")
        ds = make_dataset(data, a.size_mib, a.small_files, a.seed, small_readers)
        res["params"]["small_bytes_avg_kib"] = round(
            ds["small_bytes"] / (a.small_files * len(small_readers)) / KiB, 1)
        expect = fingerprint_big(data / BIG_KEY)
        ds["rand_expect"] = fingerprint_big(data / RAND_KEY)
        log("uploading to S3")
        upload(s3, data, ds)
        log(f"dataset ready ({time.monotonic() - t_start:.0f}s)")

        if "local" in readers:
            log("local disk")
            res["readers"]["local"] = two_passes(data, ds, expect, small_readers)

        endpoint = s3.endpoint_url
        if a.latency_ms:
            endpoint = link.enter_context(latency_proxy(endpoint, a.latency_ms, work))
            res["params"]["latency_ms"] = a.latency_ms
            log(f"readers reach S3 through a {a.latency_ms} ms delay line at {endpoint}")
        remote = Remote(endpoint, s3)
        if "boto3" in readers:
            log("boto3 parallel download (16 x 8 MiB ranged GETs, into /dev/null)")
            res["readers"]["boto3"] = boto3_parallel(remote, ds, a.boto3_runs)
            big = max(small_readers)
            res["readers"]["boto3"]["small"] = boto3_small(remote, ds, big, a.boto3_runs)
            res["readers"]["boto3"]["small"]["set"] = small_prefix(big)
            log(f"    {res['readers']['boto3']}")

        if "warm" in readers:
            log("prefetchd warm (fresh cache dir each run; every cached byte checked)")
            big = max(small_readers)
            res["readers"]["warm"] = {
                "big": prefetchd_warm(remote, data, work, "big/",
                                      {BIG_KEY: ds["big_bytes"]}, a.warm_runs),
                "small": prefetchd_warm(remote, data, work, small_prefix(big),
                                        {small_prefix(big) + n: sz for n, sz in
                                         ds["small"][big]["sizes"].items()}, a.warm_runs),
            }
            w = res["readers"]["warm"]
            log(f"    big: {w['big']['transfer_MB_s']} MB/s transfer, {w['big']['wall_MB_s']} "
                f"MB/s whole command; small: {w['small']['transfer_files_s']} files/s "
                f"transfer, {w['small']['wall_files_s']} whole command "
                f"(verified {w['big']['verified'] and w['small']['verified']})")

        for name, mounter in (("s3fs", mount_s3fs), ("rclone", mount_rclone)):
            if name not in readers:
                continue
            log(name)
            p, mp, cmd = mounter(remote, BUCKET, work)
            rss = RssSampler(p.pid)
            try:
                r = two_passes(mp, ds, expect, small_readers, pid=p.pid)
            finally:
                r["rss"] = rss.stop()
                unmount_and_stop(mp, p)
            r["cmd"] = remote.mask(cmd)
            res["readers"][name] = r

        # Cold-only variants of the mount, each the same mount with one change undone.
        variants = {
            "fusecache-boto3": ([], {"FUSECACHE_S3_DATA_PLANE": "boto3"}),
            "fusecache-no-folder-readahead": (["--folder-readahead", "0"], {}),
        }
        for name, (opts, env) in variants.items():
            if name not in readers:
                continue
            cache = work / f"cache-{name}"
            log(f"{name}: fresh cache dir, cold pass")
            p, mp, cmd = mount_fusecache(remote, BUCKET, work, cache, a.ram_cache_size, name,
                                         [*a.fusecache_opt, *opts], {**fc_env, **env})
            rss = RssSampler(p.pid)
            profiles: dict = {}
            spy = Spy(p.pid, results_dir, stamp, name, work, profiles, a.profile_gil) \
                if a.profile else None
            try:
                r = two_passes(mp, ds, expect, small_readers, passes=("pass1",), spy=spy,
                               pid=p.pid)
            finally:
                r["rss"] = rss.stop()
                unmount_and_stop(mp, p)
                shutil.rmtree(cache, ignore_errors=True)
            r["profiles"] = profiles
            r["cmd"] = " ".join(cmd)
            res["readers"][name] = r

        if "fusecache" in readers:
            cache = work / "cache-fusecache"
            shutil.rmtree(cache, ignore_errors=True)
            log("fusecache: fresh cache dir, pass 1 (cold) and pass 2 (same mount)")
            p, mp, cmd = mount_fusecache(remote, BUCKET, work, cache, a.ram_cache_size, "a",
                                         a.fusecache_opt, fc_env)
            rss = RssSampler(p.pid)
            profiles = {}
            spy = Spy(p.pid, results_dir, stamp, "fusecache", work, profiles, a.profile_gil) \
                if a.profile else None
            try:
                r = two_passes(mp, ds, expect, small_readers, spy=spy, pid=p.pid)
            finally:
                r["rss"] = rss.stop()
                unmount_and_stop(mp, p)
            log("fusecache: remount on the warm node cache (fresh RAM tier), pass 3")
            p, mp, _ = mount_fusecache(remote, BUCKET, work, cache, a.ram_cache_size, "b",
                                       a.fusecache_opt, fc_env)
            rss = RssSampler(p.pid)
            spy = Spy(p.pid, results_dir, stamp, "fusecache", work, profiles, a.profile_gil) \
                if a.profile else None
            try:
                r.update(two_passes(mp, ds, expect, small_readers,
                                    passes=("pass3_remount",), spy=spy, pid=p.pid))
            finally:
                r["rss_remount"] = rss.stop()
                unmount_and_stop(mp, p)
            r["profiles"] = profiles
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

    res["machine"]["loadavg_end"] = os.getloadavg()
    res["machine"]["page_cache_fill_end"] = page_cache_fill(work.parent)
    res["elapsed_s"] = round(time.monotonic() - t_start, 1)
    res["ratios"] = ratios_and_targets(res, ram_bytes, small_readers)
    out_path.write_text(json.dumps(res, indent=2))
    print_table(res, small_readers)
    log(f"JSON: {out_path}")
    return 0


def _get(res, reader, p, w, k):
    try:
        return res["readers"][reader][p][w][k]
    except KeyError:
        return None


def _best_peer(res, p, w, k):
    vals = [v for v in (_get(res, "s3fs", p, w, k), _get(res, "rclone", p, w, k)) if v]
    return max(vals) if vals else None


def ratios_and_targets(res: dict, ram_bytes: int, small_readers: list[int]) -> dict:
    fc2_seq = _get(res, "fusecache", "pass2", "seq", "MB_s")
    fc1_seq = _get(res, "fusecache", "pass1", "seq", "MB_s")
    boto = res["readers"].get("boto3", {}).get("MB_s")
    out: dict = {
        "cached_seq_fusecache_over_s3fs": ratio(fc2_seq, _get(res, "s3fs", "pass2", "seq", "MB_s")),
        "cached_seq_fusecache_over_rclone": ratio(fc2_seq,
                                                  _get(res, "rclone", "pass2", "seq", "MB_s")),
        "cold_seq_fusecache_over_boto3": ratio(fc1_seq, boto),
        "remount_seq_fusecache_over_local": ratio(
            _get(res, "fusecache", "pass3_remount", "seq", "MB_s"),
            _get(res, "local", "pass1", "seq", "MB_s")),
    }
    targets: dict = {}

    def chk(v, t):
        return None if v is None else bool(v >= t)
    for n in small_readers:
        sk = small_key(n)
        cold = _get(res, "fusecache", "pass1", sk, "files_s")
        out[f"cold_small_r{n}_fusecache_over_best_peer"] = ratio(
            cold, _best_peer(res, "pass1", sk, "files_s"))
        out[f"cold_small_r{n}_fusecache_over_s3fs"] = ratio(
            cold, _get(res, "s3fs", "pass1", sk, "files_s"))
        out[f"cold_small_r{n}_fusecache_over_rclone"] = ratio(
            cold, _get(res, "rclone", "pass1", sk, "files_s"))
        for variant in ("fusecache-boto3", "fusecache-no-folder-readahead"):
            if variant in res["readers"]:
                out[f"cold_small_r{n}_fusecache_over_{variant.replace('-', '_')}"] = \
                    ratio(cold, _get(res, variant, "pass1", sk, "files_s"))
        out[f"cached_small_r{n}_fusecache_over_best_peer"] = ratio(
            _get(res, "fusecache", "pass2", sk, "files_s"),
            _best_peer(res, "pass2", sk, "files_s"))
        out[f"remount_small_r{n}_fusecache_over_local"] = ratio(
            _get(res, "fusecache", "pass3_remount", sk, "files_s"),
            _get(res, "local", "pass1", sk, "files_s"))
        targets[f"cold small, {n} readers >= 1.5x best of s3fs/rclone"] = chk(
            out[f"cold_small_r{n}_fusecache_over_best_peer"], 1.5)
    for variant in ("fusecache-boto3", "fusecache-no-folder-readahead"):
        if variant in res["readers"]:
            out[f"cold_seq_fusecache_over_{variant.replace('-', '_')}"] = ratio(
                fc1_seq, _get(res, variant, "pass1", "seq", "MB_s"))
    w = res["readers"].get("warm")
    b3 = res["readers"].get("boto3", {})
    if w:
        out["warm_big_transfer_over_boto3"] = ratio(w["big"]["transfer_MB_s"], boto)
        out["warm_big_whole_command_over_boto3"] = ratio(w["big"]["wall_MB_s"], boto)
        b3s = b3.get("small", {}).get("files_s")
        out["warm_small_transfer_over_boto3"] = ratio(w["small"]["transfer_files_s"], b3s)
        out["warm_small_whole_command_over_boto3"] = ratio(w["small"]["wall_files_s"], b3s)
    shaped = bool(res["params"].get("bandwidth_mbit"))
    seq_target = 0.95 if shaped else 0.9
    targets[f"cold seq >= {seq_target}x boto3"] = chk(out["cold_seq_fusecache_over_boto3"],
                                                      seq_target)
    if w:
        targets[f"prefetchd warm (large) >= {seq_target}x boto3"] = chk(
            out["warm_big_transfer_over_boto3"], seq_target)
        targets[f"prefetchd warm (small) >= {seq_target}x boto3"] = chk(
            out["warm_small_transfer_over_boto3"], seq_target)
    fc = res["readers"].get("fusecache", {})
    rss = max([fc.get(k, {}).get("vmhwm_mib", 0) for k in ("rss", "rss_remount")] or [0])
    anon = max([fc.get(k, {}).get("peak_rss_anon_mib", 0) for k in ("rss", "rss_remount")]
               or [0])
    out["fusecache_peak_rss_mib"] = rss or None
    out["fusecache_peak_rss_anon_mib"] = anon or None
    out["fusecache_rss_limit_mib"] = round(ram_bytes / MiB + 200, 1)
    targets["RSS (VmHWM) <= RAM tier + 200 MiB"] = None if not rss else bool(
        rss <= out["fusecache_rss_limit_mib"])
    targets["RssAnon <= RAM tier + 200 MiB"] = None if not anon else bool(
        anon <= out["fusecache_rss_limit_mib"])
    targets["every byte verified"] = all_verified(res)
    out["targets"] = targets
    return out


def all_verified(res: dict) -> bool:
    ok = True
    for name, r in res["readers"].items():
        if name == "boto3":
            ok = ok and r.get("small", {}).get("verified", True)
        elif name == "warm":
            ok = ok and r["big"]["verified"] and r["small"]["verified"]
        else:
            ok = ok and all(w["verified"] for pn, v in r.items()
                            if pn.startswith("pass") for w in v.values())
    return ok


def print_table(res: dict, small_readers: list[int]) -> None:
    p = res["params"]
    m = res["machine"]
    print()
    print(f"fusecache bench: {p['size_mib']} MiB object read sequentially in 1 MiB reads "
          f"(1 reader, MB/s = 1e6 B/s); per reader count {small_readers}, "
          f"{p['small_files']} files of 60-160 KiB (avg {p.get('small_bytes_avg_kib')} KiB) "
          "in a folder of its own, files/s; page cache dropped before every measurement"
          + (f"; S3 behind a {p['bandwidth_mbit']} Mbit/s link" if p.get("bandwidth_mbit")
             else "; S3 on loopback")
          + (f", {p['latency_ms']:g} ms added to each request" if p.get("latency_ms") else "")
          + ".")
    print(f"load average at start {m.get('loadavg_start')}, at end {m.get('loadavg_end')}")
    print(f"page cache fill, 128 MiB, after a drop / into pages just freed (s): at start "
          f"{m.get('page_cache_fill_start')}, at end {m.get('page_cache_fill_end')}")
    print(f"metadata caching: {res['metadata_caching']}")
    cols = ["seq"] + [small_key(n) for n in small_readers]
    names = {"seq": "seq MB/s"} | {small_key(n): f"{n}rd f/s" for n in small_readers}
    hdr = f"{'reader':<26}" + "".join(f"{names[c] + ' ' + pn:>13}" for pn in ("p1", "p2")
                                      for c in cols) + f"{'RSS/anon':>11}"
    print(hdr)
    print("-" * len(hdr))
    for name, r in res["readers"].items():
        if name == "boto3":
            sm = r.get("small", {})
            print(f"{'boto3 parallel (16x8MiB)':<26}{r['MB_s']:>13}   runs {r['runs_MB_s']}; "
                  f"small ({sm.get('set')}, 16 threads) {sm.get('files_s')} files/s")
            continue
        if name == "warm":
            for part in ("big", "small"):
                x = r[part]
                unit = (f"{x['transfer_MB_s']} MB/s transfer, {x['wall_MB_s']} whole command"
                        if part == "big" else
                        f"{x['transfer_files_s']} files/s transfer, {x['wall_files_s']} whole "
                        "command")
                print(f"{'prefetchd warm ' + part:<26}{unit}  verified {x['verified']}")
            continue
        rows = [("pass1", "pass2")] + ([("pass3_remount",)] if "pass3_remount" in r else [])
        for i, pns in enumerate(rows):
            label = name if i == 0 else "  remount (p3)"
            cells = []
            for pn in pns:
                for c in cols:
                    v = r.get(pn, {}).get(c, {})
                    cells.append(v.get("MB_s", v.get("files_s", "-")) if v else "-")
            rr = r.get("rss" if i == 0 else "rss_remount")
            rss = f"{rr['vmhwm_mib']:.0f}/{rr['peak_rss_anon_mib']:.0f}" if rr else "-"
            print(f"{label:<26}" + "".join(f"{c:>13}" for c in cells) + f"{rss:>11}")
    print()
    for k, v in res["ratios"].items():
        if k != "targets":
            print(f"{k:<52}{v}")
    print("targets:")
    for k, v in res["ratios"]["targets"].items():
        print(f"  {k:<52}{'n/a' if v is None else ('MET' if v else 'MISSED')}")
    print(f"elapsed {res['elapsed_s']} s")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("interrupted; mounts and processes cleaned up", file=sys.stderr)
        sys.exit(130)
