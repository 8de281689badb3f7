# ruff: noqa
"""Weekly dengue case forecasts per province: surveillance counts + ERA5 weather + ovitrap counts -> TFT model."""
from typing import List, NamedTuple

from kfp import compiler, dsl, kubernetes

IMAGE = "ghcr.io/vbd-lab/forecast:2025.06"


@dsl.component(base_image=IMAGE)
def aggregate_weather(weather_root: str, province: str, run_tag: str):
    import pandas as pd

    daily = pd.read_parquet(f"{weather_root}/province={province}/",
                            columns=["date", "t2m_mean", "tp_sum", "rh_mean"])
    daily["date"] = pd.to_datetime(daily["date"])
    weekly = daily.resample("W-MON", on="date").agg({"t2m_mean": "mean", "tp_sum": "sum", "rh_mean": "mean"})
    weekly["province"] = province
    weekly.reset_index().to_parquet(f"s3://vbd-features/{run_tag}/weather/{province}.parquet", index=False)


@dsl.component(base_image=IMAGE)
def build_training_table(cases_uri: str, run_tag: str, boundaries: dsl.Input[dsl.Dataset],
                         table: dsl.Output[dsl.Dataset],
                         traps_uri: str = "s3://vbd-surveillance/entomology/ovitrap_counts.csv"):
    import geopandas as gpd
    import pandas as pd

    cases = pd.read_parquet(cases_uri)
    weather = pd.read_parquet(f"s3://vbd-features/{run_tag}/weather/")
    traps = pd.read_csv(traps_uri, parse_dates=["week_start"])
    regions = gpd.read_file(boundaries.path)[["GID_1", "NAME_1", "geometry"]]

    df = cases.merge(weather, on=["province", "date"], how="left").merge(traps, on=["province", "week_start"], how="left")
    df = df.merge(regions.drop(columns="geometry"), left_on="province", right_on="NAME_1")
    for lag in (1, 2, 4, 8):
        df[f"cases_lag{lag}"] = df.groupby("province")["cases"].shift(lag)
    df.dropna().to_parquet(table.path, index=False)


@dsl.component(base_image=IMAGE)
def train_forecaster(table: dsl.Input[dsl.Dataset], horizon_weeks: int, run_tag: str,
                     model: dsl.Output[dsl.Model]) -> NamedTuple("Out", [("mape", float)]):
    import os
    from collections import namedtuple

    import fsspec
    import pandas as pd
    import torch
    from forecast.tft import TFTForecaster

    df = pd.read_parquet(table.path)
    holidays = pd.read_csv(os.environ["HOLIDAYS_URI"], parse_dates=["date"])
    fc = TFTForecaster(horizon=horizon_weeks, hidden_size=64, device="cuda")
    fc.fit(df, holidays=holidays, max_epochs=40)
    mape = float(fc.validation_mape())

    torch.save(fc.state_dict(), model.path)
    with fsspec.open(f"s3://vbd-models/dengue/{run_tag}/tft.ckpt", "wb") as f:
        torch.save(fc.state_dict(), f)
    return namedtuple("Out", ["mape"])(mape)


@dsl.component(base_image=IMAGE)
def register_model(model: dsl.Input[dsl.Model], run_tag: str):
    import boto3

    boto3.client("s3").upload_file(model.path, "vbd-models", f"dengue/registry/{run_tag}/model.pt")


@dsl.component(base_image=IMAGE)
def forecast_province(province: str, run_tag: str, horizon_weeks: int, model: dsl.Input[dsl.Model]):
    import pandas as pd
    import torch
    from forecast.tft import TFTForecaster

    fc = TFTForecaster(horizon=horizon_weeks, hidden_size=64, device="cpu")
    fc.load_state_dict(torch.load(model.path, map_location="cpu"))
    recent = pd.read_parquet(f"s3://vbd-surveillance/dengue/latest/{province}.parquet")
    out = fc.predict(recent)
    out.to_csv(f"s3://vbd-forecasts/{run_tag}/{province}.csv", index=False)


@dsl.pipeline(name="dengue-outbreak-forecast")
def dengue_forecast(cases_uri: str = "s3://vbd-surveillance/dengue/cases/weekly_2015_2025.parquet",
                    weather_root: str = "s3://vbd-climate/era5-weekly-inputs",
                    provinces: List[str] = ["hanoi", "ho-chi-minh", "da-nang", "can-tho"],
                    horizon_weeks: int = 8,
                    run_tag: str = "2025w24",
                    max_mape: float = 0.35):
    boundaries = dsl.importer(artifact_uri="s3://vbd-ref/boundaries/gadm41_VNM_1.gpkg",
                              artifact_class=dsl.Dataset, reimport=False)

    with dsl.ParallelFor(provinces, parallelism=2) as province:
        agg = aggregate_weather(weather_root=weather_root, province=province, run_tag=run_tag)

    table = build_training_table(cases_uri=cases_uri, run_tag=run_tag, boundaries=boundaries.output)
    table.after(agg)

    train = train_forecaster(table=table.outputs["table"], horizon_weeks=horizon_weeks, run_tag=run_tag)
    train.set_env_variable("HOLIDAYS_URI", "s3://vbd-ref/calendars/vn_public_holidays.csv")
    train.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(1)
    train.set_memory_limit("32G")
    kubernetes.use_secret_as_env(train, secret_name="wandb-creds", secret_key_to_env={"api_key": "WANDB_API_KEY"})

    with dsl.If(train.outputs["mape"] < max_mape):
        register_model(model=train.outputs["model"], run_tag=run_tag)
        with dsl.ParallelFor(provinces) as p:
            forecast_province(province=p, run_tag=run_tag, horizon_weeks=horizon_weeks, model=train.outputs["model"])


if __name__ == "__main__":
    compiler.Compiler().compile(dengue_forecast, __file__.replace(".py", ".yaml"))
