# ruff: noqa
"""Intraday momentum signal from Nasdaq tick data (KFP v1 SDK -> Argo).

A ResourceOp creates a shared RWX claim for the month's ticks; a boto3
paginator lists the venue/month prefix and downloads it onto the claim;
corporate actions for the month are copied by aws-cli and handed to the bar
builder as a file (dsl.InputArgumentPath) together with a constant session
calendar; per symbol, 1-minute bars are built and, when options are enabled,
greeks are computed from OPRA parquet read with pyarrow.dataset; a GPU model is
trained with a factor file read through smart_open; the backtest reads SPX
benchmark returns with pandas; a good signal is published with aws-cli.
Lightweight components install their packages at start
(func_to_container_op(packages_to_install=...)); S3 credentials come from a
secret (use_aws_secret); the whole run is capped at 4 pods
(get_pipeline_conf().set_parallelism).

Compile (kfp 1.8.x): python kfp1_b36_tick_features.py  -> kfp1_b36_tick_features.yaml
"""
# ruff: noqa
import os

import kfp
from kfp import dsl
from kfp.aws import use_aws_secret
from kfp.components import InputPath, OutputPath, func_to_container_op

SYMBOLS = ['AAPL', 'MSFT', 'NVDA', 'AMZN']
CALENDAR = 'XNAS\n2024-05-27 closed\n2024-05-24 early-close 13:00\n'


def stage_ticks(venue: str, month: str, dest: str) -> int:
    import os

    import boto3

    s3 = boto3.client('s3')
    prefix = f'equities/{venue}/{month}/'
    n = 0
    for page in s3.get_paginator('list_objects_v2').paginate(Bucket='tick-archive', Prefix=prefix):
        for obj in page.get('Contents', []):
            local = os.path.join(dest, obj['Key'][len(prefix):])
            os.makedirs(os.path.dirname(local), exist_ok=True)
            s3.download_file('tick-archive', obj['Key'], local)
            n += 1
    return n


def options_greeks(symbol: str, month: str, out_dir: str):
    import os

    import pyarrow.dataset as pads
    import pyarrow.parquet as pq
    from tickbars.greeks import compute_greeks

    opra = pads.dataset(f's3://tick-archive/options/OPRA/{month}/underlying={symbol}/', format='parquet')
    table = compute_greeks(opra.to_table(columns=['ts', 'strike', 'expiry', 'bid', 'ask', 'cp']))
    os.makedirs(os.path.join(out_dir, symbol), exist_ok=True)
    pq.write_table(table, os.path.join(out_dir, symbol, 'greeks.parquet'))


def train_signal(bars_dir: str, factor_uri: str, model_path: OutputPath('PyTorchModel')):
    import pandas as pd
    from smart_open import open as sopen
    from tickbars.model import train

    with sopen(factor_uri, 'r') as f:
        factors = pd.read_csv(f, parse_dates=['date'])
    train(bars_dir=bars_dir, factors=factors, out=model_path, epochs=25)


def backtest(model_path: InputPath('PyTorchModel'), bars_dir: str, benchmark_uri: str) -> float:
    import pandas as pd
    from tickbars.backtest import run

    spx = pd.read_csv(benchmark_uri, parse_dates=['date'], index_col='date')
    stats = run(model_path, bars_dir, benchmark=spx['close'].pct_change())
    print(stats)
    return float(stats['sharpe'])


stage_op = func_to_container_op(stage_ticks, base_image='python:3.11-slim', packages_to_install=['boto3==1.34.131'])
greeks_op = func_to_container_op(options_greeks, base_image='ghcr.io/example/tickbars:0.9.1',
                                 packages_to_install=['pyarrow==16.1.0'])
train_op = func_to_container_op(train_signal, base_image='pytorch/pytorch:2.3.1-cuda12.1-cudnn8-runtime',
                                packages_to_install=['smart_open[s3]==7.0.4', 'pandas==2.2.2',
                                                     'tickbars==0.9.1'])
backtest_op = func_to_container_op(backtest, base_image='ghcr.io/example/tickbars:0.9.1',
                                   packages_to_install=['s3fs==2024.6.0'])


