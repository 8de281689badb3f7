# ruff: noqa
"""Daily CTR model training for the ads ranking team (KFP v2 + kfp-kubernetes).

The click logs live in the central data account and are shared with the ML
account through an S3 access point (`train-ap`); jobs address it by ARN with
boto3, and the tokenizer team hands out the access point's alias for plain
`s3api` calls. Advertiser embeddings are kept in an S3 Express One Zone
directory bucket next to the training nodes (usw2-az1). The frozen holdout
set sits on the on-prem MinIO. The exported ONNX model is written through the
models access point.

Compile: python kfp2_b71_ctr_train.py -> kfp2_b71_ctr_train.yaml
"""
import os

from kfp import compiler, dsl, kubernetes
from kfp.dsl import Dataset, Input, Metrics, Model, Output

IMG = 'ghcr.io/acme-ads/ctr-train:5.2.0'
AWS_KEYS = {'AWS_ACCESS_KEY_ID': 'AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY': 'AWS_SECRET_ACCESS_KEY'}


@dsl.component(base_image=IMG)
def fetch_clicks(train_ap_arn: str, day: str, n_parts: int, clicks: Output[Dataset]):
    import os
    import boto3
    s3 = boto3.client('s3', region_name='us-west-2')
    os.makedirs(clicks.path, exist_ok=True)
    for i in range(n_parts):
        key = f'clicks/dt={day}/part-{i:04d}.parquet'
        obj = s3.get_object(Bucket=train_ap_arn, Key=key)
        with open(os.path.join(clicks.path, f'part-{i:04d}.parquet'), 'wb') as f:
            f.write(obj['Body'].read())


@dsl.container_component
def fetch_vocab(vocab: Output[Dataset]):
    return dsl.ContainerSpec(
        image='amazon/aws-cli:2.15.30',
        command=['aws', 's3api', 'get-object',
                 '--bucket', 'train-ap-hrzrlukc5m36ft7okagglf3gmwluquse1b-s3alias',
                 '--key', 'vocab/ads_vocab_v4.txt'],
        args=[vocab.path])


@dsl.component(base_image=IMG, packages_to_install=['s3fs==2024.6.1'])
def fetch_embeddings(emb_version: str, emb: Output[Dataset]):
    import s3fs
    fs = s3fs.S3FileSystem(client_kwargs={'region_name': 'us-west-2'})
    src = f's3://feat--usw2-az1--x-s3/emb/advertiser/{emb_version}/'
    fs.get(src, emb.path, recursive=True)


@dsl.component(base_image=IMG)
def train_ctr(clicks: Input[Dataset], vocab: Input[Dataset], emb: Input[Dataset], holdout_uri: str,
              model: Output[Model], metrics: Output[Metrics]):
    import pandas as pd
    import ctrlib
    opts = {'key': 'holdout-reader', 'client_kwargs': {'endpoint_url': 'http://minio.data:9000'}}
    holdout = pd.read_parquet(holdout_uri, storage_options=opts)
    m = ctrlib.train(clicks.path, vocab_file=vocab.path, emb_dir=emb.path)
    auc = ctrlib.auc(m, holdout)
    metrics.log_metric('holdout_auc', auc)
    m.export_onnx(model.path)


@dsl.container_component
def export_model(model: Input[Model], day: str):
    return dsl.ContainerSpec(
        image='amazon/aws-cli:2.15.30',
        command=['sh', '-c'],
        args=['aws s3 cp "$0" "s3://arn:aws:s3:us-west-2:123456789012:accesspoint/models-ap/ctr/$1/model.onnx"',
              model.path, day])


@dsl.pipeline(name='ctr-daily-train')
def ctr_pipeline(day: str = '2025-03-14',
                 train_ap_arn: str = 'arn:aws:s3:us-west-2:123456789012:accesspoint/train-ap',
                 emb_version: str = 'v7',
                 holdout_uri: str = 's3://ctr-holdout/2025-03/holdout.parquet'):
    clicks = fetch_clicks(train_ap_arn=train_ap_arn, day=day, n_parts=2)
    vocab = fetch_vocab()
    emb = fetch_embeddings(emb_version=emb_version)
    for t in (clicks, vocab, emb):
        kubernetes.use_secret_as_env(t, secret_name='ads-ml-reader', secret_key_to_env=AWS_KEYS)
    tr = train_ctr(clicks=clicks.outputs['clicks'], vocab=vocab.outputs['vocab'],
                   emb=emb.outputs['emb'], holdout_uri=holdout_uri)
    tr.set_accelerator_type('nvidia.com/gpu').set_accelerator_limit(1)
    kubernetes.use_secret_as_env(tr, secret_name='minio-holdout', secret_key_to_env={'secret': 'AWS_SECRET_ACCESS_KEY'})
    ex = export_model(model=tr.outputs['model'], day=day)
    kubernetes.use_secret_as_env(ex, secret_name='ads-ml-writer', secret_key_to_env=AWS_KEYS)


if __name__ == '__main__':
    compiler.Compiler().compile(ctr_pipeline, os.path.splitext(__file__)[0] + '.yaml')
