# ruff: noqa
"""Day-ahead feeder load forecast (grid operations analytics team)."""
from typing import List

from kfp import compiler, dsl, kubernetes

MINIO = "http://minio.grid-ops.svc.cluster.local:9000"
CEPH = "http://ceph-rgw.grid.svc.cluster.local:7480"


@dsl.container_component
def pull_nwp(region: str, forecast_date: str, nwp: dsl.Output[dsl.Dataset]):
    return dsl.ContainerSpec(
        image="ghcr.io/gridco/gridcast-tools:0.11.2",
        command=["sh", "-c"],
        args=[
            "set -eu\n"
            "mkdir -p /tmp/nwp\n"
            "cat > /tmp/nwp.cmds <<EOF\n"
            f"cp s3://grid-weather/nwp/icon-d2/{region}/{forecast_date}/*.grib2 /tmp/nwp/\n"
            f"cp s3://grid-weather/nwp/icon-d2/{region}/static/orography.grib2 /tmp/nwp/\n"
            "EOF\n"
            f"s5cmd --endpoint-url {MINIO} --numworkers 32 run /tmp/nwp.cmds\n"
            f"python -m gridcast.nwp_to_zarr --in /tmp/nwp --region {region} --out {nwp.path}\n"
        ],
    )


@dsl.container_component
def load_meters(meter_month: str, meters: dsl.Output[dsl.Dataset]):
    return dsl.ContainerSpec(
        image="rocker/r-ver:4.4.1",
        command=["Rscript", "-e"],
        args=[
            "suppressMessages({library(arrow); library(aws.s3); library(dplyr)})\n"
            "args <- commandArgs(trailingOnly = TRUE)\n"
            f"loads <- arrow::read_parquet('s3://grid-meters/ami/month={meter_month}/feeder_load.parquet?endpoint_override=ceph-rgw.grid.svc.cluster.local:7480&scheme=http')\n"
            "hol <- aws.s3::s3read_using(read.csv, object = 'calendars/holidays-2024.csv', bucket = 'grid-reference', region = '', use_https = FALSE)\n"
            "out <- loads %>% mutate(holiday = as.Date(ts) %in% as.Date(hol$date))\n"
            "arrow::write_feather(out, args[1])\n",
            meters.path,
        ],
    )


@dsl.container_component
def dvc_features(dvc_rev: str, features: dsl.Output[dsl.Dataset]):
    return dsl.ContainerSpec(
        image="ghcr.io/gridco/dvc:3.51.2",
        command=["bash", "-c"],
        args=[
            "set -euo pipefail\n"
            f"git clone --depth 1 --branch {dvc_rev} https://git.gridco.internal/forecasting/feature-repo.git /src\n"
            "cd /src\n"
            "dvc remote add -f --local storage s3://grid-dvc/feature-repo\n"
            f"dvc remote modify --local storage endpointurl {MINIO}\n"
            "dvc pull -r storage features/weather_normals.csv.dvc features/feeder_topology.parquet.dvc\n"
            f"mkdir -p {features.path} && cp features/weather_normals.csv features/feeder_topology.parquet {features.path}/\n"
        ],
    )


@dsl.container_component
def train_forecaster(
    nwp: dsl.Input[List[dsl.Dataset]],
    meters: dsl.Input[dsl.Dataset],
    features: dsl.Input[dsl.Dataset],
    forecast_date: str,
    model: dsl.Output[dsl.Model],
    forecast: dsl.Output[dsl.Dataset],
):
    return dsl.ContainerSpec(
        image="ghcr.io/gridco/gridcast:0.11.2",
        command=["python", "-m", "gridcast.train"],
        args=[
            "--nwp", nwp,
            "--meters", meters.path,
            "--features", features.path,
            "--target-date", forecast_date,
            "--model-out", model.path,
            "--forecast-out", forecast.path,
        ],
    )


