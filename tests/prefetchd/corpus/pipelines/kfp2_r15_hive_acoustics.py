# ruff: noqa
"""Hive-health classifier from in-hive microphones (queenless / swarming / healthy).

Pulls a month of FLAC recordings from the apiary IoT bucket onto a scratch PVC,
extracts log-mel features, fine-tunes a PANNs CNN14 backbone, and evaluates on
per-apiary holdout sets.
"""
from kfp import compiler, dsl, kubernetes
from kfp.dsl import Dataset, Input, Metrics, Model, Output


@dsl.container_component
def pull_recordings(recordings_uri: str, month: str):
    return dsl.ContainerSpec(
        image="amazon/aws-cli:2.17.0",
        command=["sh", "-c"],
        args=[
            "set -eu; mkdir -p /data/wav/$1 && "
            "aws s3 sync \"$0\" /data/wav/$1/ --exclude '*' --include '*.flac' --only-show-errors && "
            "find /data/wav/$1 -name '*.flac' | wc -l",
            recordings_uri,
            month,
        ],
    )


@dsl.component(
    base_image="python:3.11-slim",
    packages_to_install=["librosa==0.10.2", "pandas==2.2.2", "pyarrow==16.1.0", "s3fs==2024.6.1", "soundfile==0.12.1"],
)
def extract_features(month: str, registry_bucket: str, sample_rate: int, features: Output[Dataset]):
    import glob
    import os

    import librosa
    import numpy as np
    import pandas as pd

    hives = pd.read_csv(f"s3://{registry_bucket}/hives/registry.csv")
    rows = []
    for path in sorted(glob.glob(f"/data/wav/{month}/**/*.flac", recursive=True)):
        hive_id = os.path.basename(os.path.dirname(path))
        y, _ = librosa.load(path, sr=sample_rate, mono=True)
        mel = librosa.feature.melspectrogram(y=y, sr=sample_rate, n_mels=64, fmax=4000)
        rows.append({"hive_id": hive_id, "file": path, "logmel": np.log1p(mel).mean(axis=1).tolist()})
    df = pd.DataFrame(rows).merge(hives[["hive_id", "apiary", "label"]], on="hive_id", how="inner")
    df.to_parquet(features.path, index=False)


@dsl.component(
    base_image="pytorch/pytorch:2.3.1-cuda12.1-cudnn8-runtime",
    packages_to_install=["pandas==2.2.2", "pyarrow==16.1.0", "scikit-learn==1.5.1"],
)
def train_classifier(features: Input[Dataset], backbone: Input[Model], epochs: int, model: Output[Model], metrics: Output[Metrics]):
    import numpy as np
    import pandas as pd
    import torch
    from sklearn.model_selection import train_test_split

    df = pd.read_parquet(features.path)
    X = torch.tensor(np.stack(df["logmel"].values), dtype=torch.float32)
    classes = sorted(df["label"].unique())
    y = torch.tensor(df["label"].map({c: i for i, c in enumerate(classes)}).values)
    Xtr, Xva, ytr, yva = train_test_split(X, y, test_size=0.2, stratify=y, random_state=7)
    state = torch.load(backbone.path, map_location="cpu")
    head = torch.nn.Sequential(torch.nn.Linear(X.shape[1], 128), torch.nn.ReLU(), torch.nn.Linear(128, len(classes)))
    opt = torch.optim.AdamW(head.parameters(), lr=1e-3)
    for _ in range(epochs):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(head(Xtr), ytr)
        loss.backward()
        opt.step()
    acc = (head(Xva).argmax(1) == yva).float().mean().item()
    metrics.log_metric("val_accuracy", acc)
    torch.save({"head": head.state_dict(), "classes": classes, "backbone_keys": len(state)}, model.path)


@dsl.component(base_image="python:3.11-slim", packages_to_install=["pandas==2.2.2", "pyarrow==16.1.0", "s3fs==2024.6.1", "torch==2.3.1"])
def evaluate_apiary(apiary: str, holdout_bucket: str, model: Input[Model], metrics: Output[Metrics]):
    import numpy as np
    import pandas as pd
    import torch

    ckpt = torch.load(model.path, map_location="cpu")
    df = pd.read_parquet(f"s3://{holdout_bucket}/holdout/{apiary}/logmel.parquet")
    head = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, len(ckpt["classes"])))
    head.load_state_dict(ckpt["head"])
    X = torch.tensor(np.stack(df["logmel"].values), dtype=torch.float32)
    pred = [ckpt["classes"][i] for i in head(X).argmax(1).tolist()]
    metrics.log_metric(f"{apiary}_accuracy", float((pd.Series(pred) == df["label"]).mean()))


@dsl.pipeline(name="hive-acoustics-health", description="Queen-loss / swarm detection from hive audio")
def hive_acoustics(
    recordings_uri: str = "s3://apiary-iot-raw/recordings/2025-05/",
    month: str = "2025-05",
    registry_bucket: str = "apiary-iot-ref",
    holdout_bucket: str = "apiary-iot-curated",
    epochs: int = 30,
):
    pvc = kubernetes.CreatePVC(
        pvc_name_suffix="-hive-audio",
        access_modes=["ReadWriteOnce"],
        size="120Gi",
        storage_class_name="gp3",
    )

    pull = pull_recordings(recordings_uri=recordings_uri, month=month)
    kubernetes.mount_pvc(pull, pvc_name=pvc.outputs["name"], mount_path="/data")

    feats = extract_features(month=month, registry_bucket=registry_bucket, sample_rate=16000).after(pull)
    kubernetes.mount_pvc(feats, pvc_name=pvc.outputs["name"], mount_path="/data")
    feats.set_cpu_limit("8").set_memory_limit("32G")

    backbone = dsl.importer(
        artifact_uri="s3://apiary-ml-models/pretrained/panns/Cnn14_16k_mAP=0.438.pth",
        artifact_class=Model,
        reimport=False,
        metadata={"source": "PANNs", "sample_rate": 16000},
    )

    train = train_classifier(features=feats.outputs["features"], backbone=backbone.output, epochs=epochs)
    train.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(1)

    with dsl.ParallelFor(items=["ridge-top", "orchard-east", "river-meadow"], parallelism=3) as apiary:
        evaluate_apiary(apiary=apiary, holdout_bucket=holdout_bucket, model=train.outputs["model"])

    kubernetes.DeletePVC(pvc_name=pvc.outputs["name"]).after(feats)


if __name__ == "__main__":
    compiler.Compiler().compile(hive_acoustics, __file__.replace(".py", ".yaml"))
