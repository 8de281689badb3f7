#!/usr/bin/env python3
"""prefetchd warm against a direct parallel boto3 download, and `prefetchd plan` on 2,000 steps.

One run, one dataset, one embedded SeaweedFS on 127.0.0.1 (issue 3, "Speed"). See
bench/README.md ("prefetchd: warm and plan"). Run as root (it drops the page cache):

    source scripts/setup.sh && flock /tmp/fusecache-bench.lock python bench/run_warm_bench.py

`prefetchd warm` runs as a user runs it: the installed CLI as a subprocess, a fresh
--cache-dir each pass, page cache dropped before every pass (boto3's too). Every
process this script starts and every scratch dir is removed in a ``finally``, also on
Ctrl-C, SIGTERM or an exception.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
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
from pathlib import Path

MiB = 1 << 20
KiB = 1 << 10
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BUCKET = "fcwarm"
BIG_PREFIX = "big/"
BIG_KEY = BIG_PREFIX + "large.bin"
SMALL_PREFIX = "small/"
TARGETS = {"large_warm_over_boto3": 0.9, "small_warm_over_boto3": 0.8, "plan_seconds": 1.0}

_PROCS: list[subprocess.Popen] = []


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def drop_caches() -> None:
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def stop_proc(p: subprocess.Popen, timeout: float = 10.0) -> None:
    if p.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=10)
    with contextlib.suppress(ValueError):
        _PROCS.remove(p)


def run_proc(cmd: list[str], env: dict, logfile: Path, timeout: float) -> tuple[int, float]:
    """Run *cmd* in its own session (so cleanup can kill its group); (rc, wall seconds)."""
    with open(logfile, "ab") as lf:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=lf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             env=env, start_new_session=True)
        _PROCS.append(p)
        try:
            rc = p.wait(timeout=timeout)
        finally:
            dt = time.perf_counter() - t0
            stop_proc(p)
    return rc, dt


# ---------------------------------------------------------------------------------------
# dataset

def make_and_upload(s3, work: Path, big_mib: int, n_small: int, seed: int) -> dict:
    """Random bytes; returns {key: (size, blake2b digest)} for verification."""
    from boto3.s3.transfer import TransferConfig

    rnd = random.Random(seed)
    c = s3.client()
    c.create_bucket(Bucket=BUCKET)
    objs: dict[str, tuple[int, str]] = {}
    big = work / "large.bin"
    h = hashlib.blake2b(digest_size=16)
    with open(big, "wb") as f:
        for _ in range(big_mib):
            chunk = os.urandom(MiB)
            h.update(chunk)
            f.write(chunk)
    objs[BIG_KEY] = (big_mib * MiB, h.hexdigest())
    cfg = TransferConfig(multipart_threshold=8 * MiB, multipart_chunksize=8 * MiB,
                         max_concurrency=16)
    c.upload_file(str(big), BUCKET, BIG_KEY, Config=cfg)
    big.unlink()
    small = {}
    for i in range(n_small):
        data = os.urandom(rnd.randint(60 * KiB, 160 * KiB))
        key = f"{SMALL_PREFIX}f{i:05d}.bin"
        small[key] = data
        objs[key] = (len(data), hashlib.blake2b(data, digest_size=16).hexdigest())
    with ThreadPoolExecutor(16) as ex:
        list(ex.map(lambda kv: c.put_object(Bucket=BUCKET, Key=kv[0], Body=kv[1]),
                    small.items()))
    return objs


def verify_cache(cache_dir: Path, store_objs: list, expect: dict) -> bool:
    """Every object of the pass is fully cached with the right bytes."""
    import fusecache

    cache = fusecache.NodeCache.open(cache_dir)
    try:
        for o in store_objs:
            oid = fusecache.ObjectId(BUCKET, o.key, o.etag, o.size)
            h = hashlib.blake2b(digest_size=16)
            for i in range(oid.block_count(cache.block_size)):
                b = cache.get_block(oid, i)
                if b is None:
                    return False
                h.update(b)
            if (o.size, h.hexdigest()) != expect[o.key]:
                return False
        return True
    finally:
        cache.close()


# ---------------------------------------------------------------------------------------
# the two readers

def boto3_large(s3) -> float:
    """download_fileobj into /dev/null: 16 threads, 8 MiB ranged GETs. Seconds."""
    from boto3.s3.transfer import TransferConfig

    cfg = TransferConfig(multipart_threshold=8 * MiB, multipart_chunksize=8 * MiB,
                         max_concurrency=16, use_threads=True)
    c = s3.client()
    c.head_bucket(Bucket=BUCKET)  # connection up and credentials resolved before timing
    drop_caches()
    t0 = time.perf_counter()
    with open("/dev/null", "wb") as f:
        c.download_fileobj(BUCKET, BIG_KEY, f, Config=cfg)
    return time.perf_counter() - t0


def boto3_small(s3, expect_n: int) -> float:
    """List the prefix, then 16 threads of get_object().read(), bytes discarded. Seconds."""
    c = s3.client()
    c.head_bucket(Bucket=BUCKET)
    drop_caches()
    t0 = time.perf_counter()
    keys = []
    for page in c.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=SMALL_PREFIX):
        keys += [o["Key"] for o in page.get("Contents", ())]

    def get(k: str) -> int:
        return len(c.get_object(Bucket=BUCKET, Key=k)["Body"].read())

    with ThreadPoolExecutor(16) as ex:
        n = sum(1 for _ in ex.map(get, keys))
    dt = time.perf_counter() - t0
    if n != expect_n:
        raise RuntimeError(f"boto3 small: {n} objects, expected {expect_n}")
    return dt


def prefetchd_cmd() -> list[str]:
    exe = Path(sys.executable).parent / "prefetchd"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "prefetchd.cli"]


def prefetchd_warm(s3, env: dict, work: Path, prefix: str, tag: str, extra: list[str],
                   profile: bool, results_dir: Path, stamp: str) -> dict:
    """`prefetchd warm s3://BUCKET/PREFIX` as a subprocess into a fresh cache dir."""
    cache = work / f"cache-{tag}"
    shutil.rmtree(cache, ignore_errors=True)
    cmd = [*prefetchd_cmd(), "warm", f"s3://{BUCKET}/{prefix}", "--cache-dir", str(cache),
           "--endpoint-url", s3.endpoint_url, "--json", *extra]
    if profile:
        prof = results_dir / f"warm-profile-{stamp}-{tag}.txt"
        cmd = [str(Path(sys.executable).parent / "py-spy"), "record", "--rate", "200",
               "--threads", "--format", "raw", "--subprocesses", "-o", str(prof), "--", *cmd]
    drop_caches()
    rc, dt = run_proc(cmd, env, work / f"warm-{tag}.log", timeout=900)
    if rc != 0:
        raise RuntimeError(f"prefetchd warm exited {rc}; see {work / f'warm-{tag}.log'}")
    return {"seconds": dt, "cache": cache}


# ---------------------------------------------------------------------------------------
# plan on a generated 2,000-step Argo workflow

def gen_workflow(steps: int, path: Path) -> None:
    """A DAG of *steps* tasks over 20 templates: S3 artifacts, URIs in args, parameters,
    withItems fan-outs, when conditions; each task depends on one or two earlier ones."""
    import yaml

    rnd = random.Random(7)
    templates = []
    for t in range(20):
        tpl: dict = {
            "name": f"step-{t}",
            "inputs": {"parameters": [{"name": "shard"}, {"name": "src"}]},
            "container": {
                "image": "python:3.11",
                "command": ["python", "-m", f"job{t}"],
                "args": ["--input", "{{inputs.parameters.src}}", "--shard",
                         "{{inputs.parameters.shard}}",
                         "--output", f"s3://out-bucket/run/{{{{workflow.name}}}}/t{t}/"],
                "env": [{"name": "DATA", "value": f"s3://ds-bucket/common/t{t}/"}],
            },
        }
        if t % 3 == 0:
            tpl["inputs"]["artifacts"] = [{
                "name": "labels", "path": "/in/labels.csv",
                "s3": {"bucket": "ds-bucket", "endpoint": "s3.example:9000",
                       "key": f"labels/t{t}.csv"}}]
        templates.append(tpl)
    tasks = []
    for i in range(steps):
        task: dict = {
            "name": f"t{i:04d}",
            "template": f"step-{i % 20}",
            "arguments": {"parameters": [
                {"name": "shard", "value": str(i % 64)},
                {"name": "src", "value": f"s3://ds-bucket/{{{{workflow.parameters.ds}}}}/"
                                         f"part-{i % 100:03d}/"}]},
        }
        if i:
            deps = {f"t{rnd.randrange(max(0, i - 50), i):04d}"}
            if i > 1 and rnd.random() < 0.4:
                deps.add(f"t{rnd.randrange(0, i):04d}")
            task["dependencies"] = sorted(deps)
        if i % 97 == 5:
            task["when"] = "{{workflow.parameters.full}} == true"
        tasks.append(task)
    templates.append({"name": "main", "dag": {"tasks": tasks}})
    wf = {
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
        "metadata": {"generateName": "big-"},
        "spec": {"entrypoint": "main",
                 "arguments": {"parameters": [{"name": "ds", "value": "imagenet"},
                                              {"name": "full", "value": "true"}]},
                 "templates": templates},
    }
    path.write_text(yaml.safe_dump(wf, sort_keys=False))


def plan_bench(work: Path, steps: int, runs: int) -> dict:
    path = work / f"wf-{steps}.yaml"
    gen_workflow(steps, path)
    env = dict(os.environ)
    walls = []
    for i in range(runs):
        rc, dt = run_proc([*prefetchd_cmd(), "plan", str(path), "--json"], env,
                          work / f"plan-{i}.log", timeout=120)
        if rc != 0:
            raise RuntimeError(f"prefetchd plan exited {rc}; see {work / f'plan-{i}.log'}")
        walls.append(round(dt, 3))
    out = json.loads((work / f"plan-{runs - 1}.log").read_text())
    n_steps = len(out["steps"]) if isinstance(out, dict) and "steps" in out else len(
        out[0]["steps"])
    # in this process too: the analysis alone, without interpreter start and imports
    from prefetchd import pipeline

    t0 = time.perf_counter()
    pipeline.analyze_all([str(path)], {}, {})
    t_analyze = time.perf_counter() - t0
    return {"steps_generated": steps, "steps_planned": n_steps,
            "file_bytes": path.stat().st_size, "cli_runs_seconds": walls,
            "cli_seconds": min(walls), "analyze_seconds": round(t_analyze, 3)}


# ---------------------------------------------------------------------------------------

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mib", type=int, default=512, help="large object size (MiB)")
    ap.add_argument("--small-files", type=int, default=600)
    ap.add_argument("--runs", type=int, default=2,
                    help="passes of each reader; the best of each is compared")
    ap.add_argument("--warm-opt", action="append", default=[],
                    help="extra option for 'prefetchd warm', e.g. --warm-opt=--concurrency=32")
    ap.add_argument("--plan-steps", type=int, default=2000)
    ap.add_argument("--parts", default="large,small,plan", help="comma-separated subset")
    ap.add_argument("--profile", action="store_true",
                    help="run prefetchd warm under py-spy (numbers then not for comparison)")
    ap.add_argument("--workdir", type=Path, default=None,
                    help="scratch dir on local disk (default: a new dir in /var/tmp)")
    ap.add_argument("--keep", action="store_true", help="keep the workdir")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None, help="JSON output path")
    a = ap.parse_args()

    if os.geteuid() != 0:
        print("run_warm_bench: needs root (drop_caches)", file=sys.stderr)
        return 2
    sys.path.insert(0, str(ROOT))
    from fusecache.locals3 import LocalS3

    parts = {p.strip() for p in a.parts.split(",") if p.strip()}
    work = a.workdir or Path(tempfile.mkdtemp(prefix="fcwarmbench-", dir="/var/tmp"))
    own_work = a.workdir is None
    work.mkdir(parents=True, exist_ok=True)
    results_dir = HERE / "results"
    results_dir.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out_path = a.out or results_dir / f"warm-bench-{stamp}.json"

    def on_term(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, on_term)

    res: dict = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "started": stamp,
        "machine": {"cpus": os.cpu_count(), "kernel": os.uname().release},
        "params": {"size_mib": a.size_mib, "small_files": a.small_files, "runs": a.runs,
                   "warm_opts": a.warm_opt, "plan_steps": a.plan_steps},
        "concurrent_pytest": _pytest_running(),
    }
    s3 = None
    rc = 1
    try:
        if parts & {"large", "small"}:
            s3 = LocalS3(data_dir=work / "s3")
            log(f"workdir {work}; starting SeaweedFS")
            s3.start()
            _PROCS.append(s3.proc)
            log(f"generating and uploading {a.size_mib} MiB + {a.small_files} small objects")
            expect = make_and_upload(s3, work, a.size_mib, a.small_files, a.seed)
            import fusecache

            os.environ.update(s3.env())
            st = fusecache.S3Store(BUCKET, endpoint_url=s3.endpoint_url)
            listing = {p: [o for pg in _pages(st, p) for o in pg]
                       for p in (BIG_PREFIX, SMALL_PREFIX)}
            env = {**os.environ, **s3.env()}
            small_bytes = sum(o.size for o in listing[SMALL_PREFIX])
            res["params"]["small_avg_kib"] = round(small_bytes / a.small_files / KiB, 1)
            for part, prefix, nbytes, nobj in (
                    ("large", BIG_PREFIX, a.size_mib * MiB, 1),
                    ("small", SMALL_PREFIX, small_bytes, a.small_files)):
                if part not in parts:
                    continue
                r: dict = {"bytes": nbytes, "objects": nobj, "boto3_s": [], "warm_s": [],
                           "warm_verified": []}
                for i in range(a.runs):
                    dt = boto3_large(s3) if part == "large" else boto3_small(s3, nobj)
                    r["boto3_s"].append(round(dt, 3))
                    w = prefetchd_warm(s3, env, work, prefix, f"{part}{i}", a.warm_opt,
                                       a.profile, results_dir, stamp)
                    r["warm_s"].append(round(w["seconds"], 3))
                    ok = verify_cache(w["cache"], listing[prefix], expect)
                    r["warm_verified"].append(ok)
                    shutil.rmtree(w["cache"], ignore_errors=True)
                    log(f"  {part} run {i + 1}: boto3 {nbytes / dt / 1e6:.1f} MB/s, "
                        f"prefetchd warm {nbytes / w['seconds'] / 1e6:.1f} MB/s "
                        f"(verified {ok})")
                for who in ("boto3", "warm"):
                    best = min(r[f"{who}_s"])
                    r[who] = {"seconds": best, "MB_s": round(nbytes / best / 1e6, 1),
                              "objects_s": round(nobj / best, 1)}
                r["ratio"] = round(r["boto3"]["seconds"] / r["warm"]["seconds"], 3)
                res[part] = r
        if "plan" in parts:
            log(f"prefetchd plan on a generated {a.plan_steps}-step Argo workflow")
            res["plan"] = plan_bench(work, a.plan_steps, runs=3)
        res["targets"] = targets(res)
        print_table(res)
        rc = 0 if all(t["met"] for t in res["targets"].values()) else 1
    except KeyboardInterrupt as e:
        log(f"interrupted: {e}")
        res["error"] = f"interrupted: {e}"
        rc = 130
    except Exception as e:
        log(f"FAILED: {type(e).__name__}: {e}")
        res["error"] = f"{type(e).__name__}: {e}"
        rc = 2
    finally:
        for p in list(_PROCS):
            stop_proc(p)
        if s3 is not None:
            s3.stop()
        if own_work and not a.keep:
            shutil.rmtree(work, ignore_errors=True)
        res["concurrent_pytest_end"] = _pytest_running()
        out_path.write_text(json.dumps(res, indent=1, sort_keys=True))
        log(f"results: {out_path}")
    return rc


def _pages(store, prefix: str):
    token = None
    while True:
        page = store.list_page(prefix, token, delimiter=None)
        yield page.objects
        token = page.next_token
        if not token:
            return


def _pytest_running() -> bool:
    """Another session's test suite on this machine skews every number."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"pytest" in cmd and int(pid) != os.getpid():
            return True
    return False


