# ruff: noqa  (pipeline source in the SDK's own idiom: mutable defaults, typing.List)
"""KFP v2: ConcatPlaceholder and IfPresentPlaceholder building the args of each loop item,
lightweight components reading and writing through pandas and an f-string `os.system`,
and a registration step.

Compile (kfp 2.x): python kfp2_concat_pandas.py  -> kfp2_concat_pandas.yaml
"""
import os
from typing import List

from kfp import compiler, dsl


@dsl.component(base_image='python:3.11-slim', packages_to_install=['pandas', 's3fs'])
def clean(table: str, kept: str, threshold: float = 0.5):
    import pandas as pd
    df = pd.read_parquet(table)
    df[df.score > threshold].to_parquet(kept)


@dsl.container_component
def featurize(root: str, day: str, vocab: str = ''):
    return dsl.ContainerSpec(image='ghcr.io/example/feat:1.2.0', command=['python', '-m', 'feat'], args=[
        '--in', dsl.ConcatPlaceholder([root, '/', day, '/']),
        '--out', dsl.ConcatPlaceholder(['s3://example-feat/daily/', day, '/']),
        dsl.IfPresentPlaceholder(input_name='vocab', then=['--vocab', vocab]),
    ])


@dsl.component(base_image='google/cloud-sdk:475.0.0')
def mirror(u: str, v: str):
    import os
    os.system(f"gsutil -m rsync -r {u} {v}")


@dsl.component(base_image='python:3.11-slim')
def register_model(model_path: str, registry_uri: str):
    import subprocess
    subprocess.run(['mlflow', 'models', 'register', '--model-uri', model_path, '--registry', registry_uri])


@dsl.pipeline(name='daily-features')
def daily_features(days: List[str] = ['2024-06-01', '2024-06-02']):
    c = clean(table='s3://example-raw/events/all.parquet', kept='s3://example-clean/events/all.parquet')
    with dsl.ParallelFor(days) as d:
        f = featurize(root='s3://example-clean/events', day=d, vocab='s3://example-feat/vocab.txt').after(c)
    m = mirror(u='gs://example-feat-gcs/daily/', v='gs://example-feat-backup/daily/').after(f)
    register_model(model_path='s3://example-models/feat/v1/', registry_uri='s3://example-registry/feat/').after(m)


if __name__ == '__main__':
    compiler.Compiler().compile(daily_features, os.path.splitext(__file__)[0] + '.yaml')
