# ruff: noqa
"""PM2.5 24h-ahead forecaster (OpenAQ archive + ERA5 covariates), KFP v1.

Urban air-quality team, still on the KFP 1.8 SDK. Pulls a year of OpenAQ
sensor records per city (public AWS Open Data bucket), stages ERA5 covariates
from GCS, builds features on a run-scoped volume, trains a TFT and promotes
it when MAE beats the production model.
"""
import kfp
from kfp import dsl
from kfp.components import create_component_from_func
from kubernetes.client.models import V1EnvVar

CITIES = [
    {"city": "delhi", "location_id": "8118"},
    {"city": "lagos", "location_id": "1236045"},
    {"city": "jakarta", "location_id": "2161322"},
]


def build_features(raw_dir: str, era5_dir: str, stations_uri: str, horizon: int, out_dir: str) -> str:
    import glob
    import os
    import pandas as pd
    import xarray as xr

    stations = pd.read_csv(stations_uri, storage_options={"anon": False})
    frames = []
    for city_dir in sorted(glob.glob(os.path.join(raw_dir, "*"))):
        files = glob.glob(os.path.join(city_dir, "**", "*.csv.gz"), recursive=True)
        df = pd.concat(pd.read_csv(f, parse_dates=["datetime"]) for f in files)
        df = df[df.parameter == "pm25"].set_index("datetime").resample("1h").value.mean().to_frame("pm25")
        df["city"] = os.path.basename(city_dir)
        frames.append(df)
    aq = pd.concat(frames).reset_index()
    met = xr.open_zarr(os.path.join(era5_dir, "pm25_covariates.zarr")).to_dataframe().reset_index()
    feats = aq.merge(met, on=["city", "datetime"], how="left").merge(stations, on="city", how="left")
    feats[f"target_t+{horizon}"] = feats.groupby("city").pm25.shift(-horizon)
    os.makedirs(out_dir, exist_ok=True)
    out = os.path.join(out_dir, "features.parquet")
    feats.dropna().to_parquet(out, index=False)
    return out


build_features_op = create_component_from_func(
    build_features,
    base_image="python:3.11-slim",
    packages_to_install=["pandas==2.2.2", "pyarrow==16.1.0", "s3fs==2024.6.1", "xarray==2024.6.0", "zarr==2.18.2"],
)


@dsl.pipeline(name="pm25-tft-forecast", description="OpenAQ PM2.5 forecaster")
def pm25_pipeline(
    year: str = "2024",
    era5_uri: str = "gs://aq-forecast-weather/era5/2024",
    horizon: int = 24,
    model_bucket: str = "aq-forecast-models",
    mae_gate: float = 11.5,
):
    vop = dsl.VolumeOp(
        name="create-aq-volume",
        resource_name="aq-work",
        size="30Gi",
        modes=dsl.VOLUME_MODE_RWO,
        storage_class="standard-rwo",
    )

    report = dsl.ContainerOp(
        name="report-status",
        image="curlimages/curl:8.8.0",
        command=["sh", "-c"],
        arguments=['echo "pm25_pipeline_status{run=\\"$RUN\\"} 1" | '
                   'curl -s --data-binary @- http://pushgateway.monitoring:9091/metrics/job/pm25-tft'],
    ).add_env_variable(V1EnvVar(name="RUN", value=dsl.RUN_ID_PLACEHOLDER))

    with dsl.ExitHandler(report):
        with dsl.ParallelFor(CITIES, parallelism=3) as item:
            pull = dsl.ContainerOp(
                name="pull-openaq",
                image="amazon/aws-cli:2.17.0",
                command=["aws", "s3", "cp", "--recursive", "--no-sign-request", "--only-show-errors"],
                arguments=[
                    f"s3://openaq-data-archive/records/csv.gz/locationid={item.location_id}/year={year}/",
                    f"/mnt/aq/raw/{item.city}/",
                ],
                pvolumes={"/mnt/aq": vop.volume},
            )
            pull.set_retry(3)

        era5 = dsl.ContainerOp(
            name="stage-era5",
            image="gcr.io/google.com/cloudsdktool/google-cloud-cli:480.0.0-slim",
            command=["gsutil", "-m", "rsync", "-r"],
            arguments=[f"{era5_uri}/pm25_covariates.zarr", "/mnt/aq/era5/pm25_covariates.zarr"],
            pvolumes={"/mnt/aq": vop.volume},
        )

        feats = build_features_op(
            raw_dir="/mnt/aq/raw",
            era5_dir="/mnt/aq/era5",
            stations_uri="s3://aq-forecast-ref/stations/openaq_station_meta.csv",
            horizon=horizon,
            out_dir="/mnt/aq/features",
        ).add_pvolumes({"/mnt/aq": vop.volume}).after(pull, era5)

        train = dsl.ContainerOp(
            name="train-tft",
            image="ghcr.io/urban-air/pm25-tft:1.7.0",
            command=["python", "-m", "pm25.train"],
            arguments=[
                "--features", feats.output,
                "--horizon", horizon,
                "--max-epochs", "60",
                "--model-dir", f"s3://{model_bucket}/pm25/tft/{year}/h{horizon}/",
                "--mae-out", "/tmp/mae.txt",
            ],
            file_outputs={"mae": "/tmp/mae.txt"},
            pvolumes={"/mnt/aq": vop.volume},
        ).set_gpu_limit(1).set_memory_limit("32G")
        train.set_retry(2, policy="OnFailure")

        with dsl.Condition(train.outputs["mae"] < mae_gate, name="mae-gate"):
            dsl.ContainerOp(
                name="promote",
                image="amazon/aws-cli:2.17.0",
                command=["aws", "s3", "sync", "--delete"],
                arguments=[f"s3://{model_bucket}/pm25/tft/{year}/h{horizon}/",
                           f"s3://{model_bucket}/pm25/tft/prod/h{horizon}/"],
            )


if __name__ == "__main__":
    kfp.compiler.Compiler().compile(pm25_pipeline, __file__.replace(".py", ".yaml"))
