# ruff: noqa
"""MTG-Jamendo top-50 music auto-tagging retrain (KFP 1.8).

Music-discovery team. The ingestion job publishes a new audio snapshot and
bumps a LATEST pointer; this pipeline syncs that snapshot into the shared
audio cache PVC, computes log-mels, trains a short-chunk CNN and pushes it to
the serving bucket when ROC-AUC clears the bar.
"""
import kfp
from kfp import dsl, onprem
from kfp.components import create_component_from_func, OutputPath


def resolve_snapshot(pointer_uri: str) -> str:
    import boto3

    bucket, _, key = pointer_uri[len("s3://"):].partition("/")
    body = boto3.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read().decode().strip()
    snapshot = body if body.endswith("/") else body + "/"
    print("snapshot:", snapshot)
    return snapshot


def extract_mels(audio_dir: str, split_tsv: str, mel_dir: str, sample_rate: int = 16000) -> int:
    import os
    import librosa
    import numpy as np
    import pandas as pd
    from smart_open import open as sopen

    with sopen(split_tsv, "r") as f:
        rows = [line.rstrip("\n").split("\t") for line in f][1:]
    tracks = pd.DataFrame({"track_id": [r[0] for r in rows], "path": [r[3] for r in rows]})
    os.makedirs(mel_dir, exist_ok=True)
    n = 0
    for t in tracks.itertuples():
        y, _ = librosa.load(os.path.join(audio_dir, t.path.replace(".mp3", ".low.mp3")), sr=sample_rate)
        mel = librosa.power_to_db(librosa.feature.melspectrogram(y=y, sr=sample_rate, n_fft=512, hop_length=256, n_mels=96))
        np.save(os.path.join(mel_dir, f"{t.track_id}.npy"), mel.astype(np.float16))
        n += 1
    return n


resolve_snapshot_op = create_component_from_func(
    resolve_snapshot, base_image="python:3.11-slim", packages_to_install=["boto3==1.34.131"])
extract_mels_op = create_component_from_func(
    extract_mels, base_image="ghcr.io/tunefind-ml/audio-py:3.11-librosa0.10",
    packages_to_install=["smart_open[s3]==7.0.4"])

SPLIT = "s3://jamendo-ml/mtg-jamendo/splits/split-0"


@dsl.pipeline(name="mtg-jamendo-autotag", description="Top-50 tag CNN retrain")
def autotag(
    pointer_uri: str = "s3://jamendo-ml/mtg-jamendo/snapshots/LATEST",
    cache_claim: str = "jamendo-audio-cache",
    min_roc_auc: float = 0.77,
    epochs: int = 120,
):
    snap = resolve_snapshot_op(pointer_uri=pointer_uri)
    snap.execution_options.caching_strategy.max_cache_staleness = "P0D"

    sync = dsl.ContainerOp(
        name="sync-audio",
        image="peakcom/s5cmd:v2.2.2",
        command=["/s5cmd", "--numworkers", "64", "sync"],
        arguments=[f"{snap.output}audio/*", "/data/jamendo/audio/"],
    ).apply(onprem.mount_pvc(cache_claim, "audio-cache", "/data"))

    mels = extract_mels_op(
        audio_dir="/data/jamendo/audio",
        split_tsv=f"{SPLIT}/autotagging_top50tags-train.tsv",
        mel_dir="/data/jamendo/mels-96",
    ).apply(onprem.mount_pvc(cache_claim, "audio-cache", "/data")).after(sync)
    mels.set_cpu_request("15").set_memory_request("24G")

    model_dir = f"s3://jamendo-ml-models/autotag-top50/{dsl.RUN_ID_PLACEHOLDER}/"
    train = dsl.ContainerOp(
        name="train-short-chunk-cnn",
        image="ghcr.io/tunefind-ml/sota-music-tagging:0.4.2",
        command=["python", "-m", "training.main"],
        arguments=[
            "--model_type", "short_res",
            "--dataset", "mtat-jamendo-top50",
            "--data_path", "/data/jamendo/mels-96",
            "--split_dir", SPLIT,
            "--n_epochs", epochs,
            "--batch_size", "32",
            "--model_save_path", model_dir,
        ],
        file_outputs={"model_dir": "/tmp/outputs/model_dir"},
    ).apply(onprem.mount_pvc(cache_claim, "audio-cache", "/data")).after(mels)
    train.set_gpu_limit(1)
    train.add_node_selector_constraint("nvidia.com/gpu.product", "NVIDIA-A10G")

    ev = dsl.ContainerOp(
        name="eval-tags",
        image="ghcr.io/tunefind-ml/sota-music-tagging:0.4.2",
        command=["python", "-m", "training.eval"],
        arguments=[
            "--model_load_path", train.outputs["model_dir"],
            "--test_tsv", f"{SPLIT}/autotagging_top50tags-test.tsv",
            "--data_path", "/data/jamendo/mels-96",
            "--metrics_out", "/tmp/outputs/roc_auc",
        ],
        file_outputs={"roc_auc": "/tmp/outputs/roc_auc"},
    ).apply(onprem.mount_pvc(cache_claim, "audio-cache", "/data"))

    with dsl.Condition(ev.outputs["roc_auc"] >= min_roc_auc, name="auc-ok"):
        dsl.ContainerOp(
            name="push-to-serving",
            image="amazon/aws-cli:2.17.0",
            command=["sh", "-c"],
            arguments=[
                f'aws s3 sync "{train.outputs["model_dir"]}" s3://jamendo-serving/models/autotag-top50/current/ --delete'
                f' && echo "{train.outputs["model_dir"]}" | aws s3 cp - s3://jamendo-serving/models/autotag-top50/SOURCE'
            ],
        )


if __name__ == "__main__":
    kfp.compiler.Compiler().compile(autotag, __file__.replace(".py", ".yaml"))
