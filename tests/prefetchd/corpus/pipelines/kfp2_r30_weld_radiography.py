# ruff: noqa
"""Weld radiography (RT) defect detection: digital X-ray films of pipeline girth welds per fabrication site
-> tiled crops on a scratch PVC -> DETR-style detector fine-tune -> evaluation -> registered when recall clears the bar."""
from typing import List, NamedTuple

from kfp import compiler, dsl, kubernetes
from kfp.dsl import HTML, Metrics, Output

NDT_IMAGE = "ghcr.io/ndt-vision/weldnet:2.3.1-cu121"


@dsl.container_component
def stage_radiographs(radiographs_uri: str):
    return dsl.ContainerSpec(
        image="amazon/aws-cli:2.17.0",
        command=["sh", "-c"],
        args=['set -e; aws s3 sync "$0" /cache/rt/ --only-show-errors; du -sh /cache/rt', radiographs_uri],
    )


@dsl.component(base_image=NDT_IMAGE)
def prepare_site(site: str, labels_uri: str, run_tag: str):
    import json
    import os

    import pandas as pd
    import s3fs
    from weldnet.tiling import tile_film

    labels = pd.read_csv(labels_uri)
    labels = labels[labels["site"] == site]
    os.makedirs(f"/cache/tiles/{site}", exist_ok=True)
    records = []
    for film_id, boxes in labels.groupby("film_id"):
        records += tile_film(f"/cache/rt/{site}/{film_id}.dcm", boxes, out_dir=f"/cache/tiles/{site}", size=1024)
    fs = s3fs.S3FileSystem()
    with fs.open(f"s3://ndt-lab/manifests/{run_tag}/{site}.jsonl", "w") as f:
        for rec in records:
            f.write(json.dumps(rec) + "\n")


@dsl.container_component
def train_detector(run_tag: str, epochs: int):
    return dsl.ContainerSpec(
        image=NDT_IMAGE,
        command=["python", "-m", "weldnet.train"],
        args=["--tiles", "/cache/tiles",
              "--init-weights", "s3://ndt-models/detr/detr-r50-coco.pth",
              "--epochs", epochs,
              "--output-dir", f"s3://ndt-models/weldnet/{run_tag}/"],
    )


@dsl.component(base_image=NDT_IMAGE)
def evaluate_detector(run_tag: str, metrics: Output[Metrics], report: Output[HTML]) -> NamedTuple("Eval", [("recall", float)]):
    from collections import namedtuple

    import boto3
    import pandas as pd
    from weldnet.evaluate import evaluate, render_report

    boto3.client("s3").download_file("ndt-models", f"weldnet/{run_tag}/model_final.pth", "/tmp/model_final.pth")
    holdout = pd.read_parquet("s3://ndt-lab/holdout/rt_holdout_2025h1.parquet")
    res = evaluate("/tmp/model_final.pth", holdout, iou=0.5)
    metrics.log_metric("recall", res["recall"])
    metrics.log_metric("precision", res["precision"])
    with open(report.path, "w") as f:
        f.write(render_report(res))
    return namedtuple("Eval", ["recall"])(float(res["recall"]))


@dsl.component(base_image="python:3.11-slim", packages_to_install=["s3fs==2024.6.1"])
def register_model(run_tag: str):
    import s3fs

    fs = s3fs.S3FileSystem()
    fs.copy(f"s3://ndt-models/weldnet/{run_tag}/model_final.pth", "s3://ndt-registry/weldnet/production/model.pth")


@dsl.pipeline(name="weld-radiography-defects")
def weld_rt(radiographs_uri: str = "s3://ndt-lab/rt-images/2025-q3/",
            labels_uri: str = "s3://ndt-lab/labels/rt_defects_v7.csv",
            sites: List[str] = ["rotterdam", "ulsan", "houston"],
            run_tag: str = "weldnet-2025-09",
            epochs: int = 60,
            min_recall: float = 0.92):
    pvc = kubernetes.CreatePVC(pvc_name_suffix="-rt-cache", access_modes=["ReadWriteOnce"], size="500Gi",
                               storage_class_name="gp3")

    stage = stage_radiographs(radiographs_uri=radiographs_uri)
    kubernetes.mount_pvc(stage, pvc_name=pvc.outputs["name"], mount_path="/cache")

    with dsl.ParallelFor(sites, parallelism=2) as site:
        prep = prepare_site(site=site, labels_uri=labels_uri, run_tag=run_tag).after(stage)
        prep.set_cpu_limit("8").set_memory_limit("32G")
        kubernetes.mount_pvc(prep, pvc_name=pvc.outputs["name"], mount_path="/cache")

    train = train_detector(run_tag=run_tag, epochs=epochs).after(prep)
    train.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(4)
    train.set_memory_limit("120G")
    kubernetes.mount_pvc(train, pvc_name=pvc.outputs["name"], mount_path="/cache")
    kubernetes.add_node_selector(train, label_key="nvidia.com/gpu.product", label_value="NVIDIA-A100-SXM4-80GB")

    kubernetes.DeletePVC(pvc_name=pvc.outputs["name"]).after(train)

    ev = evaluate_detector(run_tag=run_tag).after(train)
    with dsl.If(ev.outputs["recall"] >= min_recall):
        register_model(run_tag=run_tag)


if __name__ == "__main__":
    compiler.Compiler().compile(weld_rt, __file__.replace(".py", ".yaml"))