@dsl.pipeline(name='nasdaq-intraday-momentum', description='Tick data -> 1m bars -> momentum signal')
def tick_pipeline(venue: str = 'XNAS', month: str = '2024-05', include_options: str = 'true'):
    cache = dsl.ResourceOp(
        name='create-tick-cache',
        k8s_resource={
            'apiVersion': 'v1', 'kind': 'PersistentVolumeClaim',
            'metadata': {'name': '{{workflow.name}}-ticks'},
            'spec': {'accessModes': ['ReadWriteMany'], 'storageClassName': 'efs-sc',
                     'resources': {'requests': {'storage': '500Gi'}}},
        },
        action='create',
        attribute_outputs={'name': '{.metadata.name}', 'size': '{.status.capacity.storage}'},
    )
    vol = dsl.PipelineVolume(pvc=cache.outputs['name'])

    stage = stage_op(venue=venue, month=month, dest='/cache/raw')
    stage.add_pvolumes({'/cache': vol})
    stage.apply(use_aws_secret('aws-tick-archive', 'AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY', 'us-east-1'))

    ca = dsl.ContainerOp(
        name='corporate-actions', image='amazon/aws-cli:2.15.30',
        command=['aws', 's3', 'cp'],
        arguments=[f's3://refdata-vendor/corp-actions/{month}.parquet', '/tmp/corp_actions.parquet'],
        file_outputs={'actions': '/tmp/corp_actions.parquet'},
    ).apply(use_aws_secret('aws-refdata', 'AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY', 'us-east-1'))

    with dsl.ParallelFor(SYMBOLS) as symbol:
        bars = dsl.ContainerOp(
            name='build-bars', image='ghcr.io/example/tickbars:0.9.1',
            command=['python', '-m', 'tickbars.build'],
            arguments=['--ticks', '/cache/raw', '--symbol', symbol, '--freq', '1min',
                       '--corp-actions', dsl.InputArgumentPath(ca.outputs['actions']),
                       '--calendar', dsl.InputArgumentPath(CALENDAR, path='/tmp/inputs/calendar.txt'),
                       '--out', f'/cache/bars/{symbol}'],
        ).after(stage)
        bars.add_pvolumes({'/cache': vol})
        with dsl.Condition(include_options == 'true'):
            gk = greeks_op(symbol=symbol, month=month, out_dir='/cache/greeks')
            gk.add_pvolumes({'/cache': vol})
            gk.apply(use_aws_secret('aws-tick-archive', 'AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY', 'us-east-1'))
            gk.after(bars)

    tr = train_op(bars_dir='/cache/bars', factor_uri=f's3://quant-research/factors/us-equity/{month}.csv')
    tr.after(bars)
    tr.add_pvolumes({'/cache': vol}).set_gpu_limit(1)
    tr.apply(use_aws_secret('aws-research', 'AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY', 'us-east-1'))

    bt = backtest_op(model=tr.outputs['model'], bars_dir='/cache/bars',
                     benchmark_uri='s3://quant-research/benchmarks/spx-daily.csv')
    bt.add_pvolumes({'/cache': vol})
    bt.apply(use_aws_secret('aws-research', 'AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY', 'us-east-1'))

    with dsl.Condition(bt.output > 1.5):
        dsl.ContainerOp(
            name='publish-signal', image='amazon/aws-cli:2.15.30',
            command=['aws', 's3', 'cp'],
            arguments=[dsl.InputArgumentPath(tr.outputs['model'], path='/tmp/model.pt'),
                       f's3://quant-signals/intraday-momentum/{month}/model.pt'],
        ).apply(use_aws_secret('aws-signals', 'AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY', 'us-east-1'))

    dsl.ResourceOp(
        name='delete-tick-cache',
        k8s_resource={'apiVersion': 'v1', 'kind': 'PersistentVolumeClaim',
                      'metadata': {'name': '{{workflow.name}}-ticks'}},
        action='delete',
    ).after(bt)

    dsl.get_pipeline_conf().set_parallelism(4)


if __name__ == '__main__':
    kfp.compiler.Compiler().compile(tick_pipeline, os.path.splitext(__file__)[0] + '.yaml')
