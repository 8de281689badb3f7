"""`prefetchd warm` on shard patterns, as a user runs it, against a real SeaweedFS.

A pattern (WebDataset brace range or list, glob) fetches exactly the objects it
matches, and a range too large to expand (`{0..99999999}`) is matched, never
expanded. The patterns come straight from a pipeline's plan as well.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import fusecache


def _warm(env: dict[str, str], *argv: str) -> tuple[int, dict, str]:
    r = subprocess.run(
        [sys.executable, "-m", "prefetchd.cli", "warm", *argv, "--json"],
        capture_output=True, text=True, timeout=300, env=env,
    )
    return r.returncode, (json.loads(r.stdout) if r.stdout.strip() else {}), r.stderr


def _cached_keys(cache_dir: str) -> set[str]:
    cache = fusecache.NodeCache.open(cache_dir)
    try:
        return {o.key for o in cache.iter_objects() if cache.contains_object(o)}
    finally:
        cache.close()


def test_warm_fetches_exactly_the_shards_a_pattern_names(local_s3, s3_env, bucket, tmp_path):
    c = local_s3.client()
    keys = [f"wds/train-{i:06d}.tar" for i in range(12)] + [
        "wds/train-7.tar", "wds/val-000000.tar", "wds/train-000003.tar.idx",
        "wds/sub/train-000001.tar", "bench/imagenet-test.tar", "bench/food101-test.tar",
        "bench/cifar10-test.tar", "raw/7.jpg", "raw/12345678.jpg", "raw/007.jpg", "raw/x.jpg",
    ]
    for k in keys:
        c.put_object(Bucket=bucket, Key=k, Body=k.encode() * 100)
    env = {**os.environ, **s3_env}
    cache = str(tmp_path / "cache")

    rc, rep, err = _warm(env, f"s3://{bucket}/wds/train-{{000002..000005}}.tar",
                         "--cache-dir", cache)
    assert rc == 0, err
    want = {f"wds/train-{i:06d}.tar" for i in range(2, 6)}
    assert rep["datasets"][0]["objects"] == 4
    assert _cached_keys(cache) == want

    rc, rep, err = _warm(env, f"s3://{bucket}/bench/{{imagenet,food101}}-test.tar",
                         "--cache-dir", cache)
    assert rc == 0, err
    want |= {"bench/imagenet-test.tar", "bench/food101-test.tar"}
    assert _cached_keys(cache) == want

    # 10^8 members: matched key by key, never expanded (unpadded: 007 is not a member)
    rc, rep, err = _warm(env, f"s3://{bucket}/raw/{{0..99999999}}.jpg", "--cache-dir", cache)
    assert rc == 0, err
    want |= {"raw/7.jpg", "raw/12345678.jpg"}
    assert _cached_keys(cache) == want

    # a glob stays within one path segment
    rc, rep, err = _warm(env, f"s3://{bucket}/wds/train-00001?.tar", "--cache-dir", cache)
    assert rc == 0, err
    want |= {"wds/train-000010.tar", "wds/train-000011.tar"}
    assert _cached_keys(cache) == want


def test_warm_a_pipeline_whose_step_reads_a_shard_pattern(local_s3, s3_env, bucket, tmp_path):
    c = local_s3.client()
    for i in range(6):
        c.put_object(Bucket=bucket, Key=f"wds/shard-{i:04d}.tar", Body=b"x" * 1000)
    c.put_object(Bucket=bucket, Key="out/old.json", Body=b"{}")
    wf = tmp_path / "wf.yaml"
    wf.write_text(f"""apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata: {{generateName: wds-}}
spec:
  entrypoint: train
  templates:
  - name: train
    container:
      image: x
      command: [python, train.py]
      args: [--shards, 's3://{bucket}/wds/shard-{{0000..0003}}.tar',
             --output-dir, 's3://{bucket}/out/']
""")
    env = {**os.environ, **s3_env}
    cache = str(tmp_path / "cache")
    rc, rep, err = _warm(env, "--pipeline", str(wf), "--cache-dir", cache)
    assert rc == 0, err
    assert [d["uri"] for d in rep["datasets"]] == [f"s3://{bucket}/wds/shard-{{0000..0003}}.tar"]
    assert _cached_keys(cache) == {f"wds/shard-{i:04d}.tar" for i in range(4)}
