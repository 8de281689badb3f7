# ruff: noqa
"""Two-tower retrieval retrain assembled from reusable sub-pipelines (KFP v2).

- `build_features` is a pipeline used as a component with two outputs (a
  Dataset and a str holding the S3 URI of the stats file that join-catalog
  writes); the root feeds the Dataset to training and the URI string to
  check-drift (a read of another step's output, known only at run time).
- The text encoder is brought in with dsl.importer; train-two-tower also
  mounts the existing feature-store PVC named by a pipeline parameter
  (kubernetes.mount_pvc) and reads the user-embedding snapshot under it.
- `gate_and_publish` is a second sub-pipeline with a dsl.If inside it on
  the evaluation recall; its publish task copies the model to S3.

Compile: python kfp2_b72_recsys_composed.py -> kfp2_b72_recsys_composed.yaml
"""
import os
from typing import NamedTuple

from kfp import compiler, dsl, kubernetes
from kfp.dsl import Dataset, Input, Model, Output

IMG = 'ghcr.io/shoplab/recsys:2025.03.2'


@dsl.component(base_image=IMG)
def sessionize(interactions_uri: str, run_date: str, sessions: Output[Dataset]):
    import polars as pl
    lf = pl.scan_parquet(f'{interactions_uri}*.parquet')
    lf.filter(pl.col('ts') <= run_date).collect().write_parquet(sessions.path)


@dsl.component(base_image=IMG)
def join_catalog(sessions: Input[Dataset], catalog_uri: str, stats_root: str, run_date: str,
                 features: Output[Dataset]) -> str:
    import json
    import boto3
    import pandas as pd
    items = pd.read_parquet(catalog_uri)
    sess = pd.read_parquet(sessions.path)
    df = sess.merge(items, on='item_id', how='left')
    df.to_parquet(features.path)
    stats_uri = f'{stats_root}/{run_date}/feature_stats.json'
    bucket, key = stats_uri[len('s3://'):].split('/', 1)
    boto3.client('s3').put_object(Bucket=bucket, Key=key, Body=json.dumps(df.describe().to_dict()).encode())
    return stats_uri


@dsl.pipeline(name='build-features')
def build_features(interactions_uri: str, catalog_uri: str, run_date: str,
                   stats_root: str = 's3://shoplab-recsys/feature-stats') -> NamedTuple(
        'Outputs', features=Dataset, stats_uri=str):
    s = sessionize(interactions_uri=interactions_uri, run_date=run_date)
    j = join_catalog(sessions=s.outputs['sessions'], catalog_uri=catalog_uri, stats_root=stats_root,
                     run_date=run_date)
    Outputs = NamedTuple('Outputs', features=Dataset, stats_uri=str)
    return Outputs(features=j.outputs['features'], stats_uri=j.outputs['Output'])


@dsl.component(base_image=IMG)
def check_drift(stats_uri: str, baseline_uri: str) -> float:
    import json
    import boto3
    s3 = boto3.client('s3')
    b1, k1 = stats_uri[len('s3://'):].split('/', 1)
    cur = json.loads(s3.get_object(Bucket=b1, Key=k1)['Body'].read())
    b2, k2 = baseline_uri[len('s3://'):].split('/', 1)
    base = json.loads(s3.get_object(Bucket=b2, Key=k2)['Body'].read())
    return float(abs(len(cur) - len(base)))


@dsl.component(base_image=IMG)
def train_two_tower(features: Input[Dataset], text_encoder: Input[Model], epochs: int,
                    model: Output[Model]):
    import pandas as pd
    from recsys.two_tower import fit
    users = pd.read_parquet('/feature-store/user_embeddings/snapshot=latest/')
    fit(pd.read_parquet(features.path), users, encoder_dir=text_encoder.path, epochs=epochs,
        out_dir=model.path)


@dsl.component(base_image=IMG)
def evaluate_recall(model: Input[Model], holdout_uri: str) -> float:
    import pandas as pd
    from recsys.two_tower import recall_at_k
    hold = pd.read_parquet(holdout_uri)
    return recall_at_k(model.path, hold, k=100)


@dsl.container_component
def publish_model(model: Input[Model], dest_uri: str):
    return dsl.ContainerSpec(image='amazon/aws-cli:2.17.20', command=['aws', 's3', 'sync', '--only-show-errors'],
                             args=[model.path, dest_uri])


@dsl.pipeline(name='gate-and-publish')
def gate_and_publish(model: Input[Model], holdout_uri: str, dest_uri: str, min_recall: float = 0.31):
    ev = evaluate_recall(model=model, holdout_uri=holdout_uri)
    with dsl.If(ev.output >= min_recall, name='recall-ok'):
        publish_model(model=model, dest_uri=dest_uri)


@dsl.pipeline(name='two-tower-retrain')
def two_tower_retrain(
        interactions_uri: str = 's3://shoplab-events/interactions/2025-03/',
        catalog_uri: str = 's3://shoplab-catalog/items/v9/items.parquet',
        drift_baseline_uri: str = 's3://shoplab-recsys/feature-stats/baseline/feature_stats.json',
        holdout_uri: str = 's3://shoplab-recsys/holdout/2025-03/holdout.parquet',
        feature_store_claim: str = 'recsys-feature-store',
        run_date: str = '2025-03-31',
        epochs: int = 6):
    enc = dsl.importer(artifact_uri='s3://shoplab-models/text-encoders/e5-base-v2/', artifact_class=Model,
                       reimport=False)
    bf = build_features(interactions_uri=interactions_uri, catalog_uri=catalog_uri, run_date=run_date)
    check_drift(stats_uri=bf.outputs['stats_uri'], baseline_uri=drift_baseline_uri)
    tr = train_two_tower(features=bf.outputs['features'], text_encoder=enc.output, epochs=epochs)
    kubernetes.mount_pvc(tr, pvc_name=feature_store_claim, mount_path='/feature-store')
    kubernetes.add_toleration(tr, key='nvidia.com/gpu', operator='Exists', effect='NoSchedule')
    gate_and_publish(model=tr.outputs['model'], holdout_uri=holdout_uri,
                     dest_uri=f's3://shoplab-models/two-tower/{run_date}/')


if __name__ == '__main__':
    compiler.Compiler().compile(two_tower_retrain, os.path.splitext(__file__)[0] + '.yaml')
