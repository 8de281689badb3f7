# ruff: noqa
"""Regional demand forecasting on a VolumeOp workspace (KFP v1 SDK 1.8.24 -> Argo Workflow).

A VolumeOp creates the run's workspace; sales history (S3 URI from a
pipeline parameter) is synced onto it; a public-holiday calendar is
downloaded over plain https (not a dataset); features are built on the
volume. Per-region models train in a ParallelFor over static dicts with
parallelism=2 (each item carries the region's weather-history URI); inside
the loop a dsl.Condition registers good models. A backtest after the loop
reads the shared reference PVC (onprem.mount_pvc) and a backtest window URI
from an env var; the forecast is published with AWS credentials from a
secret; an ExitHandler posts the run status.

Compile (kfp 1.8.x): python kfp1_b65_forecast_regions.py  -> kfp1_b65_forecast_regions.yaml
"""
import os

import kfp
from kfp import dsl, onprem
from kfp.aws import use_aws_secret
from kubernetes.client.models import V1EnvVar

IMAGE = 'ghcr.io/example/demand-forecast:3.2.0'

REGIONS = [
    {'region': 'emea', 'weather': 's3://example-weather/history/emea/daily/'},
    {'region': 'amer', 'weather': 's3://example-weather/history/amer/daily/'},
    {'region': 'apac', 'weather': 's3://example-weather/history/apac/daily/'},
]


@dsl.pipeline(name='regional-demand-forecast')
def forecast_pipeline(sales_uri: str = 's3://example-retail/sales/daily/2019-2024/',
                      max_mape: float = 0.15):
    notify = dsl.ContainerOp(name='notify', image='curlimages/curl:8.8.0', command=['sh', '-c'],
                             arguments=['echo "regional-demand-forecast {{workflow.status}}"'])
    with dsl.ExitHandler(notify):
        vop = dsl.VolumeOp(name='create-workspace', resource_name='forecast-work', size='20Gi',
                           modes=dsl.VOLUME_MODE_RWO)
        holidays = dsl.ContainerOp(
            name='fetch-holidays', image='curlimages/curl:8.8.0', command=['sh', '-c'],
            arguments=['curl -sSfL https://date.nager.at/api/v3/PublicHolidays/2024/DE -o /tmp/holidays.json'],
            file_outputs={'holidays': '/tmp/holidays.json'})
        ingest = dsl.ContainerOp(
            name='ingest-sales', image='amazon/aws-cli:2.15.30', command=['aws', 's3', 'sync'],
            arguments=[sales_uri, '/work/sales'], pvolumes={'/work': vop.volume})
        feats = dsl.ContainerOp(
            name='build-features', image=IMAGE, command=['python', '-m', 'forecast.features'],
            arguments=['--sales', '/work/sales', '--holidays', dsl.InputArgumentPath(holidays.outputs['holidays']),
                       '--out', '/work/features'],
            pvolumes={'/work': ingest.pvolume})
        with dsl.ParallelFor(REGIONS, parallelism=2) as item:
            train = dsl.ContainerOp(
                name='train-region', image=IMAGE, command=['python', '-m', 'forecast.train'],
                arguments=['--features', '/work/features', '--region', item.region, '--weather', item.weather,
                           '--model-dir', '/work/models'],
                pvolumes={'/work': feats.pvolume},
                file_outputs={'mape': '/tmp/mape.txt'})
            with dsl.Condition(train.outputs['mape'] < max_mape):
                dsl.ContainerOp(
                    name='register-model', image='amazon/aws-cli:2.15.30', command=['aws', 's3', 'cp', '--recursive'],
                    arguments=['/work/models/%s' % item.region, 's3://example-forecast/registry/%s/' % item.region],
                    pvolumes={'/work': feats.pvolume})
        backtest = dsl.ContainerOp(
            name='backtest', image=IMAGE, command=['python', '-m', 'forecast.backtest'],
            arguments=['--models', '/work/models', '--reference', '/reference/holdout-2024',
                       '--out', '/work/backtest'],
            pvolumes={'/work': vop.volume})
        backtest.after(train)
        backtest.container.add_env_variable(V1EnvVar(name='BACKTEST_WINDOW_URI',
                                                     value='s3://example-retail/sales/backtest/2024-q2/'))
        backtest.apply(onprem.mount_pvc(pvc_name='forecast-reference', volume_name='reference',
                                        volume_mount_path='/reference'))
        publish = dsl.ContainerOp(
            name='publish-forecast', image='amazon/aws-cli:2.15.30', command=['aws', 's3', 'sync'],
            arguments=['/work/backtest/forecast', 's3://example-forecast/published/latest/'],
            pvolumes={'/work': backtest.pvolume})
        publish.apply(use_aws_secret('forecast-aws', 'AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY'))


if __name__ == '__main__':
    kfp.compiler.Compiler().compile(forecast_pipeline, os.path.splitext(__file__)[0] + '.yaml')
