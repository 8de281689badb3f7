"""The training experiment's optional ``fusecache-group`` contender: a pod on an unwarmed node
of a warmed cache group reads every byte from the warmed peer (mutual TLS) and none from S3."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.fuse
@pytest.mark.s3
@pytest.mark.slow
def test_group_contender_reads_from_the_warmed_peer(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "AWS_CA_BUNDLE"}
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    p = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "run_train_bench.py"), "--contenders",
         "local,fusecache-group", "--scale", "0.02", "--files", "40", "--classes", "4",
         "--shards", "2", "--bandwidth", "0", "--latency-ms", "5", "--step-ms", "2",
         "--workers", "2", "--batch-size", "8", "--out-dir", str(out), "--workdir",
         str(tmp_path / "work")], capture_output=True, text=True, timeout=600, env=env,
        cwd=ROOT)
    assert p.returncode in (0, 3), p.stdout[-3000:] + p.stderr[-3000:]
    res = json.loads(next(out.glob("train-bench-*.json")).read_text())
    grp = res["contenders"]["fusecache-group"]
    info = res["dataset_info"]
    total = info["files"]["bytes"] + info["shards"]["bytes"]
    assert "error" not in grp
    for ds in ("files", "shards"):
        for e in grp["datasets"][ds]["epochs"]:
            assert e["bytes"] == info[ds]["bytes"]
    assert grp["warm"]["bytes"] == total  # warmed on the peer node
    assert grp["mount_s3_bytes"] == 0  # this node's mount fetched nothing from S3
    assert grp["peer_bytes"] == total  # every byte came from the warmed peer
    assert any(t["target"].startswith("group") for t in res["targets"])
    assert "unwarmed node of a warmed group" in next(out.glob("train-bench-*.md")).read_text()
