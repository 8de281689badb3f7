# ruff: noqa
"""Card-fraud feature build + model sweep on an on-prem MinIO (KFP v2).

Compile: python kfp2_b46_fraud_features.py -> kfp2_b46_fraud_features.yaml
"""
import os
from kfp import dsl, compiler, kubernetes

MINIO = 'http://minio.minio.svc:9000'
IMG = 'registry.bank.internal/fraud/ml:3.4.1'


@dsl.container_component
def load_transactions(month: str, out_dir: dsl.Output[dsl.Dataset]):
    return dsl.ContainerSpec(
        image='amazon/aws-cli:2.15.30',
        command=['sh', '-c'],
        args=['aws --endpoint-url "$AWS_ENDPOINT_URL" s3 cp --recursive '
              's3://fraud-raw/transactions/month=$0/ "$1"', month, out_dir.path],
    )


@dsl.component(base_image=IMG, packages_to_install=[])
def load_chargebacks(labels: dsl.Output[dsl.Dataset]):
    import boto3
    s3 = boto3.client('s3', endpoint_url='http://minio.minio.svc:9000')
    s3.download_file(Bucket='fraud-labels', Key='chargebacks/2024 Q2/labels.csv', Filename=labels.path)


@dsl.container_component
def load_merchant_risk(out: dsl.Output[dsl.Dataset]):
    # presigned GET handed over by the risk team (AWS, virtual-hosted style)
    return dsl.ContainerSpec(
        image='curlimages/curl:8.7.1',
        command=['sh', '-c'],
        args=['curl -fsSL -o "$0" "https://fraud-ref.s3.eu-west-1.amazonaws.com/merchants/risk%20scores%202024.parquet'
              '?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAEXAMPLE%2F20240601%2Feu-west-1%2Fs3%2Faws4_request'
              '&X-Amz-Date=20240601T000000Z&X-Amz-Expires=604800&X-Amz-SignedHeaders=host&X-Amz-Signature=deadbeef"',
              out.path],
    )


@dsl.component(base_image=IMG)
def build_features(tx: dsl.Input[dsl.Dataset], labels: dsl.Input[dsl.Dataset], risk: dsl.Input[dsl.Dataset],
                   device_uri: str, features: dsl.Output[dsl.Dataset]):
    import os
    import pandas as pd
    opts = {'client_kwargs': {'endpoint_url': os.environ['AWS_ENDPOINT_URL']}}
    dev = pd.read_parquet(device_uri, storage_options=opts)
    df = pd.read_parquet(tx.path).merge(pd.read_csv(labels.path), on='tx_id', how='left')
    df = df.merge(pd.read_parquet(risk.path), on='merchant_id').merge(dev, on='device_id', how='left')
    df.to_parquet(features.path)


@dsl.component(base_image=IMG)
def train_model(algo: str, features: dsl.Input[dsl.Dataset], model: dsl.Output[dsl.Model]) -> float:
    import fraudml
    return fraudml.train(algo, features.path, model.path)


@dsl.component(base_image=IMG)
def pick_best(scores: list) -> float:
    return max(scores)


@dsl.container_component
def publish_scores(best: float):
    return dsl.ContainerSpec(
        image='amazon/aws-cli:2.15.30',
        command=['sh', '-c'],
        args=['echo "$0" > /tmp/best && aws --endpoint-url http://minio.minio.svc:9000 s3 cp /tmp/best '
              's3://fraud-models/champion/best_auc.txt', best],
    )


@dsl.pipeline(name='fraud-feature-sweep')
def fraud_pipeline(month: str = '2024-06',
                   device_uri: str = 's3a://fraud-raw/device-fingerprints/'):
    tx = load_transactions(month=month)
    cb = load_chargebacks()
    risk = load_merchant_risk()
    feats = build_features(tx=tx.outputs['out_dir'], labels=cb.outputs['labels'],
                           risk=risk.outputs['out'], device_uri=device_uri)
    for t in (tx, cb, feats):
        t.set_env_variable('AWS_ENDPOINT_URL', MINIO)
        kubernetes.use_secret_as_env(t, secret_name='minio-creds',
                                     secret_key_to_env={'accesskey': 'AWS_ACCESS_KEY_ID',
                                                        'secretkey': 'AWS_SECRET_ACCESS_KEY'})
    with dsl.ParallelFor(items=['xgboost', 'lightgbm', 'catboost']) as algo:
        tr = train_model(algo=algo, features=feats.outputs['features'])
    best = pick_best(scores=dsl.Collected(tr.outputs['Output']))
    with dsl.If(best.output > 0.9):
        publish_scores(best=best.output)


if __name__ == '__main__':
    compiler.Compiler().compile(fraud_pipeline, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                              'kfp2_b46_fraud_features.yaml'))
