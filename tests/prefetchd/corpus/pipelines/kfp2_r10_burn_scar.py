# ruff: noqa
"""Post-fire burn-scar segmentation (Sentinel-2 L2A, dNBR-supervised U-Net).

Geo/EO team. Monthly run per fire season: stage tiles from our S2 COG mirror
onto the shared scratch volume, rasterise CAL FIRE perimeters as labels,
fine-tune the U-Net, then publish or flag for review. Slack on exit.
"""
from typing import List, NamedTuple

from kfp import compiler, dsl, kubernetes
from kfp.dsl import Metrics, Model, Output

GEO_IMAGE = "ghcr.io/firewatch-eo/geo-py:2025.05"
SCRATCH = "/scratch"


@dsl.container_component
def fetch_tile(tile: str, month: str):
    return dsl.ContainerSpec(
        image="peakcom/s5cmd:v2.2.2",
        command=["/s5cmd"],
        args=["--numworkers", "32", "cp",
              f"s3://firewatch-eo-raw/s2-l2a-cogs/{tile}/{month}/*/B*.tif",
              f"{SCRATCH}/s2/{tile}/{month}/"],
    )


@dsl.component(base_image=GEO_IMAGE)
def rasterize_labels(perimeters_uri: str, month: str, tiles: List[str]) -> int:
    import geopandas as gpd
    import rasterio
    from rasterio import features
    import glob, os

    perims = gpd.read_parquet(perimeters_uri)
    perims = perims[perims.ALARM_DATE.dt.strftime("%Y-%m") <= month]
    n = 0
    for tile in tiles:
        for ref in glob.glob(f"/scratch/s2/{tile}/{month}/*/B8A.tif"):
            scene = os.path.basename(os.path.dirname(ref))
            with rasterio.open(ref) as src:
                shapes = perims.to_crs(src.crs).geometry
                mask = features.rasterize(((g, 1) for g in shapes), out_shape=src.shape,
                                          transform=src.transform, fill=0, dtype="uint8")
                prof = src.profile | {"dtype": "uint8", "count": 1}
            os.makedirs(f"/scratch/labels/{tile}", exist_ok=True)
            with rasterio.open(f"/scratch/labels/{tile}/{scene}_burn.tif", "w", **prof) as dst:
                dst.write(mask, 1)
            n += 1
    return n


@dsl.component(base_image="ghcr.io/firewatch-eo/burnscar-train:3.2.1")
def train_unet(init_ckpt: str, month: str, epochs: int, model: Output[Model], metrics: Output[Metrics]
               ) -> NamedTuple("TrainOut", [("val_iou", float)]):
    import fsspec
    import torch
    from burnscar.data import TileDataset
    from burnscar.train import fit

    with fsspec.open(init_ckpt, "rb") as f:
        state = torch.load(f, map_location="cpu")
    ds = TileDataset(image_root="/scratch/s2", label_root="/scratch/labels", month=month,
                     bands=["B02", "B03", "B04", "B8A", "B11", "B12"])
    net, scores = fit(ds, init_state=state, epochs=epochs, arch="unet-effb2")
    torch.save(net.state_dict(), model.path)
    metrics.log_metric("val_iou", scores["iou"])
    return (scores["iou"],)


@dsl.component(base_image="python:3.11-slim", packages_to_install=["boto3==1.34.131"])
def publish_model(model: dsl.Input[Model], dest_uri: str, val_iou: float):
    import json
    import boto3

    bucket, _, key = dest_uri.removeprefix("s3://").partition("/")
    s3 = boto3.client("s3")
    s3.upload_file(model.path, bucket, f"{key}/model.pt")
    s3.put_object(Bucket=bucket, Key=f"{key}/metrics.json", Body=json.dumps({"val_iou": val_iou}))


@dsl.component(base_image="python:3.11-slim", packages_to_install=["boto3==1.34.131"])
def flag_for_review(month: str, val_iou: float):
    import json
    import boto3

    boto3.client("s3").put_object(
        Bucket="firewatch-ml-review", Key=f"burnscar/{month}/review.json",
        Body=json.dumps({"reason": "val_iou below threshold", "val_iou": val_iou}))


@dsl.component(base_image="python:3.11-slim", packages_to_install=["requests==2.32.3"])
def notify_slack(status: dsl.PipelineTaskFinalStatus, month: str):
    import os
    import requests
    msg = {"text": f"burn-scar {month}: {status.state} ({status.pipeline_job_resource_name})"}
    requests.post(os.environ["SLACK_WEBHOOK_URL"], json=msg, timeout=10).raise_for_status()


@dsl.pipeline(name="burn-scar-unet-monthly")
def burn_scar(
    tiles: List[str] = ["10SEH", "10SFH", "11SKA"],
    month: str = "2024-09",
    perimeters_uri: str = "s3://firewatch-eo-labels/calfire/fire_perimeters_2024.parquet",
    init_ckpt: str = "s3://firewatch-models/burnscar-unet/v3.1/model.pt",
    publish_uri: str = "s3://firewatch-models/burnscar-unet/v3.2-2024-09",
    scratch_pvc: str = "firewatch-eo-scratch",
    epochs: int = 25,
    min_iou: float = 0.72,
):
    exit_task = notify_slack(month=month)
    kubernetes.use_secret_as_env(exit_task, secret_name="slack-webhooks",
                                 secret_key_to_env={"eo-alerts": "SLACK_WEBHOOK_URL"})

    with dsl.ExitHandler(exit_task, name="burn-scar-run"):
        with dsl.ParallelFor(items=tiles, parallelism=2) as tile:
            fetch = fetch_tile(tile=tile, month=month)
            kubernetes.mount_pvc(fetch, pvc_name=scratch_pvc, mount_path=SCRATCH, sub_path="burnscar")
            kubernetes.use_secret_as_env(fetch, secret_name="firewatch-s3",
                                         secret_key_to_env={"AWS_ACCESS_KEY_ID": "AWS_ACCESS_KEY_ID",
                                                            "AWS_SECRET_ACCESS_KEY": "AWS_SECRET_ACCESS_KEY"})

        labels = rasterize_labels(perimeters_uri=perimeters_uri, month=month, tiles=tiles).after(fetch)
        kubernetes.mount_pvc(labels, pvc_name=scratch_pvc, mount_path=SCRATCH, sub_path="burnscar")

        train = train_unet(init_ckpt=init_ckpt, month=month, epochs=epochs).after(labels)
        train.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(2).set_memory_limit("64G")
        train.set_retry(num_retries=2, backoff_duration="120s")
        kubernetes.mount_pvc(train, pvc_name=scratch_pvc, mount_path=SCRATCH, sub_path="burnscar")
        kubernetes.add_node_selector(train, label_key="cloud.google.com/gke-accelerator", label_value="nvidia-l4")

        with dsl.If(train.outputs["val_iou"] >= min_iou, name="iou-ok"):
            publish_model(model=train.outputs["model"], dest_uri=publish_uri, val_iou=train.outputs["val_iou"])
        with dsl.Else(name="iou-low"):
            flag_for_review(month=month, val_iou=train.outputs["val_iou"])


if __name__ == "__main__":
    compiler.Compiler().compile(burn_scar, __file__.replace(".py", ".yaml"))
