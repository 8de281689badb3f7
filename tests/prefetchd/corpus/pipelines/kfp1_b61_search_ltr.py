# ruff: noqa
"""E-commerce search learning-to-rank (LightGBM LambdaMART) with a small sweep (KFP v1 SDK -> Argo).

Click logs and the product catalog are S3 URIs given as pipeline parameters;
a VolumeOp work volume carries judgments, features and models between the
steps that need them; a ParallelFor sweeps three LambdaMART configurations;
the offline NDCG gate decides whether the model is published; a notify step
is the exit handler.

Compile (kfp 1.8.x): python kfp1_b61_search_ltr.py  -> kfp1_b61_search_ltr.yaml
"""
import os

import kfp
from kfp import dsl
from kfp.components import create_component_from_func

IMAGE = 'ghcr.io/acme/search-ltr:3.2.0'
GOLDEN_QUERIES = 's3://acme-search/golden/queries-v7.jsonl'
MODEL_DEST = 's3://acme-search/models/ltr/lambdamart/'

SWEEP = [
    {'config': 'small', 'num_leaves': 31, 'learning_rate': 0.1},
    {'config': 'medium', 'num_leaves': 63, 'learning_rate': 0.05},
    {'config': 'large', 'num_leaves': 127, 'learning_rate': 0.03},
]


def validate_clicks(clicks_uri: str) -> int:
    import pyarrow.dataset as ds
    table = ds.dataset(clicks_uri, format='parquet').to_table(columns=['query_id', 'product_id', 'clicked'])
    if table.num_rows == 0:
        raise ValueError('no click rows')
    nulls = table.column('query_id').null_count
    if nulls:
        raise ValueError(f'{nulls} rows without query_id')
    return table.num_rows


def notify(pipeline: str):
    print(f'{pipeline} finished')


validate_op = create_component_from_func(validate_clicks, base_image=IMAGE)
notify_op = create_component_from_func(notify, base_image='python:3.11-slim')


@dsl.pipeline(name='search-ltr-lambdamart')
def ltr_pipeline(clicks_uri: str = 's3://acme-search/logs/clicks/2024-06/',
                 catalog_uri: str = 's3://acme-search/catalog/products-2024-06-30.parquet',
                 ndcg_gate: float = 0.42):
    bye = notify_op(pipeline='search-ltr-lambdamart')
    with dsl.ExitHandler(bye):
        vop = dsl.VolumeOp(name='create-work', resource_name='ltr-work', size='50Gi',
                           modes=dsl.VOLUME_MODE_RWM)

        val = validate_op(clicks_uri=clicks_uri)

        judg = dsl.ContainerOp(
            name='build-judgments', image=IMAGE, command=['python', '-m', 'ltr.judgments'],
            arguments=['--clicks', clicks_uri, '--click-model', 'dbn', '--out', '/work/judgments'],
            pvolumes={'/work': vop.volume}).after(val)

        feats = dsl.ContainerOp(
            name='build-features', image=IMAGE, command=['python', '-m', 'ltr.features'],
            arguments=['--judgments', '/work/judgments', '--catalog', catalog_uri, '--out', '/work/features'],
            pvolumes={'/work': judg.pvolume})

        with dsl.ParallelFor(SWEEP) as cfg:
            train = dsl.ContainerOp(
                name='train-ranker', image=IMAGE, command=['python', '-m', 'ltr.train'],
                arguments=['--features', '/work/features', '--config', cfg.config, '--num-leaves', cfg.num_leaves,
                           '--learning-rate', cfg.learning_rate, '--out', '/work/models'],
                pvolumes={'/work': feats.pvolume})

        best = dsl.ContainerOp(
            name='select-best', image=IMAGE, command=['python', '-m', 'ltr.select'],
            arguments=['--models', '/work/models', '--metric', 'valid_ndcg@10', '--out', '/work/best'],
            pvolumes={'/work': vop.volume}).after(train)

        ev = dsl.ContainerOp(
            name='evaluate-offline', image=IMAGE, command=['sh', '-c'],
            arguments=['python -m ltr.evaluate --model /work/best --golden "$0" --catalog "$1" > /tmp/ndcg.txt',
                       GOLDEN_QUERIES, catalog_uri],
            file_outputs={'ndcg': '/tmp/ndcg.txt'},
            pvolumes={'/work': best.pvolume})

        with dsl.Condition(ev.outputs['ndcg'] >= ndcg_gate):
            dsl.ContainerOp(
                name='publish-model', image='amazon/aws-cli:2.15.30', command=['aws', 's3', 'sync'],
                arguments=['/work/best', MODEL_DEST],
                pvolumes={'/work': ev.pvolume})


if __name__ == '__main__':
    kfp.compiler.Compiler().compile(ltr_pipeline, os.path.splitext(__file__)[0] + '.yaml')
