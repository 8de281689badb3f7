# ruff: noqa
"""Weekly demand forecast per region and category (KFP v2).

POS extracts come from one bucket per region (a static ParallelFor over dicts
whose bucket/prefix fields are composed into s3:// paths inside the component);
per-region promotion calendars are read from a parameterised lake root; the
features of all regions are fanned in with dsl.Collected; one LightGBM model
is trained per category (ParallelFor over a list pipeline parameter, with
elasticity priors read per category); the champion models are published.

Compile: python kfp2_b47_retail_demand.py  -> kfp2_b47_retail_demand.yaml
"""
import os
from typing import List

from kfp import compiler, dsl
from kfp.dsl import Dataset, Input, Metrics, Model, Output

FEAT_IMAGE = 'ghcr.io/acme-retail/demand-features:3.4.1'
TRAIN_IMAGE = 'ghcr.io/acme-retail/demand-lgbm:3.4.1'

POS_SOURCES = [
    {'region': 'us-east', 'bucket': 'acme-pos-us', 'prefix': 'pos/daily/us-east'},
    {'region': 'eu-west', 'bucket': 'acme-pos-eu', 'prefix': 'pos/daily/eu-west'},
    {'region': 'ap-south', 'bucket': 'acme-pos-ap', 'prefix': 'pos/daily/ap-south'},
]


@dsl.container_component
def fetch_holidays(holidays: Output[Dataset]):
    return dsl.ContainerSpec(
        image='amazon/aws-cli:2.15.30',
        command=['sh', '-c'],
        args=['mkdir -p "$0" && for r in us eu ap; do '
              'aws s3 cp "s3://acme-retail-ref/holidays/$r/2024.csv" "$0/$r.csv" --only-show-errors; done',
              holidays.path])


@dsl.component(base_image=FEAT_IMAGE)
def extract_sales(bucket: str, prefix: str, region: str, week: str, sales: Output[Dataset]):
    import pandas as pd
    src = f's3://{bucket}/{prefix}/week={week}/'
    df = pd.read_parquet(src)
    df['region'] = region
    df.to_parquet(sales.path)


@dsl.component(base_image=FEAT_IMAGE)
def build_features(sales: Input[Dataset], holidays: Input[Dataset], promo_root: str, region: str,
                   features: Output[Dataset]):
    import glob
    import pandas as pd
    df = pd.read_parquet(sales.path)
    promos = pd.read_parquet(f'{promo_root.rstrip("/")}/{region}/promo_calendar.parquet')
    hol = pd.concat(pd.read_csv(p) for p in glob.glob(holidays.path + '/*.csv'))
    df = df.merge(promos, on=['sku', 'date'], how='left').merge(hol, on='date', how='left')
    df.to_parquet(features.path)


@dsl.component(base_image=FEAT_IMAGE)
def merge_features(parts: Input[List[Dataset]], merged: Output[Dataset]):
    import pandas as pd
    pd.concat(pd.read_parquet(p.path) for p in parts).to_parquet(merged.path)


@dsl.component(base_image=TRAIN_IMAGE)
def train_forecaster(features: Input[Dataset], category: str, priors_root: str,
                     model: Output[Model], metrics: Output[Metrics]):
    import json
    import fsspec
    import lightgbm as lgb
    import pandas as pd
    with fsspec.open(f'{priors_root}/{category}/elasticity.json') as f:
        priors = json.load(f)
    df = pd.read_parquet(features.path)
    df = df[df['category'] == category]
    booster = lgb.train({'objective': 'tweedie', 'monotone_constraints': priors['monotone']},
                        lgb.Dataset(df.drop(columns=['units']), df['units']))
    booster.save_model(model.path)
    metrics.log_metric('rows', len(df))


@dsl.component(base_image=TRAIN_IMAGE)
def select_champions(models: Input[List[Model]], champions: Output[Model]):
    import os
    import shutil
    os.makedirs(champions.path, exist_ok=True)
    for i, m in enumerate(models):
        shutil.copy(m.path, os.path.join(champions.path, f'model_{i}.txt'))


@dsl.container_component
def publish_forecast(champions: Input[Model], week: str):
    return dsl.ContainerSpec(
        image='amazon/aws-cli:2.15.30',
        command=['aws', 's3', 'sync'],
        args=[champions.path, f's3://acme-retail-forecasts/models/week={week}/'])


@dsl.pipeline(name='retail-demand-weekly')
def retail_demand(forecast_week: str = '2024-W23',
                  promo_root: str = 's3://acme-retail-lake/promotions/2024',
                  priors_root: str = 's3://acme-retail-lake/priors/elasticity-v5',
                  categories: list = ['grocery', 'apparel', 'electronics']):
    hol = fetch_holidays()
    with dsl.ParallelFor(POS_SOURCES, parallelism=2) as src:
        sales = extract_sales(bucket=src.bucket, prefix=src.prefix, region=src.region, week=forecast_week)
        feats = build_features(sales=sales.outputs['sales'], holidays=hol.outputs['holidays'],
                               promo_root=promo_root, region=src.region)
    merged = merge_features(parts=dsl.Collected(feats.outputs['features']))
    with dsl.ParallelFor(categories, parallelism=2) as cat:
        tr = train_forecaster(features=merged.outputs['merged'], category=cat, priors_root=priors_root)
    champs = select_champions(models=dsl.Collected(tr.outputs['model']))
    publish_forecast(champions=champs.outputs['champions'], week=forecast_week)


if __name__ == '__main__':
    compiler.Compiler().compile(retail_demand, os.path.splitext(__file__)[0] + '.yaml')
