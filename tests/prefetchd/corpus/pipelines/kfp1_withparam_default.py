# ruff: noqa  (pipeline source in the SDK's own idiom: mutable defaults, typing.List)
"""ParallelFor over a pipeline parameter whose default is a JSON list (KFP v1 -> Argo withParam),
with a lightweight component that downloads with boto3 and uploads with boto3.

Compile (kfp 1.8.x): python kfp1_withparam_default.py  -> kfp1_withparam_default.yaml
"""
import os

import kfp
from kfp import dsl
from kfp.components import create_component_from_func


def shard_stats(a: str, b: str):
    import json
    from urllib.parse import urlparse

    import boto3
    s3 = boto3.client('s3')
    src = urlparse(a)
    s3.download_file(src.netloc, src.path.lstrip('/'), '/tmp/in.parquet')
    stats = {'rows': 0}
    with open('/tmp/stats.json', 'w') as f:
        json.dump(stats, f)
    dst = urlparse(b)
    s3.upload_file('/tmp/stats.json', dst.netloc, dst.path.lstrip('/'))


stats_op = create_component_from_func(shard_stats, base_image='python:3.11-slim', packages_to_install=['boto3'])


@dsl.pipeline(name='shard-stats')
def shard_stats_pipeline(
    shards: list = ['s3://example-tab/sales/2024/q1.parquet', 's3://example-tab/sales/2024/q2.parquet'],
):
    with dsl.ParallelFor(shards) as shard:
        stats_op(a=shard, b='s3://example-tab/stats/latest.json')


if __name__ == '__main__':
    kfp.compiler.Compiler().compile(shard_stats_pipeline, os.path.splitext(__file__)[0] + '.yaml')
