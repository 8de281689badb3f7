# ruff: noqa
"""Day-ahead electricity load forecast, monthly retrain (KFP v2 + kfp-kubernetes).

Weather drivers come straight from NOAA's public GFS bucket (anonymous s3fs).
Metered load sits on the utility's MinIO and is pulled with s5cmd. The
holiday calendar is owned by another team, who hand us a presigned GET URL
(their bucket in eu-west-1). Weather-station metadata is read with
smart_open through a boto3 client pinned to the regional endpoint. Features
are uploaded for the BI team; the forecast is published only when the
backtest MAPE is good enough.

Compile: python kfp2_b71_load_forecast.py -> kfp2_b71_load_forecast.yaml
"""
import os

from kfp import compiler, dsl, kubernetes
from kfp.dsl import Dataset, Input, Model, Output

IMG = 'ghcr.io/gridco/loadfc:2.9.1'
PRESIGNED = ('https://grid-ref.s3.eu-west-1.amazonaws.com/calendars/holidays_2025.csv'
             '?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAEXAMPLE%2F20250301%2Feu-west-1%2Fs3%2Faws4_request'
             '&X-Amz-Date=20250301T080000Z&X-Amz-Expires=604800&X-Amz-SignedHeaders=host'
             '&X-Amz-Signature=3f1c0e9a7b6d5c4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e')


@dsl.component(base_image=IMG, packages_to_install=['s3fs==2024.6.1'])
def fetch_gfs(run_date: str, gfs: Output[Dataset]):
    import os
    import s3fs
    fs = s3fs.S3FileSystem(anon=True)
    os.makedirs(gfs.path, exist_ok=True)
    for fh in (0, 24):
        fs.get(f'noaa-gfs-bdp-pds/gfs.{run_date}/00/atmos/gfs.t00z.pgrb2.0p25.f{fh:03d}',
               os.path.join(gfs.path, f'f{fh:03d}.grib2'))


@dsl.container_component
def fetch_load(month_prefix: str, load: Output[Dataset]):
    return dsl.ContainerSpec(
        image='peakcom/s5cmd:v2.2.2',
        command=['/s5cmd', '--endpoint-url', 'http://minio.data:9000', 'cp'],
        args=[f's3://grid-telemetry/load/{month_prefix}/*.parquet', f'{load.path}/'])


@dsl.container_component
def fetch_holidays(url: str, holidays: Output[Dataset]):
    return dsl.ContainerSpec(
        image='curlimages/curl:8.7.1',
        command=['sh', '-c', 'curl -fsSL -o "$1" "$0"'],
        args=[url, holidays.path])


@dsl.component(base_image=IMG, packages_to_install=['smart_open[s3]==7.0.4'])
def build_features(gfs: Input[Dataset], load: Input[Dataset], holidays: Input[Dataset], month: str,
                   features: Output[Dataset]):
    import json
    import boto3
    from smart_open import open as sopen
    import loadfc
    client = boto3.client('s3', endpoint_url='https://s3.eu-west-1.amazonaws.com')
    with sopen('s3://grid-ref/stations/stations_v3.geojson', 'r', transport_params={'client': client}) as f:
        stations = json.load(f)
    df = loadfc.build(gfs.path, load.path, holidays.path, stations)
    df.to_parquet(features.path)
    bucket = 'grid-features'
    key = f'load/{month}/features.parquet'
    client.upload_file(features.path, bucket, key)


@dsl.component(base_image=IMG)
def train_forecast(features: Input[Dataset], model: Output[Model]) -> float:
    import loadfc
    m, mape = loadfc.train_backtest(features.path)
    m.save(model.path)
    return mape


@dsl.container_component
def publish_forecast(model: Input[Model], month: str):
    return dsl.ContainerSpec(
        image=IMG,
        command=['sh', '-c'],
        args=['python -m loadfc.predict --model "$0" --out /tmp/forecast.csv && '
              'aws --endpoint-url https://s3.eu-west-1.amazonaws.com s3 cp /tmp/forecast.csv '
              's3://grid-forecasts/day-ahead/$1/forecast.csv', model.path, month])


@dsl.pipeline(name='load-forecast-monthly')
def load_forecast(run_date: str = '20250301', month: str = '2025-03',
                  holidays_url: str = PRESIGNED):
    gfs = fetch_gfs(run_date=run_date)
    load = fetch_load(month_prefix='2025/03')
    kubernetes.use_secret_as_env(load, secret_name='minio-grid',
                                 secret_key_to_env={'access': 'AWS_ACCESS_KEY_ID', 'secret': 'AWS_SECRET_ACCESS_KEY'})
    hol = fetch_holidays(url=holidays_url)
    feats = build_features(gfs=gfs.outputs['gfs'], load=load.outputs['load'],
                           holidays=hol.outputs['holidays'], month=month)
    tr = train_forecast(features=feats.outputs['features'])
    with dsl.If(tr.outputs['Output'] < 0.08, name='mape-ok'):
        publish_forecast(model=tr.outputs['model'], month=month)


if __name__ == '__main__':
    compiler.Compiler().compile(load_forecast, os.path.splitext(__file__)[0] + '.yaml')
