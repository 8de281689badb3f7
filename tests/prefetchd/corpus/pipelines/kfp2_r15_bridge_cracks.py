# ruff: noqa
"""Drone bridge-inspection pipeline: tile orthomosaics per flight, segment cracks,
score severity against the asset register, and raise work orders for bad spans."""
from typing import List

from kfp import compiler, dsl, kubernetes
from kfp.dsl import Dataset, Input, Output


@dsl.component(base_image="python:3.11-slim", packages_to_install=["boto3==1.34.144"])
def list_flights(raw_bucket: str, campaign: str) -> List[str]:
    import boto3

    s3 = boto3.client("s3")
    pages = s3.get_paginator("list_objects_v2").paginate(
        Bucket=raw_bucket, Prefix=f"flights/{campaign}/", Delimiter="/"
    )
    flights = []
    for page in pages:
        for cp in page.get("CommonPrefixes", []):
            flights.append(cp["Prefix"].rstrip("/").split("/")[-1])
    print(f"{len(flights)} flights in {campaign}")
    return flights


@dsl.component(
    base_image="ghcr.io/osgeo/gdal:ubuntu-small-3.9.1",
    packages_to_install=["rasterio==1.3.10", "boto3==1.34.144", "numpy<2"],
)
def tile_orthomosaic(raw_bucket: str, campaign: str, flight_id: str, tile_px: int, tiles: Output[Dataset]):
    import os

    import boto3
    import numpy as np
    import rasterio
    from rasterio.windows import Window

    local = f"/tmp/{flight_id}.tif"
    boto3.client("s3").download_file(raw_bucket, f"flights/{campaign}/{flight_id}/orthomosaic.tif", local)
    os.makedirs(tiles.path, exist_ok=True)
    with rasterio.open(local) as src:
        for r in range(0, src.height, tile_px):
            for c in range(0, src.width, tile_px):
                arr = src.read(window=Window(c, r, tile_px, tile_px))
                if (arr > 0).mean() < 0.2:
                    continue
                np.save(os.path.join(tiles.path, f"{flight_id}_{r}_{c}.npy"), arr)


@dsl.component(
    base_image="ghcr.io/bridgeinspect/crack-seg:3.2.0-cu121",
)
def segment_cracks(tiles: Input[List[Dataset]], masks: Output[Dataset]):
    import glob
    import os

    import numpy as np
    import torch
    from transformers import SegformerForSemanticSegmentation

    model_dir = "/models/segformer"
    os.system(f"aws s3 sync {os.environ['MODEL_URI']} {model_dir} --only-show-errors")
    model = SegformerForSemanticSegmentation.from_pretrained(model_dir).cuda().eval()
    os.makedirs(masks.path, exist_ok=True)
    for ds in tiles:
        for f in glob.glob(os.path.join(ds.path, "*.npy")):
            x = torch.from_numpy(np.load(f)[:3]).float().unsqueeze(0).cuda() / 255.0
            with torch.no_grad():
                logits = model(pixel_values=x).logits
            np.save(os.path.join(masks.path, os.path.basename(f)), logits.argmax(1).cpu().numpy()[0].astype("uint8"))
    # keep a copy on the shared inspection volume for the GIS team
    os.system(f"cp -r {masks.path} /inspection/masks/")


@dsl.component(base_image="python:3.11-slim", packages_to_install=["geopandas==1.0.1", "s3fs==2024.6.1", "numpy<2"])
def compute_severity(masks: Input[Dataset], ref_bucket: str, report: Output[Dataset]) -> float:
    import glob
    import os

    import geopandas as gpd
    import numpy as np

    spans = gpd.read_file(f"s3://{ref_bucket}/asset-register/bridges.geojson")
    rows = []
    for f in glob.glob(os.path.join(masks.path, "*.npy")):
        m = np.load(f)
        rows.append({"tile": os.path.basename(f), "crack_ratio": float((m > 0).mean())})
    worst = max((r["crack_ratio"] for r in rows), default=0.0)
    severity = min(5.0, worst * 100.0)
    spans.assign(max_severity=severity).to_file(report.path, driver="GeoJSON")
    return severity


@dsl.component(base_image="python:3.11-slim", packages_to_install=["geopandas==1.0.1", "s3fs==2024.6.1"])
def file_work_orders(report: Input[Dataset], reports_bucket: str, campaign: str):
    import geopandas as gpd

    gdf = gpd.read_file(report.path)
    gdf[["bridge_id", "span", "max_severity"]].to_csv(
        f"s3://{reports_bucket}/{campaign}/work_orders.csv", index=False
    )


@dsl.component(base_image="python:3.11-slim", packages_to_install=["requests==2.32.3"])
def notify_inspectors(campaign: str, status: dsl.PipelineTaskFinalStatus):
    import os

    import requests

    requests.post(
        os.environ["SLACK_WEBHOOK"],
        json={"text": f"Bridge inspection {campaign}: {status.state} ({status.pipeline_job_resource_name})"},
        timeout=10,
    )


@dsl.pipeline(name="bridge-crack-inspection")
def bridge_cracks(
    raw_bucket: str = "bridgeinspect-drone-raw",
    campaign: str = "2025-06-i95-corridor",
    ref_bucket: str = "bridgeinspect-ref",
    reports_bucket: str = "bridgeinspect-reports",
    severity_threshold: float = 3.0,
):
    notify = notify_inspectors(campaign=campaign)
    kubernetes.use_secret_as_env(notify, secret_name="inspection-slack", secret_key_to_env={"webhook": "SLACK_WEBHOOK"})

    with dsl.ExitHandler(notify, name="inspection"):
        flights = list_flights(raw_bucket=raw_bucket, campaign=campaign)
        with dsl.ParallelFor(flights.output, parallelism=4) as flight:
            tile = tile_orthomosaic(raw_bucket=raw_bucket, campaign=campaign, flight_id=flight, tile_px=1024)
            tile.set_memory_limit("16G")

        seg = segment_cracks(tiles=dsl.Collected(tile.outputs["tiles"]))
        seg.set_env_variable("MODEL_URI", "s3://bridgeinspect-models/crack-segformer/v3.2/")
        seg.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(1)
        kubernetes.mount_pvc(seg, pvc_name="inspection-gis-share", mount_path="/inspection")

        sev = compute_severity(masks=seg.outputs["masks"], ref_bucket=ref_bucket)
        with dsl.If(sev.outputs["Output"] >= severity_threshold, name="severe-damage"):
            file_work_orders(report=sev.outputs["report"], reports_bucket=reports_bucket, campaign=campaign)


if __name__ == "__main__":
    compiler.Compiler().compile(bridge_cracks, __file__.replace(".py", ".yaml"))
