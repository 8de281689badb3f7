# ruff: noqa
"""KFP v2 (held-out test): M5 retail demand forecasting with a Temporal Fusion Transformer.
Idioms: str.format and "/".join location building, polars.scan_parquet over a glob,
ParallelFor over a list pipeline parameter + dsl.Collected, os.environ set with
set_env_variable, dsl.importer + set_display_name, kfp-kubernetes add_toleration and
use_config_map_as_volume, fsspec write of a report.

Compile: /tmp/kfp2/bin/python kfp2_heldout_m5_forecast.py
"""
import os
from typing import List

from kfp import compiler, dsl, kubernetes

PY = 'python:3.11-slim'
PKGS = ['polars==0.20.31', 'pandas==2.2.2', 'pyarrow==16.1.0', 's3fs==2024.3.1']
TRAIN_IMAGE = 'ghcr.io/acme-retail/forecasting:2.3.0'


@dsl.component(base_image=PY, packages_to_install=PKGS)
def build_calendar(lake: str, snapshot: str, calendar: dsl.Output[dsl.Dataset]):
    import polars as pl
    src = "{}/m5/calendar/{}.parquet".format(lake, snapshot)
    cal = pl.scan_parquet(src).with_columns(pl.col("date").str.to_date()).collect()
    cal.write_parquet(calendar.path)


@dsl.component(base_image=PY, packages_to_install=PKGS)
def featurize_store(lake: str, store: str, calendar: dsl.Input[dsl.Dataset],
                    features: dsl.Output[dsl.Dataset]):
    import polars as pl
    store_dir = "/".join([lake.rstrip("/"), "m5", "sales", "store_id=" + store])
    sales = pl.scan_parquet(store_dir + "/*.parquet")
    cal = pl.scan_parquet(calendar.path)
    lags = [pl.col("units").shift(k).over("item_id").alias(f"lag_{k}") for k in (7, 14, 28)]
    out = sales.join(cal, on="d").sort("date").with_columns(lags)
    out.collect().write_parquet(features.path)


@dsl.component(base_image=TRAIN_IMAGE)
def train_tft(features: List[dsl.Dataset], horizon: int, model: dsl.Output[dsl.Model]):
    import os

    import pandas as pd
    from forecasting.tft import fit_tft
    prices = pd.read_parquet(os.environ["PRICES_URI"])
    frames = [pd.read_parquet(f.path) for f in features]
    fit_tft(pd.concat(frames), prices=prices, horizon=horizon,
            hparams="/etc/tft/hparams.yaml", out_dir=model.path)


@dsl.component(base_image=TRAIN_IMAGE)
def backtest(lake: str, snapshot: str, model: dsl.Input[dsl.Model], baseline: dsl.Input[dsl.Model]) -> float:
    import json

    import fsspec
    import pandas as pd
    from forecasting.tft import load_tft, wrmsse
    holdout = pd.read_parquet(lake + "/m5/holdout/" + snapshot + "/")
    ours = wrmsse(load_tft(model.path), holdout)
    ref = wrmsse(load_tft(baseline.path), holdout)
    report = "s3://acme-retail-reports/m5/{}/backtest.json".format(snapshot)
    with fsspec.open(report, "w") as f:
        json.dump({"tft": ours, "baseline": ref}, f)
    return ours - ref


@dsl.pipeline(name='m5-tft-forecast')
def m5_forecast(lake: str = 's3://acme-retail-lake', snapshot: str = '2024-05-19', horizon: int = 28,
                stores: List[str] = ['CA_1', 'TX_2', 'WI_3']):
    cal = build_calendar(lake=lake, snapshot=snapshot)
    with dsl.ParallelFor(stores, parallelism=2) as store:
        feat = featurize_store(lake=lake, store=store, calendar=cal.outputs['calendar'])
    train = train_tft(features=dsl.Collected(feat.outputs['features']), horizon=horizon)
    train.set_env_variable('PRICES_URI', 's3://acme-retail-lake/m5/sell_prices/v2/')
    train.set_accelerator_type('nvidia.com/gpu').set_accelerator_limit(1)
    kubernetes.add_toleration(train, key='nvidia.com/gpu', operator='Exists', effect='NoSchedule')
    kubernetes.use_config_map_as_volume(train, config_map_name='tft-hparams', mount_path='/etc/tft')

    base = dsl.importer(artifact_uri='s3://acme-retail-models/tft/baseline-2024-04/',
                        artifact_class=dsl.Model, reimport=False).set_display_name('baseline-model')
    backtest(lake=lake, snapshot=snapshot, model=train.outputs['model'], baseline=base.output)


if __name__ == '__main__':
    compiler.Compiler().compile(m5_forecast, os.path.splitext(__file__)[0] + '.yaml')
