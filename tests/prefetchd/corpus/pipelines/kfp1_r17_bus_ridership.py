# ruff: noqa
"""Route-level bus ridership forecast (service planning, monthly).

Stages the GTFS feed and NOAA weather on the shared transit-features volume,
builds per-route features from automatic passenger counter (APC) boardings,
trains one LightGBM model across routes, backtests it, and pushes the
forecast to the planning bucket when the backtest MAPE is acceptable.
"""
import kfp
from kfp import dsl, onprem
from kfp.components import create_component_from_func

PLANNING_IMAGE = "ghcr.io/metrotransit/planning-ml:2025.04"


def load_gtfs(gtfs_uri: str):
    import os
    import zipfile

    import s3fs

    fs = s3fs.S3FileSystem()
    fs.get(gtfs_uri, "/tmp/gtfs.zip")
    os.makedirs("/features/gtfs", exist_ok=True)
    with zipfile.ZipFile("/tmp/gtfs.zip") as z:
        for name in ("stops.txt", "trips.txt", "stop_times.txt", "calendar.txt", "routes.txt"):
            z.extract(name, "/features/gtfs")


def route_features(route: str, apc_bucket: str, service_month: str):
    import os

    import pandas as pd

    boardings = pd.read_parquet(
        f"s3://{apc_bucket}/boardings/route={route}/month={service_month}/",
        columns=["trip_id", "stop_id", "service_date", "ons", "offs"],
    )
    stop_times = pd.read_csv("/features/gtfs/stop_times.txt", usecols=["trip_id", "stop_id", "arrival_time"])
    df = boardings.merge(stop_times, on=["trip_id", "stop_id"], how="left")
    df["hour"] = df["arrival_time"].str.slice(0, 2).astype(int) % 24
    feats = df.groupby(["service_date", "hour"]).agg(ons=("ons", "sum"), offs=("offs", "sum")).reset_index()
    os.makedirs("/features/routes", exist_ok=True)
    feats.to_parquet(f"/features/routes/{route}.parquet", index=False)


def backtest(service_month: str) -> float:
    import boto3
    import lightgbm as lgb
    import numpy as np
    import pandas as pd

    boto3.client("s3").download_file(
        "metrotransit-ml", f"ridership/lgbm/{service_month}/model.txt", "/tmp/model.txt"
    )
    booster = lgb.Booster(model_file="/tmp/model.txt")
    hold = pd.read_parquet("/features/holdout/last_8_weeks.parquet")
    pred = booster.predict(hold.drop(columns=["ons"]))
    mape = float(np.mean(np.abs(pred - hold["ons"]) / np.maximum(hold["ons"], 1)))
    hold.assign(forecast=pred).to_csv("/features/forecast.csv", index=False)
    return mape


def push_to_planning_db(service_month: str):
    import boto3

    boto3.client("s3").upload_file(
        "/features/forecast.csv", "metrotransit-planning", f"forecasts/{service_month}/ridership.csv"
    )


load_gtfs_op = create_component_from_func(load_gtfs, base_image=PLANNING_IMAGE)
route_features_op = create_component_from_func(route_features, base_image=PLANNING_IMAGE)
backtest_op = create_component_from_func(backtest, base_image=PLANNING_IMAGE)
push_op = create_component_from_func(push_to_planning_db, base_image=PLANNING_IMAGE)


@dsl.pipeline(name="bus-ridership-forecast")
def ridership_pipeline(
    routes: list = ["12", "38", "49", "71"],
    gtfs_uri: str = "s3://metrotransit-gtfs/feeds/2025-06-01/gtfs.zip",
    apc_bucket: str = "metrotransit-apc",
    service_month: str = "2025-05",
    max_mape: float = 0.15,
):
    vol = onprem.mount_pvc("transit-features", "features", "/features")

    gtfs = load_gtfs_op(gtfs_uri=gtfs_uri).apply(vol)

    weather = dsl.ContainerOp(
        name="weather-history",
        image="gcr.io/google.com/cloudsdktool/google-cloud-cli:489.0.0-slim",
        command=["gsutil", "-m", "cp"],
        arguments=["gs://metrotransit-ext/noaa/ghcnd/USW00014922_2025.csv", "/features/weather/"],
    ).apply(vol)

    with dsl.ParallelFor(routes, parallelism=2) as route:
        rf = route_features_op(route=route, apc_bucket=apc_bucket, service_month=service_month)
        rf.apply(vol).after(gtfs)

    train = dsl.ContainerOp(
        name="train-forecaster",
        image=PLANNING_IMAGE,
        command=["python", "-m", "ridership.train"],
        arguments=[
            "--data-dir", "/features",
            "--calendar", "s3://metrotransit-ref/calendars/service_calendar_2025.csv",
            "--model-out", f"s3://metrotransit-ml/ridership/lgbm/{service_month}/",
        ],
    ).apply(vol).after(rf, weather)

    bt = backtest_op(service_month=service_month).apply(vol).after(train)

    with dsl.Condition(bt.output < max_mape):
        push_op(service_month=service_month).apply(vol)


if __name__ == "__main__":
    kfp.compiler.Compiler().compile(ridership_pipeline, __file__.replace(".py", ".yaml"))
