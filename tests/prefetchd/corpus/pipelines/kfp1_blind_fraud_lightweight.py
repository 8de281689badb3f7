# ruff: noqa
"""KFP v1 (blind test): fraud model retraining with lightweight components
(create_component_from_func). URIs passed as f-strings over two pipeline
parameters; pandas read_csv on input + suffix; s3fs cat of a params JSON; boto3
upload_file with bucket/key split from a URI; ParallelFor over a JSON-list pipeline
parameter with parallelism; pandas read_parquet of a URI built in code from the
loop item and a parameter; dsl.Condition on a parameter around an s3fs copy
(promotion); InputPath/OutputPath files between steps; pod annotations.

Compile: /tmp/kfp1/bin/python kfp1_blind_fraud_lightweight.py
"""
import os

import kfp
from kfp import dsl
from kfp.components import InputPath, OutputPath, create_component_from_func

BASE = 'python:3.10-slim'


def ingest_transactions(src_uri: str, out_csv: OutputPath('CSV')):
    import pandas as pd
    df = pd.read_csv(src_uri + 'transactions.csv.gz', compression='gzip')
    df = df[df['amount'] > 0]
    df.to_csv(out_csv, index=False)


def train_xgb(train_csv: InputPath('CSV'), params_uri: str, model_dst: str, model: OutputPath('XGBoostModel')):
    import json

    import boto3
    import pandas as pd
    import s3fs
    import xgboost as xgb
    params = json.loads(s3fs.S3FileSystem().cat(params_uri))
    df = pd.read_csv(train_csv)
    booster = xgb.train(params, xgb.DMatrix(df.drop(columns=['is_fraud']), label=df['is_fraud']), num_boost_round=400)
    booster.save_model(model)
    bucket, key = model_dst.replace('s3://', '').split('/', 1)
    boto3.client('s3').upload_file(model, bucket, key + 'model.json')


def backtest(model: InputPath('XGBoostModel'), month: str, labels_bucket: str) -> float:
    import pandas as pd
    import xgboost as xgb
    labels = pd.read_parquet(f's3://{labels_bucket}/labels/month={month}/')
    booster = xgb.Booster(model_file=model)
    preds = booster.predict(xgb.DMatrix(labels.drop(columns=['is_fraud'])))
    return float(((preds > 0.5) == labels['is_fraud']).mean())


def promote(model_dst: str):
    import s3fs
    s3fs.S3FileSystem().copy(model_dst + 'model.json', 's3://acme-models/fraud/production/model.json')


ingest_op = create_component_from_func(ingest_transactions, base_image=BASE, packages_to_install=['pandas==2.0.3', 's3fs==2023.6.0'])
train_op = create_component_from_func(train_xgb, base_image=BASE, packages_to_install=['pandas==2.0.3', 's3fs==2023.6.0', 'xgboost==1.7.6', 'boto3==1.28.0'])
backtest_op = create_component_from_func(backtest, base_image=BASE, packages_to_install=['pandas==2.0.3', 'pyarrow==12.0.1', 's3fs==2023.6.0', 'xgboost==1.7.6'])
promote_op = create_component_from_func(promote, base_image=BASE, packages_to_install=['s3fs==2023.6.0'])


@dsl.pipeline(name='fraud-xgb-retrain')
def fraud_retrain(lake_bucket: str = 'acme-fraud-lake', date: str = '2024-06-01',
                  months: str = '["2024-03", "2024-04", "2024-05"]', publish: str = 'no'):
    ing = ingest_op(src_uri=f's3://{lake_bucket}/raw/{date}/')
    ing.set_memory_limit('8G')
    tr = train_op(train_csv=ing.outputs['out_csv'], params_uri='s3://acme-ml-config/fraud/xgb-params-v9.json',
                  model_dst=f's3://acme-models/fraud/{date}/')
    tr.add_pod_annotation('team', 'risk-ml')
    with dsl.ParallelFor(months, parallelism=2) as month:
        backtest_op(model=tr.outputs['model'], month=month, labels_bucket=lake_bucket)
    with dsl.Condition(publish == 'yes', name='publish'):
        promote_op(model_dst=f's3://acme-models/fraud/{date}/').after(tr)


if __name__ == '__main__':
    kfp.compiler.Compiler().compile(fraud_retrain, os.path.splitext(__file__)[0] + '.yaml')
