# ruff: noqa
"""Retail demand forecasting: per-region LightGBM models with a backtest gate (KFP v1 SDK -> Argo).

Daily sales are synced from S3 onto a per-run work volume (VolumeOp),
validated and turned into features there (the holiday calendar comes from a
constant env var, the promotions plan from a constant S3 path read by its own
step). One model per region is trained in a static ParallelFor; each writes
its model to a staging prefix. The backtest reads the staged models and the
holdout weeks; if WAPE is under the threshold, the staged models are promoted.
A notification runs as the exit handler.

Compile (kfp 1.8.x): python kfp1_b62_demand_forecast.py  -> kfp1_b62_demand_forecast.yaml
"""
import os

import kfp
from kfp import dsl
from kfp.components import InputPath, OutputPath, create_component_from_func
from kubernetes.client.models import V1EnvVar

IMAGE = 'ghcr.io/acme/demand-forecast:3.2.0'
PROMOTIONS_URI = 's3://acme-retail-lake/promotions/plan_2024.parquet'
HOLIDAYS_URI = 's3://acme-retail-ref/calendars/us_holidays_2020_2026.csv'
STAGING_URI = 's3://acme-retail-models/demand-forecast/staging/'
PRODUCTION_URI = 's3://acme-retail-models/demand-forecast/production/'

REGIONS = [
    {'region': 'northeast', 'stores_uri': 's3://acme-retail-lake/stores/region=northeast/stores.parquet'},
    {'region': 'south', 'stores_uri': 's3://acme-retail-lake/stores/region=south/stores.parquet'},
    {'region': 'west', 'stores_uri': 's3://acme-retail-lake/stores/region=west/stores.parquet'},
]


def validate_sales(sales_dir: str, min_days: int) -> int:
    import glob
    files = sorted(glob.glob(sales_dir + '/*.parquet'))
    if len(files) < min_days:
        raise ValueError(f'only {len(files)} daily files')
    return len(files)


def fetch_promotions(promotions_uri: str, promotions: OutputPath('Parquet')):
    import pandas as pd
    pd.read_parquet(promotions_uri).to_parquet(promotions)


def build_features(sales_dir: str, promotions: InputPath('Parquet'), horizon_days: int, features_dir: str):
    import os, subprocess
    subprocess.run(['python', '-m', 'forecast.features', '--sales', sales_dir, '--promotions', promotions,
                    '--holidays', os.environ['HOLIDAY_CALENDAR_URI'], '--horizon', str(horizon_days),
                    '--out', features_dir], check=True)


def train_region(features_dir: str, region: str, stores_uri: str, staging_uri: str):
    import subprocess
    subprocess.run(['python', '-m', 'forecast.train', '--features', features_dir, '--region', region,
                    '--stores', stores_uri, '--out', f'{staging_uri}{region}/'], check=True)


def backtest(staging_uri: str, holdout_uri: str) -> float:
    import subprocess
    out = subprocess.run(['python', '-m', 'forecast.backtest', '--models', staging_uri, '--holdout', holdout_uri],
                         check=True, capture_output=True, text=True)
    return float(out.stdout.strip())


def notify(message: str):
    print(message)


validate_op = create_component_from_func(validate_sales, base_image=IMAGE)
promotions_op = create_component_from_func(fetch_promotions, base_image=IMAGE)
features_op = create_component_from_func(build_features, base_image=IMAGE)
train_op = create_component_from_func(train_region, base_image=IMAGE)
backtest_op = create_component_from_func(backtest, base_image=IMAGE)
notify_op = create_component_from_func(notify, base_image='python:3.11-slim')


@dsl.pipeline(name='retail-demand-forecast')
def demand_pipeline(sales_uri: str = 's3://acme-retail-lake/sales/daily/2024/',
                    holdout_uri: str = 's3://acme-retail-lake/sales/holdout/2024-w20-w23/',
                    horizon_days: int = 28,
                    max_wape: float = 0.18):
    bye = notify_op(message='retail-demand-forecast finished')
    with dsl.ExitHandler(bye):
        vop = dsl.VolumeOp(name='create-workspace', resource_name='forecast-ws', size='30Gi',
                           modes=dsl.VOLUME_MODE_RWO)
        dl = dsl.ContainerOp(name='download-sales', image='amazon/aws-cli:2.15.30',
                             command=['aws', 's3', 'sync', '--exclude', '*', '--include', '*.parquet'],
                             arguments=[sales_uri, '/ws/sales'],
                             pvolumes={'/ws': vop.volume})
        val = validate_op(sales_dir='/ws/sales', min_days=300).add_pvolumes({'/ws': dl.pvolume})
        promo = promotions_op(promotions_uri=PROMOTIONS_URI)
        feats = features_op(sales_dir='/ws/sales', promotions=promo.outputs['promotions'],
                            horizon_days=horizon_days, features_dir='/ws/features')
        feats.add_pvolumes({'/ws': dl.pvolume}).after(val)
        feats.container.add_env_variable(V1EnvVar(name='HOLIDAY_CALENDAR_URI', value=HOLIDAYS_URI))

        with dsl.ParallelFor(REGIONS) as item:
            tr = train_op(features_dir='/ws/features', region=item.region, stores_uri=item.stores_uri,
                          staging_uri=STAGING_URI)
            tr.add_pvolumes({'/ws': feats.pvolume})
            tr.set_cpu_limit('4').set_memory_limit('16G')

        bt = backtest_op(staging_uri=STAGING_URI, holdout_uri=holdout_uri).after(tr)

        with dsl.Condition(bt.output < max_wape):
            dsl.ContainerOp(name='promote-models', image='amazon/aws-cli:2.15.30',
                            command=['aws', 's3', 'sync', '--delete'],
                            arguments=[STAGING_URI, PRODUCTION_URI])


if __name__ == '__main__':
    kfp.compiler.Compiler().compile(demand_pipeline, os.path.splitext(__file__)[0] + '.yaml')
