# ruff: noqa  (pipeline source in the SDK's own idiom: mutable defaults, typing.List)
"""KFP v2 lightweight components that address S3 by bucket and key (boto3), not by URI:
a download whose bucket and key are inputs, per loop item, and an upload to a constant
bucket; the location is s3://BUCKET/KEY.

Compile (kfp 2.x): python kfp2_boto3_bucket_key.py  -> kfp2_boto3_bucket_key.yaml
"""
import os
from typing import List

from kfp import compiler, dsl


@dsl.component(base_image='python:3.11-slim', packages_to_install=['boto3'])
def fetch(bucket: str, key: str) -> int:
    import boto3
    s3 = boto3.client('s3')
    s3.download_file(bucket, key, '/tmp/part.csv')
    return sum(1 for _ in open('/tmp/part.csv'))


@dsl.component(base_image='python:3.11-slim', packages_to_install=['boto3'])
def report(rows: List[int], name: str):
    import json
    import boto3
    with open('/tmp/r.json', 'w') as f:
        json.dump({'rows': sum(rows)}, f)
    boto3.client('s3').upload_file('/tmp/r.json', 'example-reports', 'counts/' + name + '.json')


@dsl.pipeline(name='row-count')
def row_count(bucket: str = 'example-tab', keys: List[str] = ['sales/2024/q1.csv', 'sales/2024/q2.csv']):
    with dsl.ParallelFor(keys) as k:
        f = fetch(bucket=bucket, key=k)
    report(rows=dsl.Collected(f.output), name='sales-2024')


if __name__ == '__main__':
    compiler.Compiler().compile(row_count, os.path.splitext(__file__)[0] + '.yaml')