def targets(res: dict) -> dict:
    out = {}
    if "large" in res:
        v = res["large"]["ratio"]
        out["large_warm_over_boto3"] = {"value": v, "target": ">= 0.9", "met": v >= 0.9}
    if "small" in res:
        v = res["small"]["ratio"]
        out["small_warm_over_boto3"] = {"value": v, "target": ">= 0.8", "met": v >= 0.8}
    if "plan" in res:
        v = res["plan"]["cli_seconds"]
        out["plan_2000_steps_seconds"] = {"value": v, "target": "< 1.0", "met": v < 1.0}
    for part in ("large", "small"):
        if part in res and not all(res[part]["warm_verified"]):
            out[f"{part}_verified"] = {"value": False, "target": "all bytes cached",
                                       "met": False}
    return out


def print_table(res: dict) -> None:
    print()
    print(f"{'workload':<26}{'boto3 MB/s':>11}{'obj/s':>8}{'warm MB/s':>11}{'obj/s':>8}"
          f"{'ratio':>8}{'target':>8}  ok")
    for part, label, tgt in (("large", f"large ({res['params']['size_mib']} MiB x1)", 0.9),
                             ("small", f"small ({res['params']['small_files']} x "
                                       f"~{res['params'].get('small_avg_kib', 110):.0f} KiB)",
                              0.8)):
        if part not in res:
            continue
        r = res[part]
        print(f"{label:<26}{r['boto3']['MB_s']:>11}{r['boto3']['objects_s']:>8}"
              f"{r['warm']['MB_s']:>11}{r['warm']['objects_s']:>8}{r['ratio']:>8}"
              f"{'>=' + str(tgt):>8}  {'yes' if r['ratio'] >= tgt else 'NO'}"
              f"{'' if all(r['warm_verified']) else ' (NOT VERIFIED)'}")
    if "plan" in res:
        p = res["plan"]
        print(f"plan, {p['steps_planned']} steps: CLI {p['cli_seconds']} s (best of "
              f"{len(p['cli_runs_seconds'])}), analysis alone {p['analyze_seconds']} s; "
              f"target < 1 s: {'yes' if p['cli_seconds'] < 1 else 'NO'}")
    if res.get("concurrent_pytest") or res.get("concurrent_pytest_end"):
        print("NOTE: a pytest run was active on this machine during the benchmark")
    print()


if __name__ == "__main__":
    sys.exit(main())
