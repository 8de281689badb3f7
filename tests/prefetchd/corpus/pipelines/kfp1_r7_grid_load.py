# ruff: noqa
"""Electric-grid load forecasting (KFP v1): boto3 download_file of smart-meter readings built
from a bucket parameter, gsutil rsync of HRRR weather in sh -c, static ParallelFor over model
families with URIs built from pipeline parameters in strings, and an s3fs ensemble step."""
import kfp
from kfp import dsl
from kfp.components import create_component_from_func, OutputPath


def ingest_meters(meter_bucket: str, region: str, month: str, readings_path: OutputPath("Parquet")):
    import boto3
    import pandas as pd
    boto3.client("s3").download_file(meter_bucket, f"ami/{region}/{month}/readings.parquet", "/tmp/r.parquet")
    df = pd.read_parquet("/tmp/r.parquet")
    df = df[df["kwh"] >= 0].resample("15min", on="ts").sum()
    df.to_parquet(readings_path)


ingest_op = create_component_from_func(ingest_meters, base_image="python:3.11-slim",
                                       packages_to_install=["boto3", "pandas", "pyarrow"])


def ensemble(models_root: str, families: str) -> str:
    import json
    import s3fs
    import pandas as pd
    fs = s3fs.S3FileSystem()
    preds = []
    for fam in json.loads(families):
        fs.get(f"{models_root}/{fam}/preds.parquet", f"/tmp/{fam}.parquet")
        preds.append(pd.read_parquet(f"/tmp/{fam}.parquet")["yhat"])
    return str(sum(preds).mean() / len(preds))


ensemble_op = create_component_from_func(ensemble, base_image="python:3.11-slim",
                                         packages_to_install=["s3fs", "pandas", "pyarrow"])


def weather_op(weather_uri):
    return dsl.ContainerOp(
        name="stage-weather", image="gcr.io/google.com/cloudsdktool/google-cloud-cli:489.0.0-slim",
        command=["sh", "-c"],
        arguments=['gsutil -m rsync -r "$0" /tmp/hrrr && python3 /opt/summarize.py /tmp/hrrr > /tmp/hrrr_stats.json', weather_uri],
        file_outputs={"weather": "/tmp/hrrr_stats.json"})


def train_op(family, region, month, weather):
    return dsl.ContainerOp(
        name="train-forecaster", image="ghcr.io/acme-grid/loadcast:0.8.1",
        command=["python", "-m", "loadcast.train"],
        arguments=["--family", family,
                   "--data-root", f"s3://acme-grid-features/{region}/{month}/",
                   "--weather-stats", weather,
                   "--horizon", "48",
                   "--output", f"s3://acme-grid-models/{region}/{family}/"])


@dsl.pipeline(name="grid-load-forecast")
def pipeline(meter_bucket: str = "acme-grid-ami", region: str = "north", month: str = "2025-03",
             weather_uri: str = "gs://acme-weather/hrrr/2025-03/north.zarr"):
    ing = ingest_op(meter_bucket, region, month)
    wx = weather_op(weather_uri)
    with dsl.ParallelFor(["lgbm", "tft", "nbeats"]) as fam:
        tr = train_op(fam, region, month, wx.outputs["weather"]).after(ing)
    ensemble_op(f"s3://acme-grid-models/{region}", '["lgbm", "tft", "nbeats"]').after(tr)


if __name__ == "__main__":
    import os
    kfp.compiler.Compiler().compile(pipeline, os.path.splitext(__file__)[0] + ".yaml")
