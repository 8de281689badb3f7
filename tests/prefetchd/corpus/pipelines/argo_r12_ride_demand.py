# ruff: noqa
"""Hourly ride-hailing demand forecast per city (H3 res-7 cells).

Triggered daily by an Argo Events sensor on the trips partition landing.
Cities are discovered from the partition layout, featurised in parallel into
the shared features volume, then a TFT model and a seasonal-naive baseline are
fit side by side; the forecast is published only if it beats the baseline.
"""
from hera.workflows import (
    Container,
    Env,
    ExistingVolume,
    Parallel,
    Parameter,
    RetryStrategy,
    SecretEnv,
    Steps,
    WorkflowTemplate,
    models as m,
    script,
)

REGION = [Env(name="AWS_REGION", value="eu-central-1")]


def features_volume(read_only: bool) -> ExistingVolume:
    return ExistingVolume(
        name="features",
        claim_name="mobility-features",
        mount_path="/features",
        sub_path="hourly",
        read_only=read_only,
    )


@script(image="python:3.11-slim", env=REGION)
def list_cities(lake_bucket: str, dt: str):
    import json

    import boto3

    s3 = boto3.client("s3")
    resp = s3.list_objects_v2(Bucket=lake_bucket, Prefix=f"trips/dt={dt}/", Delimiter="/")
    cities = [p["Prefix"].rstrip("/").split("city=")[-1] for p in resp.get("CommonPrefixes", [])]
    print(json.dumps(sorted(cities)))


@script(
    image="ghcr.io/acme-mobility/feature-jobs:2.4.0",
    env=REGION,
    volumes=[features_volume(read_only=False)],
    retry_strategy=RetryStrategy(limit=2),
    resources=m.ResourceRequirements(requests={"cpu": "4", "memory": "16Gi"}),
)
def featurize_city(lake_bucket: str, dt: str, city: str):
    import os

    import h3
    import polars as pl

    trips = pl.scan_parquet(
        f"s3://{lake_bucket}/trips/dt={dt}/city={city}/*.parquet",
        storage_options={"aws_region": "eu-central-1"},
    )
    hourly = (
        trips.with_columns(
            pl.col("pickup_ts").dt.truncate("1h").alias("hour"),
            pl.struct(["pickup_lat", "pickup_lng"])
            .map_elements(lambda r: h3.latlng_to_cell(r["pickup_lat"], r["pickup_lng"], 7), return_dtype=pl.Utf8)
            .alias("h3"),
        )
        .group_by(["h3", "hour"])
        .agg(pl.len().alias("pickups"), pl.col("surge_multiplier").mean().alias("surge"))
        .collect(streaming=True)
    )
    os.makedirs(f"/features/dt={dt}", exist_ok=True)
    hourly.write_parquet(f"/features/dt={dt}/{city}.parquet")


train_demand = Container(
    name="train-demand",
    image="ghcr.io/acme-mobility/demand-tft:1.3.0",
    command=["python", "-m", "demand_tft.train"],
    args=[
        "--features", "/features/dt={{inputs.parameters.dt}}",
        "--holidays", "s3://acme-mobility-ref/calendars/holidays_eu_2025.parquet",
        "--horizon-hours", "48",
        "--output", "s3://acme-mobility-models/demand-tft/dt={{inputs.parameters.dt}}/",
        "--metrics-out", "/tmp/mape.txt",
    ],
    inputs=[Parameter(name="dt")],
    outputs=[Parameter(name="mape", value_from=m.ValueFrom(path="/tmp/mape.txt"))],
    env=REGION,
    volumes=[features_volume(read_only=True)],
    resources=m.ResourceRequirements(limits={"nvidia.com/gpu": "1"}, requests={"cpu": "8", "memory": "32Gi"}),
    tolerations=[m.Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")],
)


@script(image="ghcr.io/acme-mobility/feature-jobs:2.4.0", volumes=[features_volume(read_only=True)])
def fit_baseline(dt: str):
    import glob

    import polars as pl

    df = pl.concat([pl.read_parquet(p) for p in glob.glob(f"/features/dt={dt}/*.parquet")])
    df = df.sort(["h3", "hour"]).with_columns(pl.col("pickups").shift(168).over("h3").alias("naive"))
    df = df.drop_nulls("naive").filter(pl.col("pickups") > 0)
    mape = ((df["pickups"] - df["naive"]).abs() / df["pickups"]).mean()
    print(round(float(mape), 4))


publish_forecast = Container(
    name="publish-forecast",
    image="amazon/aws-cli:2.17.20",
    command=["aws"],
    args=[
        "s3", "cp",
        "s3://acme-mobility-models/demand-tft/dt={{inputs.parameters.dt}}/forecast.parquet",
        "s3://acme-mobility-serving/forecasts/hourly/dt={{inputs.parameters.dt}}/forecast.parquet",
        "--metadata", "source-workflow={{workflow.name}}",
    ],
    inputs=[Parameter(name="dt")],
    env=REGION,
)


@script(image="python:3.11-slim", env=[SecretEnv(name="SLACK_WEBHOOK", secret_name="mobility-slack", secret_key="webhook")])
def report_status():
    import json
    import os
    import urllib.request

    body = json.dumps({"text": "demand-forecast {{workflow.name}} -> {{workflow.status}}"}).encode()
    req = urllib.request.Request(os.environ["SLACK_WEBHOOK"], data=body, headers={"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=10)


with WorkflowTemplate(
    name="hourly-demand-forecast",
    namespace="mobility-ml",
    entrypoint="forecast",
    on_exit="report-status",
    service_account_name="argo-mobility",
    arguments=[
        Parameter(name="dt", value="2025-06-01"),
        Parameter(name="lake-bucket", value="acme-mobility-lake"),
    ],
) as wt:
    with Steps(name="forecast"):
        cities = list_cities(
            name="list-cities",
            arguments={"lake_bucket": "{{workflow.parameters.lake-bucket}}", "dt": "{{workflow.parameters.dt}}"},
        )
        featurize_city(
            name="featurize-city",
            with_param=cities.result,
            arguments={
                "lake_bucket": "{{workflow.parameters.lake-bucket}}",
                "dt": "{{workflow.parameters.dt}}",
                "city": "{{item}}",
            },
        )
        with Parallel():
            train_demand(name="train-demand", arguments={"dt": "{{workflow.parameters.dt}}"})
            fit_baseline(name="fit-baseline", arguments={"dt": "{{workflow.parameters.dt}}"})
        publish_forecast(
            name="publish-forecast",
            arguments={"dt": "{{workflow.parameters.dt}}"},
            when="{{steps.train-demand.outputs.parameters.mape}} < {{steps.fit-baseline.outputs.result}}",
        )
    report_status(name="report-status")


if __name__ == "__main__":
    with open(__file__.replace(".py", ".yaml"), "w") as fh:
        fh.write(wt.to_yaml())
