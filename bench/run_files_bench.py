#!/usr/bin/env python3
"""Prefetched small files through fusecache mounts that differ in one setting, paired.

What a training job's data loader does after ``prefetchd warm``: a fresh mount on a warm
node cache, the page cache dropped, 4 processes (``--readers``) each reading their share
of the files whole, in a shuffled order. Each round mounts every variant in turn (same
cache, same order), so a difference between two variants is measured side by side, not across runs
of a noisy machine. With ``--ttl S`` the mount trusts metadata for S seconds and the
timed pass starts after they passed (the next epoch of a job whose epochs outlast the
TTL); with ``--cold`` every mount starts on an empty cache instead (opens by path, with
no listing first: a loader with its own index).

    source scripts/setup.sh
    python bench/run_files_bench.py --variant trio:FUSECACHE_FUSE_LOOP=trio

A variant is NAME:ENV=VALUE[,ENV=VALUE...], set in the mount's environment (the
baseline, "default", has none). Prints files/s, the mount's CPU seconds and those of its
loop thread (the one serving every FUSE request) per pass, and how busy the machine's
CPUs were meanwhile (a loop thread busy for most of the pass while the machine has CPU to
spare: the loop is what limits); writes them as JSON to
bench/results/files-bench-STAMP.json. Root (drops the page cache, mounts FUSE). Exit 0,
or 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from multiprocessing import get_context
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from _common import drop_caches, log, machine_ticks, start_run  # noqa: E402
from _mounts import (  # noqa: E402
    Remote,
    cleanup_all,
    fusecache_code,
    mount_fusecache,
    start_pyspy,
    stop_pyspy,
    unmount_and_stop,
)
from run_bench import cpu_seconds  # noqa: E402

BUCKET = "fcfiles"


def _variant(text: str) -> tuple[str, dict[str, str]]:
    name, _, assignments = text.partition(":")
    env: dict[str, str] = {}
    for item in filter(None, assignments.split(",")):
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise argparse.ArgumentTypeError(f"{item!r} in variant {text!r} is not ENV=VALUE")
        env[key] = value
    if not name or not env:
        raise argparse.ArgumentTypeError(f"variant {text!r} is not NAME:ENV=VALUE[,...]")
    return name, env


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variant", type=_variant, action="append", default=[],
                    help="NAME:ENV=VALUE[,...] for the mount's environment (repeatable)")
    ap.add_argument("--files", type=int, default=4000, help="files (default 4000)")
    ap.add_argument("--folders", type=int, default=200, help="folders (default 200)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    ap.add_argument("--ttl", type=float, default=0.0,
                    help="--metadata-ttl of the mounts; the timed pass starts after it "
                         "passed (default: indefinite)")
    ap.add_argument("--cold", action="store_true",
                    help="an empty node cache for every mount (no prefetch)")
    ap.add_argument("--readers", type=int, default=4,
                    help="processes reading their share of the files (default 4)")
    ap.add_argument("--profile", action="store_true",
                    help="py-spy each variant's timed pass of the last round (threads, "
                         "collapsed stacks) into the --out folder")
    ap.add_argument("--perf", action="store_true",
                    help="'perf record -g' the loop thread (kernel and native frames) in "
                         "each variant's timed pass of the last round, into the --out folder")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, default=HERE / "results")
    a = ap.parse_args(argv)
    for opt in ("files", "folders", "rounds", "readers"):
        if getattr(a, opt) < 1:
            ap.error(f"--{opt} must be >= 1, not {getattr(a, opt)}")
    if a.ttl < 0:
        ap.error(f"--ttl must be >= 0, not {a.ttl}")
    if a.cold and a.ttl:
        ap.error("--cold and --ttl measure different passes: give one")
    return a


def _read_whole(paths: list[str]) -> int:
    n = 0
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            while chunk := f.read(1 << 20):
                n += len(chunk)
    return n


def _timed_pass(paths: list[str], readers: int) -> tuple[float, int]:
    """Seconds for *readers* processes to read their shares, and the bytes read. The
    processes come from a fork server and start before the clock does: a process forked
    from this one, which has threads (thread pools, profilers), can inherit a lock held
    at the fork and hang the pool, as it once did here."""
    shares = [paths[i::readers] for i in range(readers)]
    with get_context("forkserver").Pool(readers) as pool:
        pool.map(len, [[]] * readers)   # the fork server and the pool answer
        t = time.perf_counter()
        n = sum(pool.map(_read_whole, shares))
        return time.perf_counter() - t, n


def _start_perf(tid: int, out: Path) -> subprocess.Popen | None:
    """``perf record -g`` of one thread until _stop_perf; None (and a log line) without perf."""
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        proc = subprocess.Popen(["perf", "record", "-g", "-F", "4000", "-t", str(tid),
                                 "-o", str(out)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
    except FileNotFoundError:
        log("--perf: no perf on PATH; the pass runs without it")
        return None
    time.sleep(0.5)  # attached before the pass starts
    return proc


def _stop_perf(proc: subprocess.Popen | None) -> None:
    if proc is not None:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
        log(f"perf: {proc.args[-1]} ('perf report -i FILE --no-children')")


def _thread_cpu(pid: int) -> dict[int, tuple[str, float]]:
    """{thread id: (its group, CPU seconds so far)} of process *pid*. Groups: "loop" (the
    main thread, which serves every FUSE request), "native" (the Rust runtime's threads
    under obstore and the peer client's gRPC threads), "write-behind", "workers" (trio's
    worker threads, which trio renames per job)."""
    out = {}
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/comm") as f:
                    comm = f.read().strip()
                cpu = cpu_seconds(pid, int(tid)) or 0.0
            except OSError:
                continue
            group = ("loop" if int(tid) == pid else "native" if comm.startswith(
                ("tokio", "grpc", "default-executo", "resolver")) else
                "write-behind" if comm.startswith("fusecache-writ") else "workers")
            out[int(tid)] = (group, cpu)
    return out


def _cpu_by_group(before: dict[int, tuple[str, float]],
                  after: dict[int, tuple[str, float]]) -> dict[str, float]:
    groups: dict[str, float] = {}
    for tid, (group, cpu) in after.items():
        groups[group] = round(groups.get(group, 0.0) + cpu - before.get(tid, (group, 0.0))[1],
                              2)
    return groups


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    record = start_run(argv)
    from fusecache.locals3 import LocalS3

    work = Path(tempfile.mkdtemp(prefix="fcfiles-", dir="/var/tmp"))
    variants = [("default", {}), *a.variant]
    results: dict[str, dict[str, list[float]]] = {
        name: {"files_s": [], "mount_cpu_s": [], "loop_cpu_s": [], "machine_busy": [],
               "cpu_by_thread": [], "s3_cpu_s": []}
        for name, _ in variants}
    try:
        with LocalS3(data_dir=work / "s3") as s3:
            remote = Remote(s3.endpoint_url, s3)
            os.environ.update(remote.env())
            client = s3.client()
            client.create_bucket(Bucket=BUCKET)
            rnd = random.Random(a.seed)
            keys = [f"ds/c{i % a.folders:04d}/f{i:06d}.jpg" for i in range(a.files)]
            data = {k: rnd.randbytes(rnd.randrange(60 << 10, 160 << 10)) for k in keys}
            with ThreadPoolExecutor(16) as ex:
                list(ex.map(lambda k: client.put_object(Bucket=BUCKET, Key=k, Body=data[k]),
                            keys))
            total = sum(len(v) for v in data.values())
            cache = work / "cache"
            if not a.cold:
                r = subprocess.run([sys.executable, "-m", "prefetchd.cli", "warm",
                                    f"s3://{BUCKET}/ds/", "--cache-dir", str(cache),
                                    "--endpoint-url", s3.endpoint_url],
                                   capture_output=True, text=True)
                if r.returncode != 0:
                    log(f"prefetchd warm failed: {r.stderr.strip()}")
                    return 1
            code = {name: fusecache_code(work, env) for name, env in variants}
            log(f"{a.files} files ({total / 1e6:.0f} MB) in {a.folders} folders; "
                f"variants {[name for name, _ in variants]}, running the code in {code}")
            extra = ["--metadata-ttl", f"{a.ttl:g}"] if a.ttl else []
            for rnd_no in range(a.rounds):
                order = list(keys)
                random.Random(a.seed + rnd_no).shuffle(order)
                for name, env in variants:
                    if a.cold:
                        shutil.rmtree(cache, ignore_errors=True)
                    p, mp, _ = mount_fusecache(remote, BUCKET, work, cache, "256MiB", name,
                                               extra, env)
                    try:
                        paths = [str(mp / k) for k in order]
                        if a.ttl:
                            _read_whole(paths)  # metadata known, then let it age
                            time.sleep(a.ttl + 0.5)
                        drop_caches()
                        cpu0 = cpu_seconds(p.pid) or 0.0
                        s3_cpu0 = cpu_seconds(s3.proc.pid if s3.proc else None) or 0.0
                        loop0 = cpu_seconds(p.pid, p.pid) or 0.0
                        threads0 = _thread_cpu(p.pid)
                        spy = None
                        if a.profile and rnd_no == a.rounds - 1:
                            a.out.mkdir(parents=True, exist_ok=True)
                            spy = start_pyspy(p.pid, a.out / f"profile-files-"
                                              f"{record['started']}-{name}.txt", work)
                            time.sleep(0.5)  # attached before the pass starts
                        perf = None
                        if a.perf and rnd_no == a.rounds - 1:
                            perf = _start_perf(p.pid, a.out / f"perf-files-"
                                               f"{record['started']}-{name}.data")
                        busy0, all0 = machine_ticks()
                        try:
                            seconds, n = _timed_pass(paths, a.readers)
                        finally:
                            stop_pyspy(spy)
                            _stop_perf(perf)
                        busy1, all1 = machine_ticks()
                        cpu = (cpu_seconds(p.pid) or 0.0) - cpu0
                        s3_cpu = (cpu_seconds(s3.proc.pid if s3.proc else None)
                                  or 0.0) - s3_cpu0
                        loop = (cpu_seconds(p.pid, p.pid) or 0.0) - loop0
                        by_group = _cpu_by_group(threads0, _thread_cpu(p.pid))
                    finally:
                        unmount_and_stop(mp, p)
                    if n != total:
                        log(f"{name}: read {n} bytes, expected {total}")
                        return 1
                    results[name]["files_s"].append(round(a.files / seconds, 1))
                    results[name]["mount_cpu_s"].append(round(cpu, 2))
                    results[name]["loop_cpu_s"].append(round(loop, 2))
                    busy = (busy1 - busy0) / max(1, all1 - all0)
                    results[name]["machine_busy"].append(round(busy, 2))
                    results[name]["cpu_by_thread"].append(by_group)
                    results[name]["s3_cpu_s"].append(round(s3_cpu, 2))
                    log(f"round {rnd_no + 1} {name}: {a.files / seconds:.0f} files/s, "
                        f"mount CPU {cpu:.2f} s, of it the loop thread {loop:.2f} s "
                        f"({loop / seconds:.0%} of the pass; by thread {by_group}); "
                        f"S3 server CPU {s3_cpu:.2f} s; machine {busy:.0%} busy "
                        f"(load {os.getloadavg()[0]:.1f})")
    finally:
        cleanup_all()
        shutil.rmtree(work, ignore_errors=True)
    record.update(params={k: v for k, v in vars(a).items() if k not in ("variant", "out")},
                  variants={name: env for name, env in variants}, code=code, results=results)
    a.out.mkdir(parents=True, exist_ok=True)
    out = a.out / f"files-bench-{record['started']}.json"
    out.write_text(json.dumps(record, indent=1))
    for name, r in results.items():
        print(f"{name:12s} files/s {r['files_s']}  mount CPU s {r['mount_cpu_s']}  "
              f"loop thread CPU s {r['loop_cpu_s']}  S3 server CPU s {r['s3_cpu_s']}  "
              f"machine busy {r['machine_busy']}")
    log(f"JSON: {out}")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
    sys.exit(130)
