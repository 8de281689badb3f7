#!/usr/bin/env python3
"""The training-data experiment: accelerator utilisation and epoch time per contender.

One run, one remote store (SeaweedFS behind an emulated link: a tbf-shaped veth
link for bandwidth and a latency proxy for first-byte latency), two generated
datasets (an ImageNet-like tree of small files and large shards), and a training
loop (a multi-process data loader and a simulated or real accelerator) run against
every contender in turn: local disk, boto3 in the dataset class, s3fs-fuse, rclone
mount, fusecache cold, and fusecache after ``prefetchd warm --pipeline``. See
bench/README.md. Run as root (drops the page cache, mounts FUSE, makes a netns):

    source scripts/setup.sh && python bench/run_train_bench.py

Exit codes: 0 every contender ran and every target was met, 3 a target was missed,
1 a contender failed (the report says which and why), 2 bad arguments or set-up.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from _common import (  # noqa: E402
    PROCS,
    cpu_seconds,
    drop_caches,
    latency_proxy,
    local_s3,
    log,
    machine_cpu_seconds,
    start_run,
)
from _mounts import (  # noqa: E402
    Remote,
    cleanup_all,
    mount_fusecache,
    mount_rclone,
    mount_s3fs,
    start_pyspy,
    stop_pyspy,
    unmount_and_stop,
)

from bench.training import report  # noqa: E402
from bench.training.accelerator import choose  # noqa: E402
from bench.training.datasets import (  # noqa: E402
    FilesDataset,
    MiB,
    ShardDataset,
    make_files,
    make_shards,
    upload,
)
from bench.training.emulator import run_epoch  # noqa: E402
from bench.training.loader import LoaderError, loader_class, make_loader  # noqa: E402
from bench.training.sources import Boto3Source, DirSource, Source  # noqa: E402

BUCKET = "fctrain"
PREFIXES = {"files": "imagenet", "shards": "shards"}
CONTENDERS = ["local", "boto3", "s3fs", "rclone", "fusecache", "fusecache-prefetch"]
# Run only when named in --contenders: a pod on an unwarmed node of a warmed cache group
# (a peer node on 127.0.0.1 holds the warmed datasets; bench/training/group_peer.py);
# -agent: the same, with that node's agent warming the pod's datasets from the group as
# the pod starts (prefetchd's last chance for a pod bound where its data is not; no
# lead time: the warm starts with the epoch).
GROUP_CONTENDERS = ["fusecache-group", "fusecache-group-agent"]
OPTIONAL_CONTENDERS = GROUP_CONTENDERS
NEEDS = {"s3fs": "s3fs", "rclone": "rclone"}
PIPELINE = HERE / "training" / "kfp_pipeline.yaml"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_argument_group("link (the remote store)")
    g.add_argument("--latency-ms", type=float, default=20.0,
                   help="first-byte latency added to every request (default 20)")
    g.add_argument("--bandwidth", type=int, default=1000, metavar="MBIT",
                   help="link bandwidth, tbf on a veth pair (default 1000; 0: loopback, "
                        "no shaping)")
    g = ap.add_argument_group("datasets")
    g.add_argument("--scale", type=float, default=1.0,
                   help="multiplies the file count and the shard sizes (default 1: 2000 "
                        "files of ~110 KiB, 4 shards of 64-256 MiB)")
    g.add_argument("--files", type=int, default=None, help="small files (default 2000 x scale)")
    g.add_argument("--classes", type=int, default=None,
                   help="class folders (default 100 x scale: ~20 files a folder)")
    g.add_argument("--shards", type=int, default=4)
    g.add_argument("--datasets", default="files,shards", help="subset: files, shards")
    g = ap.add_argument_group("training")
    g.add_argument("--workers", type=int, default=4, help="loader worker processes")
    g.add_argument("--batch-size", type=int, default=32)
    g.add_argument("--prefetch-factor", type=int, default=2)
    g.add_argument("--step-ms", type=float, default=20.0,
                   help="accelerator time per batch (default 20: 1600 samples/s); on a GPU, "
                        "the real model runs as many passes per batch as fill it")
    g.add_argument("--epochs", type=int, default=2)
    g.add_argument("--loader", choices=["auto", "process", "torch"], default="auto",
                   help="auto: torch DataLoader when torch imports, else the process pool")
    g.add_argument("--accelerator", choices=["auto", "sim", "gpu"], default="auto",
                   help="auto: a real model step when NVML finds a GPU and torch has CUDA")
    ap.add_argument("--contenders", default=",".join(CONTENDERS),
                    help=f"subset of {','.join(CONTENDERS)}")
    ap.add_argument("--ram-cache-size", default="256MiB", help="fusecache RAM tier")
    ap.add_argument("--group-no-lane", action="store_true",
                    help="the group contenders' peer serves single blocks over gRPC only, "
                         "not over its block lane (default: lane on)")
    ap.add_argument("--fusecache-opt", action="append", default=[],
                    help="extra option for 'fusecache mount' (repeatable, e.g. "
                         "--fusecache-opt=--readahead-budget=256MiB)")
    ap.add_argument("--disk-readahead-kb", type=int, default=None, metavar="KB",
                    help="set read_ahead_kb of the disk under --workdir for the run (restored "
                         "at the end); default: leave the machine's setting, which is reported")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workdir", type=Path, default=None,
                    help="scratch dir on local disk (default: a new dir in /var/tmp)")
    ap.add_argument("--keep", action="store_true", help="keep the workdir")
    ap.add_argument("--out-dir", type=Path, default=HERE / "results",
                    help="where the JSON, Markdown and PNG go (default bench/results)")
    ap.add_argument("--no-plot", action="store_true", help="skip the PNG (no matplotlib)")
    ap.add_argument("--profile", action="store_true",
                    help="attach 'py-spy record --format raw' to each fusecache mount "
                         "(costs CPU: numbers then not for comparison)")
    a = ap.parse_args(argv)

    def bad(msg: str) -> None:
        ap.error(msg)

    a.contenders = [c.strip() for c in a.contenders.split(",") if c.strip()]
    for c in a.contenders:
        if c not in CONTENDERS + OPTIONAL_CONTENDERS:
            bad(f"--contenders: unknown contender {c!r} "
                f"(known: {', '.join(CONTENDERS + OPTIONAL_CONTENDERS)})")
    a.datasets = [d.strip() for d in a.datasets.split(",") if d.strip()]
    for d in a.datasets:
        if d not in PREFIXES:
            bad(f"--datasets: unknown dataset {d!r} (known: files, shards)")
    if not a.contenders or not a.datasets:
        bad("--contenders and --datasets need at least one entry each")
    if a.classes is None:
        a.classes = max(1, round(100 * a.scale))
    for name in ("workers", "batch_size", "prefetch_factor", "epochs", "shards", "classes"):
        if getattr(a, name) < 1:
            bad(f"--{name.replace('_', '-')} must be >= 1, got {getattr(a, name)}")
    if not 0 < a.scale <= 100:
        bad(f"--scale must be in (0, 100], got {a.scale}")
    if a.latency_ms < 0 or a.step_ms < 0 or a.bandwidth < 0:
        bad("--latency-ms, --step-ms and --bandwidth must be >= 0")
    if a.disk_readahead_kb is not None and not 0 <= a.disk_readahead_kb <= 65536:
        bad(f"--disk-readahead-kb must be in 0..65536, got {a.disk_readahead_kb}")
    if a.files is None:
        a.files = max(1, round(2000 * a.scale))
    elif a.files < 1:
        bad(f"--files must be >= 1, got {a.files}")
    return a


def preflight(a: argparse.Namespace) -> str | None:
    """Why the run cannot start, or None."""
    if os.geteuid() != 0:
        return "needs root (drop_caches, FUSE mounts, a network namespace)"
    for c in a.contenders:
        tool = NEEDS.get(c)
        if tool and not shutil.which(tool):
            return f"contender {c} needs {tool!r} on the PATH (apt-get install {tool})"
    if not shutil.which("fusermount3"):
        return "needs fusermount3 (apt-get install fuse3)"
    if not a.no_plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            return "the plot needs matplotlib (pip install matplotlib, or --no-plot)"
    return None


def make_datasets(a: argparse.Namespace, data: Path) -> dict[str, FilesDataset | ShardDataset]:
    out: dict[str, FilesDataset | ShardDataset] = {}
    if "files" in a.datasets:
        out["files"] = make_files(data, PREFIXES["files"], a.files, a.classes, a.seed)
    if "shards" in a.datasets:
        lo, hi = max(1, int(64 * MiB * a.scale)), max(2, int(256 * MiB * a.scale))
        out["shards"] = make_shards(data, PREFIXES["shards"], a.shards, lo, hi, a.seed + 1)
    return out


def readahead_file(path: Path) -> Path | None:
    """sysfs read_ahead_kb of the block device holding *path* (its disk, for a partition)."""
    st = os.stat(path)
    dev = Path(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}")
    if not dev.exists():
        return None
    dev = dev.resolve()
    for d in (dev, dev.parent):
        f = d / "queue" / "read_ahead_kb"
        if f.exists():
            return f
    return None


@contextlib.contextmanager
def disk_readahead(path: Path, kb: int | None, settings: dict) -> Iterator[None]:
    """Report (and with *kb*, set for the run) the read-ahead of the disk under *path*.

    It matters to every contender reading from local disk: a fault in a memory map
    reads this much around it (LMDB's node cache), and file reads ramp up to it.
    """
    f = readahead_file(path)
    old = int(f.read_text()) if f else None
    settings["disk_readahead_kb"] = old
    if f is None or kb is None or kb == old:
        yield
        return
    f.write_text(f"{kb}\n")
    settings["disk_readahead_kb"] = kb
    settings["disk_readahead_kb_machine"] = old
    try:
        yield
    finally:
        f.write_text(f"{old}\n")


def fusecache_s3_bytes(cache: Path) -> int:
    """Bytes the mounts on *cache* fetched from S3 (their counters in the node cache;
    prefetchd's warms count under their own scope, "prefetchd", not a mount's)."""
    st = subprocess.run([sys.executable, "-m", "fusecache.cli", "stats", "--cache-dir",
                         str(cache), "--json"], capture_output=True, text=True, check=True)
    return sum(v.get("s3_bytes", 0) for scope, v in json.loads(st.stdout)["by_mount"].items()
               if scope != "prefetchd")


def prefetch(remote: Remote, cache: Path, datasets: dict) -> dict:
    """``prefetchd warm --pipeline`` the benchmark's KFP v2 pipeline into *cache*."""
    uri = {k: f"s3://{BUCKET}/{PREFIXES[k]}/" for k in datasets}
    images = uri.get("files") or uri["shards"]
    shards = uri.get("shards") or uri["files"]
    cmd = ["prefetchd", "warm", "--pipeline", str(PIPELINE), "--param",
           f"images_uri={images}", "--param", f"shards_uri={shards}",
           "--cache-dir", str(cache), "--endpoint-url", remote.endpoint_url, "--json"]
    env = {**os.environ, **remote.env()}
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    secs = time.monotonic() - t0
    if p.returncode != 0:
        raise RuntimeError(f"prefetchd warm failed ({p.returncode}): {p.stderr.strip()}")
    doc = json.loads(p.stdout)
    return {"cmd": " ".join(cmd), "seconds": round(secs, 2),
            "bytes": sum(d["bytes"] for d in doc["datasets"]),
            "objects": sum(d["objects"] for d in doc["datasets"]),
            "failed_objects": doc["failed_objects"], "warm_seconds": doc["seconds"]}


def train_on(name: str, source_of: Callable[[str], Source], datasets: dict,
             a: argparse.Namespace, accel, sampler, mount_pid: int | None = None,
             peer_pid: int | None = None) -> dict:
    """Every dataset, *a.epochs* epochs each; page cache dropped before epoch 1. With
    *mount_pid* (a FUSE mount's process) each epoch records that process's CPU seconds:
    on a machine shared by the loader, the S3 server and the mount, a mount's CPU per
    epoch is what its speed costs the rest. *peer_pid* (the group contenders' serving
    peer, another node in a real cluster) is recorded the same way, and the whole
    machine's busy CPU seconds for every contender (``machine_cpu_s``)."""
    out: dict = {"datasets": {}}
    for dsname, ds in datasets.items():
        loader = make_loader(a.loader, source_of(dsname), a.workers, a.batch_size,
                             a.prefetch_factor, accel.feature_bytes)
        drop_caches()
        epochs = []
        try:
            for e in range(a.epochs):
                cpu0, peer0 = cpu_seconds(mount_pid), cpu_seconds(peer_pid)
                all0 = machine_cpu_seconds()
                st = run_epoch(loader, ds, accel, e, a.seed, sampler).as_dict()
                cpu1, peer1 = cpu_seconds(mount_pid), cpu_seconds(peer_pid)
                # every process's: loaders, the S3 server and the link's proxy, mount, peer
                st["machine_cpu_s"] = round(machine_cpu_seconds() - all0, 2)
                if cpu0 is not None and cpu1 is not None:
                    st["mount_cpu_s"] = round(cpu1 - cpu0, 2)
                if peer0 is not None and peer1 is not None:
                    st["peer_cpu_s"] = round(peer1 - peer0, 2)
                epochs.append(st)
                log(f"  {name:<19} {dsname:<6} epoch {e + 1}: {st['wall_s']:6.2f} s, "
                    f"{st['samples_per_s']:7.0f} samples/s, "
                    f"util {st['accelerator_utilization']:.2f}"
                    + (f", mount CPU {st['mount_cpu_s']:.1f} s" if "mount_cpu_s" in st else "")
                    + (f", peer CPU {st['peer_cpu_s']:.1f} s" if "peer_cpu_s" in st else "")
                    + f", machine CPU {st['machine_cpu_s']:.1f} s")
        except (LoaderError, RuntimeError) as err:
            log(f"  {name} {dsname}: FAILED: {str(err).splitlines()[0]}")
            out["datasets"][dsname] = {"epochs": epochs, "error": str(err)}
            out["error"] = True
            continue
        out["datasets"][dsname] = {"epochs": epochs, "loader": loader.name}
    return out


def run_contender(c: str, a, datasets, work: Path, data: Path, remote: Remote,
                  accel, sampler) -> dict:
    def under(root: Path) -> Callable[[str], Source]:
        return lambda ds: DirSource(root / PREFIXES[ds], label=c)

    if c == "local":
        return train_on(c, under(data), datasets, a, accel, sampler)
    if c == "boto3":
        return train_on(c, lambda ds: Boto3Source(remote.endpoint_url, BUCKET, PREFIXES[ds],
                                                  remote.access_key, remote.secret_key),
                        datasets, a, accel, sampler)
    if c in ("s3fs", "rclone"):
        mounter = mount_s3fs if c == "s3fs" else mount_rclone
        p, mp, cmd = mounter(remote, BUCKET, work)
        try:
            res = train_on(c, under(mp), datasets, a, accel, sampler, p.pid)
        finally:
            unmount_and_stop(mp, p)
        res["cmd"] = remote.mask(cmd)
        return res
    # fusecache, cold or after prefetchd warm: a fresh node cache each
    cache = work / f"cache-{c}"
    shutil.rmtree(cache, ignore_errors=True)
    warm = None
    peer_pid = None
    group = contextlib.ExitStack()
    if c in GROUP_CONTENDERS:
        from bench.training.group_peer import warmed_peer

        log("  prefetchd warm --pipeline on a peer node; this node's cache stays cold")
        warm, peer_pid = group.enter_context(warmed_peer(
            work, cache, BUCKET, [f"s3://{BUCKET}/{PREFIXES[k]}/" for k in datasets],
            lambda peer_cache: prefetch(remote, peer_cache, datasets),
            lane=not a.group_no_lane))
    if c == "fusecache-prefetch":
        log("  prefetchd warm --pipeline (before the mount, as the daemon would)")
        warm = prefetch(remote, cache, datasets)
        log(f"  warmed {warm['bytes'] / 1e6:.0f} MB in {warm['seconds']:.1f} s")
    with group:
        p, mp, cmd = mount_fusecache(remote, BUCKET, work, cache, a.ram_cache_size, c,
                                     a.fusecache_opt)
        spy = start_pyspy(p.pid, Path(f"{a.profile_prefix}-{c}.txt"),
                          work) if a.profile else None
        agent: dict = {}
        side = None
        if c == "fusecache-group-agent":
            log("  this node's agent: prefetchd warm --pipeline, started with the epoch")
            side = threading.Thread(target=lambda: agent.update(prefetch(remote, cache, datasets)),
                                    daemon=True)
            side.start()
        try:
            res = train_on(c, under(mp), datasets, a, accel, sampler, p.pid, peer_pid)
        finally:
            if side is not None:
                side.join()
            stop_pyspy(spy)
            unmount_and_stop(mp, p)  # its counters give mount_s3_bytes below
        if agent:
            log(f"  the agent's warm: {agent['bytes'] / 1e6:.0f} MB in {agent['seconds']:.1f} s")
            res["agent_warm"] = agent
    res["cmd"] = remote.mask(cmd)
    res["mount_s3_bytes"] = fusecache_s3_bytes(cache)
    if c in GROUP_CONTENDERS:  # what the mount (and the agent) took from the warmed peer
        st = subprocess.run([sys.executable, "-m", "fusecache.cli", "stats", "--cache-dir",
                             str(cache), "--json"], capture_output=True, text=True, check=True)
        doc = json.loads(st.stdout)
        res["peer_bytes"] = doc.get("peer_bytes", 0)
        if agent:  # the agent's warm must have taken everything from the group too
            res["agent_s3_bytes"] = doc["by_mount"].get("prefetchd", {}).get("s3_bytes", 0)
    if warm:
        res["warm"] = warm
    return res


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    why = preflight(a)
    if why:
        print(f"run_train_bench: {why}", file=sys.stderr)
        return 2
    try:
        accel, sampler, accel_why = choose(a.accelerator, a.step_ms / 1000, a.batch_size)
    except RuntimeError as e:
        print(f"run_train_bench: {e}", file=sys.stderr)
        return 2
    work = a.workdir or Path(tempfile.mkdtemp(prefix="fctrain-", dir="/var/tmp"))
    work.mkdir(parents=True, exist_ok=True)
    a.out_dir.mkdir(parents=True, exist_ok=True)
    res: dict = start_run(argv)
    stamp = res["started"]
    a.profile_prefix = a.out_dir / f"train-profile-{stamp}"

    link = (f"{a.bandwidth} Mbit/s tbf" if a.bandwidth else "loopback (no bandwidth limit)")
    link += f", {a.latency_ms:g} ms first-byte latency"
    res.update({
        "settings": {"link": link, "latency_ms": a.latency_ms, "bandwidth_mbit": a.bandwidth,
                     "loader": loader_class(a.loader).name, "workers": a.workers,
                     "batch_size": a.batch_size, "prefetch_factor": a.prefetch_factor,
                     "step_ms": a.step_ms, "epochs": a.epochs, "accelerator": accel.name,
                     "accelerator_why": accel_why, "scale": a.scale, "seed": a.seed,
                     "ram_cache_size": a.ram_cache_size, "fusecache_opts": a.fusecache_opt},
        "datasets": a.datasets, "dataset_info": {}, "contenders": {},
    })
    stack = contextlib.ExitStack()
    s3 = local_s3(work / "s3", a.bandwidth or None, stack, {})
    t_start = time.monotonic()
    failed = False
    try:
        log(f"workdir {work}; starting SeaweedFS ({link})")
        s3.start()
        PROCS.append(s3.proc)
        data = work / "data"
        datasets = make_datasets(a, data)
        for k, ds in datasets.items():
            res["dataset_info"][k] = ds.describe()
            log(f"dataset {k}: {ds.describe()}")
        client = s3.client()
        client.create_bucket(Bucket=BUCKET)
        for ds in datasets.values():
            upload(client, BUCKET, data, ds)
        log(f"uploaded ({time.monotonic() - t_start:.0f} s)")
        stack.enter_context(disk_readahead(work, a.disk_readahead_kb, res["settings"]))
        proxy = stack.enter_context(latency_proxy(s3.endpoint_url, a.latency_ms, work))
        remote = Remote(proxy, s3)
        for c in a.contenders:
            log(f"{c}")
            try:
                r = run_contender(c, a, datasets, work, data, remote, accel, sampler)
            except (RuntimeError, OSError, subprocess.CalledProcessError) as err:
                log(f"  {c}: FAILED: {err}")
                r = {"error": str(err), "datasets": {}}
            failed |= bool(r.get("error"))
            res["contenders"][c] = r
    finally:
        cleanup_all()
        s3.stop()
        stack.close()
        if sampler is not None:
            sampler.close()
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            log(f"kept {work}")
    res["elapsed_s"] = round(time.monotonic() - t_start, 1)
    res["targets"] = report.targets(res)
    base = a.out_dir / f"train-bench-{stamp}"
    Path(f"{base}.json").write_text(json.dumps(res, indent=2))
    md = report.markdown(res)
    Path(f"{base}.md").write_text(md)
    if not a.no_plot:
        report.plot(res, Path(f"{base}.png"))
    print(md)
    log(f"results: {base}.json, .md" + ("" if a.no_plot else ", .png"))
    if failed:
        return 1
    return 0 if all(t["met"] for t in res["targets"]) else 3


if __name__ == "__main__":
    sys.exit(main())
