# ruff: noqa
"""Soft sensor for tablet dissolution (release testing support).

Press historian signals (compression force, fill depth, turret speed) are staged
onto a scratch PVC, joined with LIMS dissolution results and the NIR reference
library, and a gradient-boosted soft sensor is trained per site/campaign.
Models are only registered when every tablet strength passes its holdout check.
"""
from typing import List

from kfp import compiler, dsl, kubernetes

PRESS_MOUNT = "/mnt/press"
ML_IMAGE = "ghcr.io/pharmamfg/pat-ml:2025.05"

STRENGTH_HOLDOUTS = [
    {"strength": "10mg", "holdout": "s3://pharmamfg-lims-exports/holdout/10mg_2025q1.parquet"},
    {"strength": "20mg", "holdout": "s3://pharmamfg-lims-exports/holdout/20mg_2025q1.parquet"},
    {"strength": "40mg", "holdout": "s3://pharmamfg-lims-exports/holdout/40mg_2025q1.parquet"},
]


@dsl.container_component
def stage_press_signals(historian_root: str, site: str, campaign: str):
    return dsl.ContainerSpec(
        image="amazon/aws-cli:2.17.0",
        command=["sh", "-c"],
        args=[
            'aws s3 sync "$0/site=$1/campaign=$2/" /mnt/press/signals/ --only-show-errors '
            '--exclude "*" --include "*.parquet"',
            historian_root,
            site,
            campaign,
        ],
    )


@dsl.component(base_image=ML_IMAGE)
def build_training_set(
    lims_bucket: str,
    site: str,
    campaign: str,
    nir_reference: dsl.Input[dsl.Dataset],
    training_set: dsl.Output[dsl.Dataset],
):
    import fsspec
    import pandas as pd
    import polars as pl
    import yaml

    with fsspec.open("s3://pharmamfg-ml-config/dissolution/features.yaml", "r") as f:
        cfg = yaml.safe_load(f)

    lims = pd.read_csv(f"s3://{lims_bucket}/dissolution/{site}/{campaign}.csv")
    lims = lims[lims["test"] == "dissolution_q30"]

    signals = (
        pl.scan_parquet("/mnt/press/signals/*.parquet")
        .group_by("batch_id")
        .agg([pl.col(c).mean().alias(f"{c}_mean") for c in cfg["press_signals"]])
        .collect()
        .to_pandas()
    )
    nir = pd.read_parquet(nir_reference.path)
    df = lims.merge(signals, on="batch_id").merge(nir, on="api_lot", how="left")
    df.to_parquet(training_set.path)


@dsl.container_component
def train_soft_sensor(training_set: dsl.Input[dsl.Dataset], model: dsl.Output[dsl.Model]):
    return dsl.ContainerSpec(
        image=ML_IMAGE,
        command=["python", "-m", "dissolution.train"],
        args=[
            "--train-data", training_set.path,
            "--config", "s3://pharmamfg-ml-config/dissolution/train.yaml",
            "--model-dir", model.path,
        ],
    )


@dsl.component(base_image=ML_IMAGE)
def evaluate_by_strength(strength: str, holdout_uri: str, model: dsl.Input[dsl.Model]) -> float:
    import joblib
    import numpy as np
    import pandas as pd

    reg = joblib.load(model.path + "/model.joblib")
    hold = pd.read_parquet(holdout_uri)
    hold = hold[hold["strength"] == strength]
    pred = reg.predict(hold.drop(columns=["q30", "batch_id", "strength"]))
    rmse = float(np.sqrt(np.mean((pred - hold["q30"]) ** 2)))
    print(f"{strength}: rmse={rmse:.2f}")
    return rmse


@dsl.component(base_image="python:3.11-slim")
def release_gate(rmses: List[float], max_rmse: float) -> str:
    worst = max(rmses)
    print("worst strength rmse", worst)
    return "pass" if worst <= max_rmse else "fail"


@dsl.component(base_image=ML_IMAGE)
def register_model(model: dsl.Input[dsl.Model], model_registry: str, site: str, campaign: str):
    import boto3

    bucket, _, prefix = model_registry.replace("s3://", "").partition("/")
    boto3.client("s3").upload_file(
        model.path + "/model.joblib", bucket, f"{prefix}/{site}/{campaign}/model.joblib"
    )


@dsl.pipeline(name="tablet-dissolution-soft-sensor")
def dissolution_pipeline(
    site: str = "cork-p2",
    campaign: str = "2025w22",
    historian_root: str = "s3://pharmamfg-historian/tablet-press",
    lims_bucket: str = "pharmamfg-lims-exports",
    model_registry: str = "s3://pharmamfg-ml-registry/dissolution",
    max_rmse: float = 2.5,
):
    pvc = kubernetes.CreatePVC(
        pvc_name_suffix="-press-signals",
        access_modes=["ReadWriteOnce"],
        size="100Gi",
        storage_class_name="gp3",
    )

    stage = stage_press_signals(historian_root=historian_root, site=site, campaign=campaign)
    kubernetes.mount_pvc(stage, pvc_name=pvc.outputs["name"], mount_path=PRESS_MOUNT)

    nir = dsl.importer(
        artifact_uri="s3://pharmamfg-ref/nir-spectra/reference-library-v4.parquet",
        artifact_class=dsl.Dataset,
        reimport=False,
    )

    build = build_training_set(
        lims_bucket=lims_bucket, site=site, campaign=campaign, nir_reference=nir.output
    ).after(stage)
    kubernetes.mount_pvc(build, pvc_name=pvc.outputs["name"], mount_path=PRESS_MOUNT)

    train = train_soft_sensor(training_set=build.outputs["training_set"])
    train.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(1)

    with dsl.ParallelFor(items=STRENGTH_HOLDOUTS, parallelism=2) as item:
        ev = evaluate_by_strength(
            strength=item.strength, holdout_uri=item.holdout, model=train.outputs["model"]
        )

    gate = release_gate(rmses=dsl.Collected(ev.output), max_rmse=max_rmse)
    with dsl.If(gate.output == "pass"):
        register_model(
            model=train.outputs["model"], model_registry=model_registry, site=site, campaign=campaign
        )

    kubernetes.DeletePVC(pvc_name=pvc.outputs["name"]).after(build)


if __name__ == "__main__":
    compiler.Compiler().compile(dissolution_pipeline, __file__.replace(".py", ".yaml"))
