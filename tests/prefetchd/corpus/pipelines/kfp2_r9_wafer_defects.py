# ruff: noqa
"""Monthly retrain of the wafer-map defect classifier (WM-811K style labels).

Wafer maps are exported per fab by the yield-analytics ETL into
s3://acme-fab-yield/wafermaps/<fab>/<YYYY-MM>/ as .npz shards. We stage them on a
scratch PVC, pack them into webdataset tar shards, fine-tune a ConvNeXt-T and
register the model only if macro-F1 beats the bar.
"""
from typing import List, NamedTuple

from kfp import compiler, dsl, kubernetes
from kfp.dsl import Input, Metrics, Model, Output

TRAIN_IMAGE = "ghcr.io/acme-fab/wafer-cls:2.4.0-cu124"


@dsl.container_component
def pull_wafer_maps(fab: str, bucket: str, month: str):
    return dsl.ContainerSpec(
        image="peakcom/s5cmd:v2.2.2",
        command=["/s5cmd"],
        args=[
            "--numworkers", "64",
            "cp",
            "--show-progress",
            f"s3://{bucket}/wafermaps/{fab}/{month}/*.npz",
            f"/scratch/raw/{fab}/",
        ],
    )


@dsl.component(
    base_image="python:3.11-slim",
    packages_to_install=["pandas==2.2.2", "s3fs==2024.6.1", "numpy==1.26.4", "webdataset==0.2.86"],
)
def build_shards(fabs: List[str], labels_uri: str, shard_size: int = 2000) -> int:
    import glob
    import io
    import os

    import numpy as np
    import pandas as pd
    import webdataset as wds

    labels = pd.read_csv(labels_uri)  # s3fs picks up IRSA creds
    labels = labels.set_index("wafer_id")["failure_type"].to_dict()

    os.makedirs("/scratch/shards", exist_ok=True)
    n = 0
    with wds.ShardWriter("/scratch/shards/wafer-%05d.tar", maxcount=shard_size) as sink:
        for fab in fabs:
            for path in sorted(glob.glob(f"/scratch/raw/{fab}/*.npz")):
                arrs = np.load(path)
                for wafer_id in arrs.files:
                    if wafer_id not in labels:
                        continue
                    buf = io.BytesIO()
                    np.save(buf, arrs[wafer_id])
                    sink.write({"__key__": wafer_id, "npy": buf.getvalue(),
                                "cls": labels[wafer_id].encode()})
                    n += 1
    print(f"wrote {n} samples")
    return n


@dsl.component(base_image=TRAIN_IMAGE)
def train_convnext(
    n_samples: int,
    epochs: int,
    model: Output[Model],
    backbone: str = "convnext_tiny.fb_in22k",
):
    import subprocess

    print(f"training on {n_samples} wafers")
    subprocess.run(
        [
            "torchrun", "--nproc_per_node=4", "-m", "wafer_cls.train",
            "--shards", "/scratch/shards/wafer-{00000..99999}.tar",
            "--backbone", backbone,
            "--epochs", str(epochs),
            "--amp", "bf16",
            "--output-dir", model.path,
        ],
        check=True,
    )


@dsl.component(
    base_image=TRAIN_IMAGE,
    packages_to_install=["pyarrow==16.1.0"],
)
def evaluate_holdout(
    model: Input[Model],
    holdout_uri: str,
    metrics: Output[Metrics],
) -> NamedTuple("EvalOut", [("macro_f1", float)]):
    from collections import namedtuple

    import pyarrow.dataset as ds
    from pyarrow import fs

    from wafer_cls.eval import score_table

    s3 = fs.S3FileSystem(region="us-west-2")
    table = ds.dataset(holdout_uri.removeprefix("s3://"), filesystem=s3, format="parquet").to_table()
    report = score_table(model.path, table)
    metrics.log_metric("macro_f1", report["macro_f1"])
    metrics.log_metric("edge_ring_recall", report["per_class"]["Edge-Ring"]["recall"])
    return namedtuple("EvalOut", ["macro_f1"])(report["macro_f1"])


@dsl.component(base_image="python:3.11-slim", packages_to_install=["boto3==1.34.131"])
def register_model(model: Input[Model], registry_prefix: str, month: str, macro_f1: float):
    import json
    import os

    import boto3

    s3 = boto3.client("s3")
    bucket, _, prefix = registry_prefix.removeprefix("s3://").partition("/")
    dest = f"{prefix.rstrip('/')}/{month}"
    for root, _, files in os.walk(model.path):
        for f in files:
            local = os.path.join(root, f)
            key = f"{dest}/{os.path.relpath(local, model.path)}"
            s3.upload_file(local, bucket, key)
    s3.put_object(Bucket=bucket, Key=f"{dest}/meta.json",
                  Body=json.dumps({"macro_f1": macro_f1, "month": month}).encode())


@dsl.pipeline(name="wafer-defect-monthly", description="Wafer-map defect classifier retrain")
def wafer_defect_pipeline(
    fab_bucket: str = "acme-fab-yield",
    month: str = "2025-05",
    fabs: List[str] = ["fab12", "fab14", "fab16"],
    labels_uri: str = "s3://acme-fab-yield/labels/wm811k_relabel_v3.csv",
    holdout_uri: str = "s3://acme-fab-yield/holdout/wm-test-2024h2/",
    epochs: int = 25,
    f1_bar: float = 0.86,
    registry_prefix: str = "s3://acme-fab-models/wafer-defect/",
):
    scratch = kubernetes.CreatePVC(
        pvc_name_suffix="-wafermaps",
        access_modes=["ReadWriteOnce"],
        size="120Gi",
        storage_class_name="gp3-csi",
    )

    with dsl.ParallelFor(items=fabs, parallelism=2) as fab:
        pull = pull_wafer_maps(fab=fab, bucket=fab_bucket, month=month)
        pull.set_caching_options(False)
        kubernetes.mount_pvc(pull, pvc_name=scratch.outputs["name"], mount_path="/scratch")

    shards = build_shards(fabs=fabs, labels_uri=labels_uri).after(pull)
    shards.set_cpu_limit("8").set_memory_limit("32G")
    kubernetes.mount_pvc(shards, pvc_name=scratch.outputs["name"], mount_path="/scratch")

    train = train_convnext(n_samples=shards.output, epochs=epochs)
    train.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(4)
    train.set_retry(num_retries=2, backoff_duration="120s")
    kubernetes.mount_pvc(train, pvc_name=scratch.outputs["name"], mount_path="/scratch")
    kubernetes.add_toleration(train, key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")

    evaluate = evaluate_holdout(model=train.outputs["model"], holdout_uri=holdout_uri)
    evaluate.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(1)

    with dsl.If(evaluate.outputs["macro_f1"] >= f1_bar, name="beats-bar"):
        register_model(
            model=train.outputs["model"],
            registry_prefix=registry_prefix,
            month=month,
            macro_f1=evaluate.outputs["macro_f1"],
        )

    kubernetes.DeletePVC(pvc_name=scratch.outputs["name"]).after(train)


if __name__ == "__main__":
    compiler.Compiler().compile(wafer_defect_pipeline, __file__.replace(".py", ".yaml"))
