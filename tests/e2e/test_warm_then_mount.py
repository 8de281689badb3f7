"""The product path: prefetchd warms a dataset, then a mount reads it with no S3 traffic."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fusecache.locals3 import LocalS3

from mounting import mounted, run_cli

pytestmark = [pytest.mark.fuse, pytest.mark.s3]


def test_warmed_dataset_is_served_with_s3_stopped(private_s3: LocalS3, tmp_path: Path) -> None:
    c = private_s3.client()
    c.create_bucket(Bucket="train")
    files = {f"imagenet/train/n{i % 3:03d}/{i:04d}.JPEG": os.urandom(20_000 + 37 * i)
             for i in range(60)}
    files["imagenet/labels.bin"] = os.urandom(9 << 20)
    for k, v in files.items():
        c.put_object(Bucket="train", Key=k, Body=v)
    cache = tmp_path / "cache"
    env = dict(os.environ, **private_s3.env())
    env.pop("AWS_CA_BUNDLE", None)
    r = subprocess.run([sys.executable, "-m", "prefetchd.cli", "warm", "s3://train/imagenet",
                        "--cache-dir", str(cache), "--json"], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    private_s3.stop()
    with mounted("s3://train/imagenet", tmp_path / "m", private_s3.env(), "--cache-dir",
                 str(cache), "--read-timeout", "5") as mp:
        seen = {}
        for d in os.listdir(mp / "train"):
            for n in os.listdir(mp / "train" / d):
                seen[f"imagenet/train/{d}/{n}"] = (mp / "train" / d / n).read_bytes()
        seen["imagenet/labels.bin"] = (mp / "labels.bin").read_bytes()
    assert seen == files
    st = json.loads(run_cli(["stats", "--cache-dir", str(cache), "--json"]).stdout)
    assert st["disk_hits"] >= len(files)
    # every byte from S3 came with the warm (counted under its scope), none with the mount
    assert st["s3_bytes"] == st["by_mount"]["prefetchd"]["s3_bytes"] == sum(
        len(v) for v in files.values())
    assert st["by_mount"].get("s3://train/imagenet/", {}).get("s3_bytes", 0) == 0
