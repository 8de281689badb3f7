"""The training experiment as a user runs it: bench/run_train_bench.py, small, against a
real SeaweedFS behind the latency proxy, real FUSE mounts of every contender, and the
real ``prefetchd warm --pipeline``."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "run_train_bench.py"
sys.path.insert(0, str(ROOT / "bench"))

from run_train_bench import readahead_file  # noqa: E402

ALL = ["local", "boto3", "s3fs", "rclone", "fusecache", "fusecache-prefetch"]


def run(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "AWS_CA_BUNDLE"}
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=ROOT)


@pytest.mark.fuse
@pytest.mark.s3
@pytest.mark.slow
def test_small_run_of_every_contender(tmp_path: Path) -> None:
    out = tmp_path / "out"
    ra = readahead_file(tmp_path)
    before = ra.read_text() if ra else None
    p = run("--scale", "0.02", "--files", "60", "--classes", "5", "--shards", "2",
            "--bandwidth", "0", "--latency-ms", "5", "--step-ms", "2", "--workers", "2",
            "--batch-size", "8", "--out-dir", str(out), "--workdir", str(tmp_path / "work"),
            "--disk-readahead-kb", "256")
    # 3 = every contender ran but a target was missed: at this size the figures are noise
    assert p.returncode in (0, 3), p.stdout[-3000:] + p.stderr[-3000:]
    res = json.loads(next(out.glob("train-bench-*.json")).read_text())
    assert list(res["contenders"]) == ALL
    info = res["dataset_info"]
    assert info["files"]["samples"] == 60 and info["shards"]["shards"] == 2
    for c, cres in res["contenders"].items():
        assert "error" not in cres, (c, cres)
        for ds in ("files", "shards"):
            epochs = cres["datasets"][ds]["epochs"]
            assert len(epochs) == 2
            for e in epochs:
                assert e["samples"] == info[ds]["samples"], (c, ds, e)
                assert e["bytes"] == info[ds]["bytes"], (c, ds, e)
                assert 0 < e["accelerator_utilization"] <= 1
    # every FUSE mount's epochs carry its process's CPU; local disk and boto3 have no mount
    for c, cres in res["contenders"].items():
        for ds in ("files", "shards"):
            cpus = [e.get("mount_cpu_s") for e in cres["datasets"][ds]["epochs"]]
            if c in ("local", "boto3"):
                assert cpus == [None, None], (c, ds)
            else:
                assert all(x is not None and x >= 0 for x in cpus), (c, ds, cpus)
    assert res["contenders"]["fusecache"]["datasets"]["shards"]["epochs"][0]["mount_cpu_s"] > 0
    pre, cold = res["contenders"]["fusecache-prefetch"], res["contenders"]["fusecache"]
    total = info["files"]["bytes"] + info["shards"]["bytes"]
    # prefetchd warm fetched every byte before the mount; the mount fetched none
    assert pre["warm"]["bytes"] == total and pre["warm"]["failed_objects"] == 0
    assert pre["mount_s3_bytes"] == 0
    assert cold["mount_s3_bytes"] >= total
    # LocalS3's secret key is 40 hex digits: none may reach the report or the log
    for text in (json.dumps(res), p.stdout, p.stderr):
        assert not re.search(r"(?<![0-9a-f])[0-9a-f]{40}(?![0-9a-f])", text)
    assert {t["target"].split()[0] for t in res["targets"]} >= {"prefetched", "fusecache"}
    if ra is not None:  # the disk's read-ahead was set for the run and put back after
        assert res["settings"]["disk_readahead_kb"] == 256
        assert res["settings"].get("disk_readahead_kb_machine", 256) == int(before)
        assert ra.read_text() == before
    md = next(out.glob("train-bench-*.md")).read_text()
    assert "fusecache after prefetchd warm" in md and md in p.stdout
    assert next(out.glob("train-bench-*.png")).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (tmp_path / "work").exists()  # scratch data removed


def test_asking_for_a_gpu_where_there_is_none_is_a_clear_error(tmp_path: Path) -> None:
    from bench.training.accelerator import gpu_count

    if gpu_count():
        pytest.skip("this machine has a GPU: --accelerator gpu would run for real")
    p = run("--accelerator", "gpu", "--out-dir", str(tmp_path), timeout=60)
    assert p.returncode == 2
    assert "--accelerator gpu" in p.stderr and "Traceback" not in p.stderr
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("args, names", [
    (["--contenders", "local,nfs"], "'nfs'"),
    (["--datasets", "videos"], "'videos'"),
    (["--scale", "0"], "--scale"),
    (["--workers", "0"], "--workers"),
])
def test_bad_arguments_are_named(args: list[str], names: str, tmp_path: Path) -> None:
    p = run(*args, "--out-dir", str(tmp_path), timeout=60)
    assert p.returncode == 2
    assert names in p.stderr
    assert not list(tmp_path.iterdir())  # nothing written
