# ruff: noqa
"""Bike-share station demand forecasting across cities (KFP v1)."""
import kfp
from kfp import dsl, onprem
from kfp.components import create_component_from_func
from kubernetes.client import V1EnvVar, V1EnvVarSource, V1ConfigMapKeySelector

FEAT_PVC = "bikeshare-features"


def ingest_trips(city: str, month: str, trips_bucket: str) -> int:
    import os
    import pandas as pd
    trips = pd.read_csv(f"s3://{trips_bucket}/{city}/{month}/tripdata.csv.gz",
                        parse_dates=["started_at", "ended_at"])
    stations = pd.read_parquet(f"s3://bikeshare-ref/stations/{city}/stations_2025.parquet")
    hourly = (trips.assign(hour=trips.started_at.dt.floor("h"))
                   .groupby(["start_station_id", "hour"]).size().rename("departures").reset_index())
    hourly = hourly.merge(stations, left_on="start_station_id", right_on="station_id")
    out = f"/mnt/features/{city}"
    os.makedirs(out, exist_ok=True)
    hourly.to_parquet(f"{out}/{month}.parquet")
    return len(hourly)


ingest_op = create_component_from_func(ingest_trips, base_image="ghcr.io/velo-ml/py:2025.06",
                                       packages_to_install=["s3fs==2024.6.1"])


@dsl.pipeline(name="bikeshare-demand", description="hourly departures per station")
def bikeshare(cities: list = ["nyc-citibike", "chicago-divvy", "dc-cabi"],
              month: str = "2025-06",
              trips_bucket: str = "bikeshare-trips",
              max_mape: float = 0.22):
    weather = dsl.ContainerOp(
        name="fetch-weather",
        image="amazon/aws-cli:2.17.0",
        command=["bash", "-c"],
        arguments=['''set -euo pipefail
STATIONS=(USW00094728 USW00094846 USW00013743)
mkdir -p /mnt/weather
for st in "${STATIONS[@]}"; do
  aws s3 cp --no-sign-request "s3://noaa-ghcn-pds/csv/by_station/${st}.csv" "/mnt/weather/${st}.csv"
done
ls -l /mnt/weather
'''],
    ).apply(onprem.mount_pvc(FEAT_PVC, "features", "/mnt"))

    with dsl.ParallelFor(cities) as city:
        ing = ingest_op(city=city, month=month, trips_bucket=trips_bucket)
        ing.apply(onprem.mount_pvc(FEAT_PVC, "features", "/mnt"))
        ing.add_env_variable(V1EnvVar(name="AWS_ENDPOINT_URL", value_from=V1EnvVarSource(
            config_map_key_ref=V1ConfigMapKeySelector(name="velo-ceph", key="endpoint"))))

    train = dsl.ContainerOp(
        name="train-demand",
        image="ghcr.io/velo-ml/lgbm-train:4.3.0",
        command=["bash", "-c"],
        arguments=['find /mnt/features -name "$0.parquet" | sort > /tmp/files.txt && '
                   'python -m velo.train --file-list /tmp/files.txt --weather-dir /mnt/weather '
                   '--holidays s3://bikeshare-ref/calendar/us_federal_holidays.csv '
                   '--model-out "s3://bikeshare-models/$0/lgbm.txt" --metrics-out /tmp/mape.txt',
                   month],
        file_outputs={"mape": "/tmp/mape.txt"},
    ).apply(onprem.mount_pvc(FEAT_PVC, "features", "/mnt")).after(weather, ing)

    with dsl.Condition(train.outputs["mape"] < max_mape, name="good-enough"):
        dsl.ContainerOp(
            name="promote-model",
            image="amazon/aws-cli:2.17.0",
            command=["sh", "-c"],
            arguments=['aws s3 cp "s3://bikeshare-models/$0/lgbm.txt" s3://bikeshare-serving/current/lgbm.txt', month],
        )


if __name__ == "__main__":
    kfp.compiler.Compiler().compile(bikeshare, __file__.replace(".py", ".yaml"))
