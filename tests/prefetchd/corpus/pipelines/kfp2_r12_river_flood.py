# ruff: noqa
"""CAMELS-US streamflow LSTM retraining (NeuralHydrology-style).

Daily forcings are mirrored into a long-lived cache PVC with rclone, joined
with USGS NWIS discharge, and an entity-aware LSTM is warm-started from the
currently deployed checkpoint. A model is promoted only if the median NSE on
the hold-out basins clears the gate.
"""
from typing import NamedTuple

from kfp import compiler, dsl, kubernetes
from kfp.dsl import Dataset, Input, Model, Output

HYDRO_IMAGE = "ghcr.io/acme-hydro/neuralhydrology:1.11.0-cu121"


@dsl.container_component
def mirror_forcings(basin_set: str, product: str):
    return dsl.ContainerSpec(
        image="rclone/rclone:1.67.0",
        command=["rclone"],
        args=[
            "copy",
            dsl.ConcatPlaceholder(["hydro:acme-hydro-forcings/", product, "/", basin_set]),
            dsl.ConcatPlaceholder(["/cache/forcings/", product, "/", basin_set]),
            "--transfers", "32",
            "--checkers", "64",
            "--include", "*.nc",
            "--fast-list",
            "--s3-no-check-bucket",
        ],
    )


@dsl.component(
    base_image=HYDRO_IMAGE,
    packages_to_install=["xarray==2024.6.0", "netCDF4==1.7.1", "pandas==2.2.2", "pyarrow==16.1.0", "s3fs==2024.6.1", "zarr==2.18.2"],
)
def build_training_set(basin_set: str, product: str, start: str, end: str, dataset: Output[Dataset]):
    import glob
    import os

    import pandas as pd
    import xarray as xr

    forcing_dir = f"/cache/forcings/{product}/{basin_set}"
    ds = xr.open_mfdataset(sorted(glob.glob(f"{forcing_dir}/*.nc")), combine="by_coords", parallel=True)
    ds = ds.sel(date=slice(start, end))

    # observed discharge, location injected by the platform team's env var
    q = pd.read_parquet(os.environ["STREAMFLOW_URI"], columns=["gauge_id", "date", "qobs_mm_d"])
    q = q[(q.date >= start) & (q.date <= end)]
    qx = q.set_index(["date", "gauge_id"]).to_xarray().rename(gauge_id="basin")
    merged = xr.merge([ds, qx], join="inner")
    merged.to_zarr(dataset.path, mode="w", consolidated=True)
    dataset.metadata["basins"] = int(merged.sizes["basin"])


@dsl.component(base_image=HYDRO_IMAGE, packages_to_install=["zarr==2.18.2", "mlflow==2.15.1"])
def train_lstm(
    dataset: Input[Dataset],
    warm_start: Input[Model],
    hidden_size: int,
    epochs: int,
    model: Output[Model],
):
    import os

    import mlflow
    import torch
    import xarray as xr
    from neuralhydrology.modelzoo.ealstm import EALSTM  # noqa: F401  (registered model)
    from neuralhydrology.training.train import start_training  # noqa: F401

    ds = xr.open_zarr(dataset.path)
    state = torch.load(warm_start.path, map_location="cuda")
    mlflow.set_experiment("camels-us-ealstm")
    with mlflow.start_run():
        mlflow.log_params({"hidden_size": hidden_size, "epochs": epochs, "basins": ds.sizes["basin"]})
        net = torch.nn.LSTM(input_size=len(ds.data_vars) - 1, hidden_size=hidden_size, batch_first=True).cuda()
        net.load_state_dict(state, strict=False)
        # ... NeuralHydrology training loop elided ...
        os.makedirs(os.path.dirname(model.path), exist_ok=True)
        torch.save(net.state_dict(), model.path)


@dsl.component(base_image=HYDRO_IMAGE, packages_to_install=["zarr==2.18.2", "hydroeval==0.1.0"])
def evaluate_nse(dataset: Input[Dataset], model: Input[Model]) -> NamedTuple("Outputs", [("median_nse", float)]):
    from collections import namedtuple

    import numpy as np
    import torch
    import xarray as xr

    ds = xr.open_zarr(dataset.path)
    _ = torch.load(model.path, map_location="cpu")
    nse = []
    for basin in ds.basin.values[-50:]:  # hold-out basins
        obs = ds.qobs_mm_d.sel(basin=basin).values
        sim = obs  # placeholder for model rollout
        nse.append(1 - np.nansum((sim - obs) ** 2) / np.nansum((obs - np.nanmean(obs)) ** 2))
    return namedtuple("Outputs", ["median_nse"])(float(np.median(nse)))


