# ruff: noqa
"""Card-fraud champion/challenger retraining (KFP v2, kfp 2.17.3 + kfp-kubernetes 2.17.3).

A reusable feature pipeline (a @dsl.pipeline used as a component) validates
one month of transactions (URI built with an f-string from two pipeline
parameters) and builds features, reading historical aggregates from an
existing PVC named by a pipeline parameter. Chargeback labels come in
through dsl.importer. Training uses a secret for credentials (not a dataset)
and an env var. Thresholds are evaluated with ParallelFor(parallelism=2)
against a holdout whose URI is a constant env var, fanned in with
dsl.Collected, and dsl.If/Elif/Else picks promote / shadow / alert.

Compile: python kfp2_b65_fraud_champion.py  -> kfp2_b65_fraud_champion.yaml
"""
import os
from typing import List

from kfp import compiler, dsl, kubernetes
from kfp.dsl import Dataset, Input, Metrics, Model, Output

IMAGE = 'ghcr.io/example/fraud-ml:2.4.1'


@dsl.component(base_image=IMAGE)
def validate_transactions(transactions_uri: str, validated: Output[Dataset], report: Output[Metrics]):
    import subprocess
    # reads the month partition directly from S3 (pyarrow s3fs) and writes a
    # cleaned copy to its output artifact
    out = subprocess.run(['python', '-m', 'fraud.validate', '--source', transactions_uri, '--out', validated.path],
                         check=True, capture_output=True, text=True)
    report.log_metric('rows', int(out.stdout.strip() or 0))


@dsl.component(base_image=IMAGE)
def build_features(validated: Input[Dataset], aggregates_dir: str, features: Output[Dataset]):
    import subprocess
    # reads the validated transactions (intermediate artifact) and the
    # historical aggregates on the mounted feature-store PVC
    subprocess.run(['python', '-m', 'fraud.features', '--tx', validated.path, '--aggregates', aggregates_dir,
                    '--out', features.path], check=True)


@dsl.pipeline(name='fraud-feature-prep')
def feature_prep(transactions_uri: str, store_pvc: str) -> Dataset:
    v = validate_transactions(transactions_uri=transactions_uri)
    f = build_features(validated=v.outputs['validated'], aggregates_dir='/store')
    kubernetes.mount_pvc(f, pvc_name=store_pvc, mount_path='/store')
    return f.outputs['features']


@dsl.component(base_image=IMAGE)
def train_model(features: Input[Dataset], labels: Input[Dataset], model: Output[Model]):
    import os, subprocess
    subprocess.run(['python', '-m', 'fraud.train', '--features', features.path, '--labels', labels.path,
                    '--family', os.environ['MODEL_FAMILY'], '--out', model.path], check=True)


@dsl.component(base_image=IMAGE)
def evaluate_threshold(model: Input[Model], threshold: float) -> float:
    import os, subprocess
    out = subprocess.run(['python', '-m', 'fraud.evaluate', '--model', model.path,
                          '--holdout', os.environ['HOLDOUT_URI'], '--threshold', str(threshold)],
                         check=True, capture_output=True, text=True)
    return float(out.stdout.strip() or 0.0)


@dsl.component(base_image=IMAGE)
def pick_threshold(precisions: List[float]) -> str:
    best = max(precisions)
    if best > 0.95:
        return 'promote'
    if best > 0.9:
        return 'shadow'
    return 'reject'


@dsl.container_component
def promote_model(model: Input[Model], target: str):
    return dsl.ContainerSpec(image='amazon/aws-cli:2.15.30', command=['aws', 's3', 'cp', '--recursive'],
                             args=[model.path, target])


@dsl.container_component
def deploy_shadow(model: Input[Model], endpoint_name: str):
    return dsl.ContainerSpec(image='ghcr.io/example/fraud-serving:1.3.0', command=['python', '-m', 'serving.shadow'],
                             args=['--model', model.path, '--endpoint', endpoint_name])


@dsl.container_component
def alert_team(message: str):
    return dsl.ContainerSpec(image='curlimages/curl:8.8.0', command=['sh', '-c'],
                             args=['echo "$0"', message])


@dsl.pipeline(name='fraud-champion-challenger')
def fraud_pipeline(transactions_root: str = 's3://example-fraud/transactions',
                   month: str = '2024-06',
                   feature_store_pvc: str = 'fraud-feature-store',
                   thresholds: list = [0.5, 0.7, 0.9]):
    labels = dsl.importer(artifact_uri='s3://example-fraud/chargebacks/labels-2024h1.parquet',
                          artifact_class=Dataset, reimport=False)
    prep = feature_prep(transactions_uri=f'{transactions_root}/month={month}/', store_pvc=feature_store_pvc)
    tr = train_model(features=prep.output, labels=labels.output)
    tr.set_env_variable('MODEL_FAMILY', 'xgboost')
    kubernetes.use_secret_as_env(tr, secret_name='fraud-s3-creds',
                                 secret_key_to_env={'AWS_ACCESS_KEY_ID': 'AWS_ACCESS_KEY_ID',
                                                    'AWS_SECRET_ACCESS_KEY': 'AWS_SECRET_ACCESS_KEY'})
    with dsl.ParallelFor(thresholds, parallelism=2) as thr:
        ev = evaluate_threshold(model=tr.outputs['model'], threshold=thr)
        ev.set_env_variable('HOLDOUT_URI', 's3://example-fraud/holdout/2024-07/')
    pick = pick_threshold(precisions=dsl.Collected(ev.output))
    with dsl.If(pick.output == 'promote'):
        promote_model(model=tr.outputs['model'], target='s3://example-fraud/models/champion/')
    with dsl.Elif(pick.output == 'shadow'):
        deploy_shadow(model=tr.outputs['model'], endpoint_name='fraud-shadow')
    with dsl.Else():
        alert_team(message='fraud challenger rejected')


if __name__ == '__main__':
    compiler.Compiler().compile(fraud_pipeline, os.path.splitext(__file__)[0] + '.yaml')
