# ruff: noqa
"""Food photo recognition (Food-101 fine-tune of ConvNeXt) plus a calorie regressor on Nutrition5k overhead images."""
from typing import NamedTuple

from kfp import compiler, dsl, kubernetes

TRAIN_IMAGE = "ghcr.io/foodcam/train:2.4.0-cu121"


@dsl.container_component
def stage_food101(images_prefix: str, labels_uri: str):
    return dsl.ContainerSpec(
        image="amazon/aws-cli:2.17.0",
        command=["sh", "-c"],
        args=['set -e\n'
              'aws s3 sync "$0" /scratch/food101/images/ --only-show-errors\n'
              'aws s3 cp "$1" /scratch/food101/meta/train.json\n'
              'ls /scratch/food101/images | wc -l',
              images_prefix, labels_uri],
    )


@dsl.component(base_image=TRAIN_IMAGE)
def train_classifier(base_ckpt: str, run_id: str, epochs: int) -> NamedTuple("Out", [("top1", float)]):
    import json
    from collections import namedtuple

    import s3fs
    import timm
    import torch
    from foodcam.data import Food101Folder
    from foodcam.loops import fit

    fs = s3fs.S3FileSystem()
    fs.get(base_ckpt, "/tmp/base/", recursive=True)
    model = timm.create_model("convnext_small", pretrained=True, num_classes=101,
                              pretrained_cfg_overlay={"file": "/tmp/base/pytorch_model.bin"})
    meta = json.load(open("/scratch/food101/meta/train.json"))
    train_ds = Food101Folder("/scratch/food101/images", meta, split="train")
    val_ds = Food101Folder("/scratch/food101/images", meta, split="val")
    top1 = fit(model, train_ds, val_ds, epochs=epochs, out_dir=f"/scratch/runs/{run_id}")
    fs.put(f"/scratch/runs/{run_id}/", f"s3://foodcam-models/runs/{run_id}/", recursive=True)
    return namedtuple("Out", ["top1"])(float(top1))


@dsl.component(base_image=TRAIN_IMAGE)
def train_calorie_head(run_id: str, dishes_uri: str = "s3://foodcam-data/nutrition5k/metadata/dish_metadata_cafe1.csv"):
    import pandas as pd
    import torch
    from datasets import load_dataset
    from foodcam.calorie import CalorieRegressor

    dishes = pd.read_csv(dishes_uri, usecols=[0, 1, 2, 3, 4, 5], header=None,
                         names=["dish_id", "kcal", "mass", "fat", "carb", "protein"])
    imgs = load_dataset("parquet", data_files={"train": "s3://foodcam-data/nutrition5k/overhead/train-*.parquet"},
                        split="train")
    reg = CalorieRegressor(backbone="convnext_small")
    reg.fit(imgs, dishes, epochs=20)
    torch.save(reg.state_dict(), "/tmp/calorie_head.pt")
    import boto3
    boto3.client("s3").upload_file("/tmp/calorie_head.pt", "foodcam-models", f"runs/{run_id}/calorie_head.pt")


@dsl.container_component
def export_onnx(run_id: str):
    return dsl.ContainerSpec(
        image=TRAIN_IMAGE,
        command=["python", "-m", "foodcam.export"],
        args=["--weights", f"s3://foodcam-models/runs/{run_id}/best.pt",
              "--calorie-head", f"s3://foodcam-models/runs/{run_id}/calorie_head.pt",
              "--output", f"s3://foodcam-serving/releases/{run_id}/foodcam.onnx",
              "--opset", "17"],
    )


@dsl.component(base_image="python:3.11-slim", packages_to_install=["requests"])
def notify_slack(run_id: str):
    import os

    import requests

    requests.post(os.environ["SLACK_WEBHOOK"], json={"text": f"foodcam training run {run_id} finished"}, timeout=10)


@dsl.pipeline(name="foodcam-recognition-calories")
def foodcam(images_prefix: str = "s3://foodcam-data/food101/images/",
            labels_uri: str = "s3://foodcam-data/food101/meta/train.json",
            base_ckpt: str = "s3://foodcam-models/timm/convnext_small.fb_in22k/",
            run_id: str = "cnx-s-2025-06-18",
            epochs: int = 12,
            scratch_claim: str = "foodcam-scratch",
            min_top1: float = 0.88):
    done = notify_slack(run_id=run_id)
    kubernetes.use_secret_as_env(done, secret_name="foodcam-slack", secret_key_to_env={"webhook": "SLACK_WEBHOOK"})

    with dsl.ExitHandler(done, name="run-guard"):
        stage = stage_food101(images_prefix=images_prefix, labels_uri=labels_uri)
        kubernetes.mount_pvc(stage, pvc_name=scratch_claim, mount_path="/scratch")

        clf = train_classifier(base_ckpt=base_ckpt, run_id=run_id, epochs=epochs)
        clf.after(stage)
        kubernetes.mount_pvc(clf, pvc_name=scratch_claim, mount_path="/scratch")
        clf.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(4)
        clf.set_cpu_limit("32").set_memory_limit("128G")
        kubernetes.add_toleration(clf, key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")

        cal = train_calorie_head(run_id=run_id)
        cal.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(1)
        cal.set_env_variable("HF_DATASETS_CACHE", "/tmp/hf")

        with dsl.If(clf.outputs["top1"] >= min_top1, name="good-enough"):
            exp = export_onnx(run_id=run_id)
            exp.after(cal)


if __name__ == "__main__":
    compiler.Compiler().compile(foodcam, __file__.replace(".py", ".yaml"))