@dsl.component(base_image="python:3.11-slim", packages_to_install=["boto3==1.34.144"])
def promote_model(model: Input[Model], target_prefix: str, median_nse: float):
    import json
    from urllib.parse import urlparse

    import boto3

    u = urlparse(target_prefix)
    key = u.path.strip("/")
    s3 = boto3.client("s3")
    s3.upload_file(model.path, u.netloc, f"{key}/model.pt")
    s3.put_object(
        Bucket=u.netloc,
        Key=f"{key}/model_card.json",
        Body=json.dumps({"median_nse": median_nse, "source_artifact": model.uri}).encode(),
    )


@dsl.component(base_image="python:3.11-slim", packages_to_install=["requests==2.32.3"])
def notify_slack(status: dsl.PipelineTaskFinalStatus):
    import os

    import requests

    requests.post(
        os.environ["SLACK_WEBHOOK_URL"],
        json={"text": f"streamflow retrain {status.pipeline_job_resource_name}: {status.state} {status.error_message or ''}"},
        timeout=10,
    )


@dsl.pipeline(name="camels-streamflow-retrain", description="Weekly EA-LSTM streamflow retrain with NSE gate")
def camels_streamflow_retrain(
    basin_set: str = "camels-us-531",
    product: str = "daymet-v4",
    start: str = "1980-10-01",
    end: str = "2024-09-30",
    baseline_model_uri: str = "s3://acme-hydro-models/ealstm/camels-us/prod/model.pt",
    cache_pvc: str = "hydro-forcings-cache",
    min_nse: float = 0.72,
    hidden_size: int = 256,
    epochs: int = 30,
):
    notify = notify_slack()
    kubernetes.use_secret_as_env(notify, secret_name="slack-mlops", secret_key_to_env={"webhook": "SLACK_WEBHOOK_URL"})

    with dsl.ExitHandler(notify, name="retrain"):
        mirror = mirror_forcings(basin_set=basin_set, product=product)
        mirror.set_env_variable("RCLONE_CONFIG_HYDRO_TYPE", "s3")
        mirror.set_env_variable("RCLONE_CONFIG_HYDRO_PROVIDER", "AWS")
        mirror.set_env_variable("RCLONE_CONFIG_HYDRO_ENV_AUTH", "true")
        mirror.set_env_variable("RCLONE_CONFIG_HYDRO_REGION", "us-west-2")
        mirror.set_retry(num_retries=2)
        kubernetes.mount_pvc(mirror, pvc_name=cache_pvc, mount_path="/cache")

        build = build_training_set(basin_set=basin_set, product=product, start=start, end=end)
        build.after(mirror)
        build.set_env_variable("STREAMFLOW_URI", "s3://acme-hydro/usgs/nwis/daily/streamflow_1980_2024.parquet")
        build.set_cpu_limit("16").set_memory_limit("96Gi")
        kubernetes.mount_pvc(build, pvc_name=cache_pvc, mount_path="/cache")

        baseline = dsl.importer(
            artifact_uri=baseline_model_uri,
            artifact_class=Model,
            reimport=False,
            metadata={"stage": "prod"},
        )

        train = train_lstm(
            dataset=build.outputs["dataset"],
            warm_start=baseline.output,
            hidden_size=hidden_size,
            epochs=epochs,
        )
        train.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(1)
        kubernetes.use_secret_as_env(train, secret_name="mlflow-tracking", secret_key_to_env={"uri": "MLFLOW_TRACKING_URI"})

        ev = evaluate_nse(dataset=build.outputs["dataset"], model=train.outputs["model"])

        with dsl.If(ev.outputs["median_nse"] >= min_nse, name="nse-gate"):
            promote_model(
                model=train.outputs["model"],
                target_prefix="s3://acme-hydro-models/ealstm/camels-us/prod",
                median_nse=ev.outputs["median_nse"],
            )


if __name__ == "__main__":
    compiler.Compiler().compile(camels_streamflow_retrain, package_path=__file__.replace(".py", ".yaml"))
