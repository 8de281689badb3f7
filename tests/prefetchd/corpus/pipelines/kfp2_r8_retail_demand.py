# ruff: noqa
"""Weekly store-level demand forecasting for Northwind Retail.

One LightGBM model per sales region, warm-started from the current champion,
backtested on the holdout shards, and published to the serving bucket when the
WAPE is good enough.
"""
from typing import List

from kfp import compiler, dsl
from kfp.dsl import Dataset, Input, Output

BASE_IMAGE = "python:3.11-slim"
FORECAST_IMAGE = "ghcr.io/northwind-ml/demand-forecast:2.4.1"

REGIONS = [
    {"region": "emea", "stores": 412},
    {"region": "amer", "stores": 655},
    {"region": "apac", "stores": 238},
]


@dsl.component(base_image=BASE_IMAGE, packages_to_install=["pandas==2.2.2", "pyarrow==16.1.0", "s3fs==2024.6.1"])
def extract_sales(lake_bucket: str, snapshot: str, sales: Output[Dataset]):
    import pandas as pd

    SPLITS = ["train", "valid", "test"]
    base = f"s3://{lake_bucket}/curated/pos_daily/snapshot={snapshot}"
    frames = {split: pd.read_parquet(f"{base}/{split}.parquet") for split in SPLITS}
    for split, df in frames.items():
        df["split"] = split
    pd.concat(frames.values()).to_parquet(sales.path)


@dsl.component(base_image=BASE_IMAGE, packages_to_install=["pandas==2.2.2", "pyarrow==16.1.0", "s3fs==2024.6.1", "gcsfs==2024.6.1"])
def load_calendar(promo_calendar_uri: str, calendar: Output[Dataset]):
    import os

    import pandas as pd

    promos = pd.read_csv(promo_calendar_uri, parse_dates=["start", "end"])
    holidays = pd.read_parquet(os.environ["HOLIDAYS_URI"])
    cal = promos.merge(holidays, how="outer", left_on="start", right_on="date")
    cal.to_parquet(calendar.path)


@dsl.component(base_image=FORECAST_IMAGE)
def train_region_model(
    region: str,
    stores: str,
    snapshot: str,
    sales: Input[Dataset],
    calendar: Input[Dataset],
) -> str:
    import lightgbm as lgb
    import pandas as pd
    import s3fs

    fs = s3fs.S3FileSystem()
    champion = f"s3://northwind-retail-models/demand/champion/{region}/model.lgb"
    with fs.open(champion, "rb") as f:
        init_model = lgb.Booster(model_str=f.read().decode())

    df = pd.read_parquet(sales.path)
    df = df[df["region"] == region].merge(pd.read_parquet(calendar.path), how="left", on="date")
    train = df[df["split"] == "train"]
    booster = lgb.train(
        {"objective": "tweedie", "num_leaves": 63 if int(stores) > 400 else 31},
        lgb.Dataset(train.drop(columns=["units", "split"]), train["units"]),
        init_model=init_model,
        num_boost_round=400,
    )
    out = f"s3://northwind-retail-models/demand/{snapshot}/{region}/model.lgb"
    with fs.open(out, "w") as f:
        f.write(booster.model_to_string())
    return out


@dsl.component(base_image=FORECAST_IMAGE)
def backtest(lake_bucket: str, model_uris: List[str], n_holdout_shards: int = 4) -> float:
    import lightgbm as lgb
    import numpy as np
    import pandas as pd
    import s3fs

    fs = s3fs.S3FileSystem()

    def shard_uri(i):
        return f"s3://{lake_bucket}/curated/pos_daily/holdout/part-{i:05d}.parquet"

    holdout = pd.concat([pd.read_parquet(shard_uri(i)) for i in range(4)])
    errs, total = 0.0, 0.0
    for uri in model_uris:
        with fs.open(uri, "r") as f:
            booster = lgb.Booster(model_str=f.read())
        region = uri.split("/")[-2]
        part = holdout[holdout["region"] == region]
        pred = booster.predict(part.drop(columns=["units"]))
        errs += float(np.abs(pred - part["units"]).sum())
        total += float(part["units"].sum())
    return errs / total


@dsl.component(base_image=BASE_IMAGE, packages_to_install=["s3fs==2024.6.1"])
def publish_forecasts(snapshot: str, model_uris: List[str]):
    import s3fs

    fs = s3fs.S3FileSystem()
    dest = f"s3://northwind-retail-serving/forecasts/{snapshot}/"
    for uri in model_uris:
        region = uri.split("/")[-2]
        fs.copy(uri, dest + region + "/model.lgb")


@dsl.pipeline(name="retail-demand-weekly", description="Region-level demand forecast refresh")
def retail_demand(
    lake_bucket: str = "northwind-retail-lake",
    snapshot: str = "2025-05-04",
    promo_calendar_uri: str = "gs://northwind-marketing/promo-calendar/2025/calendar.csv",
    max_wape: float = 0.18,
):
    sales = extract_sales(lake_bucket=lake_bucket, snapshot=snapshot)
    sales.set_caching_options(False)

    cal = load_calendar(promo_calendar_uri=promo_calendar_uri)
    cal.set_env_variable("HOLIDAYS_URI", "s3://northwind-retail-ref/calendars/holidays_v3.parquet")

    with dsl.ParallelFor(REGIONS, parallelism=3) as r:
        trained = train_region_model(
            region=r.region,
            stores=r.stores,
            snapshot=snapshot,
            sales=sales.outputs["sales"],
            calendar=cal.outputs["calendar"],
        )
        trained.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(1)

    bt = backtest(lake_bucket=lake_bucket, model_uris=dsl.Collected(trained.output))

    with dsl.If(bt.output < max_wape, name="wape-ok"):
        publish_forecasts(snapshot=snapshot, model_uris=dsl.Collected(trained.output))


if __name__ == "__main__":
    compiler.Compiler().compile(retail_demand, __file__.replace(".py", ".yaml"))
