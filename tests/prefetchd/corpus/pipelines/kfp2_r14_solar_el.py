# ruff: noqa
"""Electroluminescence (EL) cell-defect classifier for PV module QA.

Nightly on the latest EL capture drop from one plant: sync images to a scratch
PVC, build stratified splits from the inspection labels, fine-tune two timm
backbones in parallel, pick the best by macro-F1 and (optionally) promote it.
"""
from typing import List

from kfp import compiler, dsl, kubernetes
from kfp.dsl import Dataset, Input, Metrics, Output


@dsl.container_component
def sync_el_images(el_prefix: str):
    return dsl.ContainerSpec(
        image="peakcom/s5cmd:v2.2.2",
        command=["sh", "-c"],
        args=[f"s5cmd --numworkers 64 sync '{el_prefix}*' /scratch/el/ && ls /scratch/el | wc -l"],
    )


@dsl.component(base_image="python:3.11-slim", packages_to_install=["pandas==2.2.2", "s3fs==2024.6.1", "scikit-learn==1.5.1", "pyarrow==16.1.0"])
def build_splits(labels_uri: str, splits: Output[Dataset]):
    import os
    import pandas as pd
    from sklearn.model_selection import StratifiedShuffleSplit

    labels = pd.read_csv(labels_uri)
    on_disk = {f for f in os.listdir("/scratch/el") if f.endswith(".png")}
    labels = labels[labels["image_file"].isin(on_disk)].reset_index(drop=True)
    sss = StratifiedShuffleSplit(n_splits=1, test_size=0.15, random_state=7)
    tr, te = next(sss.split(labels, labels["defect_class"]))
    labels["split"] = "train"
    labels.loc[te, "split"] = "test"
    labels.to_parquet(splits.path)


@dsl.component(base_image="ghcr.io/helios-pv/el-trainer:2.1.0-cu121")
def train_backbone(backbone: str, splits: Input[Dataset], model_out: str, metrics: Output[Metrics]) -> str:
    import json, subprocess
    import boto3
    import pandas as pd
    import timm, torch  # noqa: F401  (pre-installed in image)

    df = pd.read_parquet(splits.path)
    df.to_csv("/tmp/splits.csv", index=False)
    subprocess.run(["python", "-m", "el_trainer.train", "--backbone", backbone, "--pretrained", f"timm/{backbone}",
                    "--images", "/scratch/el", "--splits", "/tmp/splits.csv", "--epochs", "25",
                    "--amp", "--out", "/tmp/run"], check=True)
    res = json.load(open("/tmp/run/eval.json"))
    metrics.log_metric("macro_f1", res["macro_f1"])
    bucket, _, prefix = model_out.removeprefix("s3://").partition("/")
    s3 = boto3.client("s3")
    for name in ("model.safetensors", "config.json", "eval.json"):
        s3.upload_file(f"/tmp/run/{name}", bucket, f"{prefix}{backbone}/{name}")
    return f"{backbone}={res['macro_f1']:.5f}"


@dsl.component(base_image="python:3.11-slim")
def select_best(results: List[str]) -> str:
    scored = [(float(r.split("=")[1]), r.split("=")[0]) for r in results]
    best = max(scored)[1]
    print("best backbone:", best)
    return best


@dsl.container_component
def promote_model(model_out: str, best: str):
    return dsl.ContainerSpec(
        image="amazon/aws-cli:2.17.0",
        command=["sh", "-c"],
        args=[f"aws s3 sync {model_out}{best}/ s3://helios-pv-models/el-defect/prod/ --delete"],
    )


@dsl.pipeline(name="el-defect-nightly", description="EL cell defect classifier retrain")
def el_defect_nightly(
    el_prefix: str = "s3://helios-pv-qa/el-images/plant=mojave-7/2025-05/",
    labels_uri: str = "s3://helios-pv-qa/labels/el_defects_v3.csv",
    model_out: str = "s3://helios-pv-models/el-defect/2025-05/",
    promote: bool = False,
):
    pvc = kubernetes.CreatePVC(pvc_name_suffix="-el-scratch", access_modes=["ReadWriteOnce"],
                               size="120Gi", storage_class_name="gp3")
    sync = sync_el_images(el_prefix=el_prefix)
    kubernetes.mount_pvc(sync, pvc_name=pvc.outputs["name"], mount_path="/scratch")
    kubernetes.use_secret_as_env(sync, secret_name="pv-qa-s3", secret_key_to_env={"AWS_ACCESS_KEY_ID": "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY": "AWS_SECRET_ACCESS_KEY"})

    splits = build_splits(labels_uri=labels_uri).after(sync)
    kubernetes.mount_pvc(splits, pvc_name=pvc.outputs["name"], mount_path="/scratch")

    with dsl.ParallelFor(items=["convnext_tiny.fb_in22k", "efficientnet_b3.ra2_in1k"], parallelism=2) as bb:
        tr = train_backbone(backbone=bb, splits=splits.outputs["splits"], model_out=model_out)
        tr.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(1).set_memory_limit("48G")
        kubernetes.mount_pvc(tr, pvc_name=pvc.outputs["name"], mount_path="/scratch")

    best = select_best(results=dsl.Collected(tr.outputs["Output"]))
    delete = kubernetes.DeletePVC(pvc_name=pvc.outputs["name"]).after(best)

    with dsl.If(promote == True):
        promote_model(model_out=model_out, best=best.output)


if __name__ == "__main__":
    compiler.Compiler().compile(el_defect_nightly, __file__.replace(".py", ".yaml"))
