# ruff: noqa
"""Speech enhancement for hearing aids: DCCRN trained on DNS-5 clean speech mixed with noise at several SNRs, scored by PESQ."""
from typing import List, NamedTuple

from kfp import compiler, dsl, kubernetes

AUDIO_IMAGE = "ghcr.io/earlab/denoise:0.9.3-cu121"


@dsl.container_component
def download_corpus(clean_uri: str, noise_uri: str):
    return dsl.ContainerSpec(
        image="amazon/aws-cli:2.17.0",
        command=["sh", "-c"],
        args=['set -eu\n'
              'aws s3 sync "$0" /data/clean/ --only-show-errors\n'
              'aws s3 sync "$1" /data/noise/ --only-show-errors\n'
              'du -sh /data/clean /data/noise',
              clean_uri, noise_uri],
    )


@dsl.component(base_image=AUDIO_IMAGE)
def mix_noisy(snr_db: str, rir_manifest_uri: str, seed: int = 13):
    import os

    import pandas as pd
    from denoise.synth import mix_folder

    rirs = pd.read_csv(rir_manifest_uri)
    out_dir = f"/data/mix/snr{snr_db}"
    os.makedirs(out_dir, exist_ok=True)
    mix_folder(clean_dir="/data/clean", noise_dir="/data/noise", rirs=rirs, snr_db=float(snr_db),
               out_dir=out_dir, seed=seed)


@dsl.container_component
def train_dccrn(run_id: str, epochs: int):
    return dsl.ContainerSpec(
        image=AUDIO_IMAGE,
        command=["python", "-m", "denoise.train"],
        args=["--data-root", "/data/mix",
              "--init-weights", "s3://earlab-models/dccrn/pretrained_dns4.pt",
              "--output-dir", f"s3://earlab-models/dccrn/{run_id}/",
              "--epochs", epochs,
              "--batch-size", "32"],
    )


@dsl.component(base_image=AUDIO_IMAGE)
def evaluate_pesq(run_id: str) -> NamedTuple("Scores", [("pesq", float), ("stoi", float)]):
    import json
    from collections import namedtuple

    import fsspec
    import pandas as pd
    import torch
    from denoise.metrics import score_testset

    with fsspec.open(f"s3://earlab-models/dccrn/{run_id}/best.pt", "rb") as f:
        state = torch.load(f, map_location="cuda")
    test = pd.read_parquet("s3://earlab-audio/dns5/blind_test/testset.parquet")
    pesq, stoi = score_testset(state, test)
    with fsspec.open(f"s3://earlab-models/dccrn/{run_id}/eval.json", "w") as f:
        json.dump({"pesq": pesq, "stoi": stoi}, f)
    return namedtuple("Scores", ["pesq", "stoi"])(pesq, stoi)


@dsl.container_component
def quantize_for_device(run_id: str):
    return dsl.ContainerSpec(
        image=AUDIO_IMAGE,
        command=["python", "-m", "denoise.quantize"],
        args=["--weights", f"s3://earlab-models/dccrn/{run_id}/best.pt",
              "--calibration", "s3://earlab-audio/dns5/calibration/200clips/",
              "--output", f"s3://earlab-edge/hearing-aid/{run_id}/dccrn_int8.tflite"],
    )


@dsl.pipeline(name="hearing-aid-denoise")
def hearing_denoise(clean_uri: str = "s3://earlab-audio/dns5/clean/read_speech/",
                    noise_uri: str = "s3://earlab-audio/dns5/noise/",
                    rir_manifest_uri: str = "s3://earlab-audio/rirs/slr28_manifest.csv",
                    snr_levels: List[str] = ["-5", "0", "5", "10"],
                    run_id: str = "dccrn-2025-07-02",
                    epochs: int = 40,
                    min_pesq: float = 2.9):
    pvc = kubernetes.CreatePVC(pvc_name_suffix="-dns5", access_modes=["ReadWriteOnce"], size="300Gi",
                               storage_class_name="gp3")
    dl = download_corpus(clean_uri=clean_uri, noise_uri=noise_uri)
    kubernetes.mount_pvc(dl, pvc_name=pvc.outputs["name"], mount_path="/data")

    with dsl.ParallelFor(snr_levels, parallelism=2) as snr:
        mix = mix_noisy(snr_db=snr, rir_manifest_uri=rir_manifest_uri)
        mix.after(dl)
        kubernetes.mount_pvc(mix, pvc_name=pvc.outputs["name"], mount_path="/data")
        mix.set_cpu_limit("8")

    train = train_dccrn(run_id=run_id, epochs=epochs).after(mix)
    kubernetes.mount_pvc(train, pvc_name=pvc.outputs["name"], mount_path="/data")
    train.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(2)
    train.set_env_variable("NCCL_DEBUG", "WARN")

    kubernetes.DeletePVC(pvc_name=pvc.outputs["name"]).after(train)

    ev = evaluate_pesq(run_id=run_id).after(train)
    ev.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(1)

    with dsl.If(ev.outputs["pesq"] >= min_pesq, name="pesq-ok"):
        quantize_for_device(run_id=run_id)


if __name__ == "__main__":
    compiler.Compiler().compile(hearing_denoise, __file__.replace(".py", ".yaml"))
