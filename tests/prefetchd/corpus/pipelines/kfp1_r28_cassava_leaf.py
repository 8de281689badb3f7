# ruff: noqa
"""Cassava leaf disease classifier (EfficientNet-B3) trained on smallholder field photos; evaluated per country field trial."""
import kfp
from kfp import dsl
from kfp.components import InputPath, OutputPath, create_component_from_func
from kubernetes.client import V1EnvVar, V1EnvVarSource, V1SecretKeySelector

TRAIN_IMAGE = "ghcr.io/agri-vision/cassava:0.7.2-cu118"


def make_folds(dataset_version: str, n_folds: int, folds_csv: OutputPath("CSV")):
    import pandas as pd
    from sklearn.model_selection import StratifiedKFold

    df = pd.read_csv(f"s3://agri-vision/cassava/{dataset_version}/train.csv")
    df["fold"] = -1
    skf = StratifiedKFold(n_splits=n_folds, shuffle=True, random_state=42)
    for i, (_, va) in enumerate(skf.split(df, df["label"])):
        df.loc[va, "fold"] = i
    df.to_csv(folds_csv, index=False)


def export_tflite(run_name: str):
    import boto3
    import torch
    from cassava.export import to_tflite

    s3 = boto3.client("s3")
    s3.download_file("agri-vision-models", f"cassava/{run_name}/best.pt", "/tmp/best.pt")
    model = torch.load("/tmp/best.pt", map_location="cpu")
    to_tflite(model, "/tmp/model.tflite", input_size=512)
    s3.upload_file("/tmp/model.tflite", "agri-vision-edge", f"cassava/{run_name}/model.tflite")


def evaluate_field_trial(run_name: str, field_set: str):
    import json

    import pandas as pd
    import s3fs
    import torch
    from cassava.infer import predict_folder

    fs = s3fs.S3FileSystem()
    fs.get(f"s3://agri-vision-models/cassava/{run_name}/best.pt", "/tmp/best.pt")
    fs.get(f"s3://agri-vision/field-trials/{field_set}/images/", "/tmp/images/", recursive=True)
    labels = pd.read_csv(f"s3://agri-vision/field-trials/{field_set}/labels.csv")
    model = torch.load("/tmp/best.pt", map_location="cpu")
    preds = predict_folder(model, "/tmp/images")
    acc = float((labels.set_index("image_id")["label"] == preds).mean())
    with fs.open(f"s3://agri-vision-models/cassava/{run_name}/field-trials/{field_set}.json", "w") as f:
        json.dump({"field_set": field_set, "accuracy": acc, "n": len(labels)}, f)


make_folds_op = create_component_from_func(make_folds, base_image="python:3.10", packages_to_install=["pandas", "scikit-learn", "s3fs"])
export_op = create_component_from_func(export_tflite, base_image=TRAIN_IMAGE)
field_eval_op = create_component_from_func(evaluate_field_trial, base_image=TRAIN_IMAGE)


@dsl.pipeline(name="cassava-leaf-disease", description="Train and evaluate the cassava leaf disease classifier")
def cassava_pipeline(dataset_version: str = "2025-05",
                     run_name: str = "effb3-2025-05",
                     n_folds: int = 5,
                     epochs: int = 10,
                     min_val_acc: float = 0.88):
    work = dsl.VolumeOp(name="work-volume", resource_name="cassava-work", size="120Gi",
                        modes=dsl.VOLUME_MODE_RWO, storage_class="gp3")

    download = dsl.ContainerOp(
        name="download-images",
        image="rclone/rclone:1.67",
        command=["rclone"],
        arguments=["copy", f":s3:agri-vision/cassava/{dataset_version}/train_images", "/mnt/work/train_images",
                   "--s3-provider", "AWS", "--s3-env-auth", "--transfers", "32", "--checkers", "64"],
        pvolumes={"/mnt/work": work.volume},
    )
    download.container.add_env_variable(V1EnvVar(name="AWS_REGION", value="eu-west-1"))

    folds = make_folds_op(dataset_version=dataset_version, n_folds=n_folds)

    train = dsl.ContainerOp(
        name="train",
        image=TRAIN_IMAGE,
        command=["python", "-m", "cassava.train"],
        arguments=["--images", "/mnt/work/train_images",
                   "--folds", dsl.InputArgumentPath(folds.outputs["folds_csv"], path="/tmp/inputs/folds.csv"),
                   "--init-weights", "s3://agri-vision-models/timm/efficientnet_b3_ra2-cf984f9c.pth",
                   "--output-dir", f"s3://agri-vision-models/cassava/{run_name}/",
                   "--epochs", epochs,
                   "--img-size", "512"],
        pvolumes={"/mnt/work": download.pvolume},
        file_outputs={"val_acc": "/tmp/outputs/val_acc.txt"},
    )
    train.set_gpu_limit(2)
    train.set_memory_limit("64G")
    train.container.add_env_variable(V1EnvVar(name="WANDB_PROJECT", value="cassava"))
    train.container.add_env_variable(V1EnvVar(
        name="WANDB_API_KEY",
        value_from=V1EnvVarSource(secret_key_ref=V1SecretKeySelector(name="wandb", key="api-key"))))
    train.add_node_selector_constraint("cloud.google.com/gke-accelerator", "nvidia-tesla-t4")

    with dsl.Condition(train.outputs["val_acc"] >= min_val_acc, name="accurate-enough"):
        export_op(run_name=run_name)

    with dsl.ParallelFor(["kenya-2024", "tanzania-2024", "uganda-2025"]) as field_set:
        field_eval_op(run_name=run_name, field_set=field_set).after(train)


if __name__ == "__main__":
    kfp.compiler.Compiler().compile(cassava_pipeline, __file__.replace(".py", ".yaml"))