@dsl.container_component
def backtest(model: dsl.Input[dsl.Model], mape: dsl.OutputPath(float)):
    return dsl.ContainerSpec(
        image="ghcr.io/gridco/gridcast:0.11.2",
        command=["sh", "-c"],
        args=[
            "set -eu\n"
            "duckdb /tmp/bt.duckdb <<'SQL'\n"
            "INSTALL httpfs; LOAD httpfs;\n"
            "CREATE SECRET ceph (TYPE S3, KEY_ID getenv('AWS_ACCESS_KEY_ID'), SECRET getenv('AWS_SECRET_ACCESS_KEY'), ENDPOINT 'ceph-rgw.grid.svc.cluster.local:7480', URL_STYLE 'path', USE_SSL false);\n"
            "CREATE TABLE actuals AS SELECT feeder_id, ts, load_mw FROM read_parquet(['s3://grid-meters/settlement/2024-05/*.parquet', 's3://grid-meters/settlement/2024-06/*.parquet']);\n"
            "SQL\n"
            f"python -m gridcast.backtest --db /tmp/bt.duckdb --model {model.path} --mape-out {mape}\n"
        ],
    )


@dsl.container_component
def publish_forecast(forecast: dsl.Input[dsl.Dataset], forecast_date: str):
    return dsl.ContainerSpec(
        image="minio/mc:RELEASE.2024-06-24T19-40-33Z",
        command=["sh", "-c"],
        args=[
            "set -eu\n"
            f"mc mirror --overwrite {forecast.path} gridops/grid-forecasts/day-ahead/{forecast_date}/\n"
            f"echo {forecast_date} | mc pipe gridops/grid-forecasts/day-ahead/LATEST\n"
        ],
    )


@dsl.container_component
def alert_oncall(mape: float):
    return dsl.ContainerSpec(
        image="curlimages/curl:8.8.0",
        command=["sh", "-c"],
        args=[f'curl -sf -X POST -d "{{\\"text\\": \\"day-ahead backtest MAPE {mape} above 4.5\\"}}" "$SLACK_WEBHOOK"'],
    )


@dsl.pipeline(name="feeder-day-ahead")
def feeder_day_ahead(
    regions: List[str] = ["north", "south", "coastal"],
    forecast_date: str = "2024-07-01",
    meter_month: str = "2024-06",
    dvc_rev: str = "v3.2",
):
    with dsl.ParallelFor(regions, parallelism=2) as region:
        nwp = pull_nwp(region=region, forecast_date=forecast_date)

    meters = load_meters(meter_month=meter_month)
    meters.set_env_variable("AWS_S3_ENDPOINT", "ceph-rgw.grid.svc.cluster.local:7480")
    feats = dvc_features(dvc_rev=dvc_rev)

    train = train_forecaster(
        nwp=dsl.Collected(nwp.outputs["nwp"]),
        meters=meters.outputs["meters"],
        features=feats.outputs["features"],
        forecast_date=forecast_date,
    )
    train.set_cpu_limit("16").set_memory_limit("64G")

    bt = backtest(model=train.outputs["model"])
    kubernetes.use_secret_as_env(
        bt, secret_name="ceph-grid-reader",
        secret_key_to_env={"access_key": "AWS_ACCESS_KEY_ID", "secret_key": "AWS_SECRET_ACCESS_KEY"},
    )

    with dsl.If(bt.outputs["mape"] < 4.5):
        pub = publish_forecast(forecast=train.outputs["forecast"], forecast_date=forecast_date)
        kubernetes.use_secret_as_env(pub, secret_name="minio-forecast-writer", secret_key_to_env={"mc_host": "MC_HOST_gridops"})
    with dsl.Else():
        alert = alert_oncall(mape=bt.outputs["mape"])
        kubernetes.use_secret_as_env(alert, secret_name="oncall-slack", secret_key_to_env={"webhook": "SLACK_WEBHOOK"})


if __name__ == "__main__":
    import pathlib
    compiler.Compiler().compile(feeder_day_ahead, str(pathlib.Path(__file__).with_suffix(".yaml")))
