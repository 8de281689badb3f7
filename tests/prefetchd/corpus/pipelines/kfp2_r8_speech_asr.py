# ruff: noqa
"""Whisper fine-tuning on Voxline call-center audio.

Audio is staged onto a per-run scratch PVC, the transcript manifest is
registered with an importer, the checkpoint goes to S3 under a run-specific
prefix that only the training step knows, and every eval set is scored
against it with shallow-fusion KenLM decoding.
"""
from typing import List

from kfp import compiler, dsl, kubernetes
from kfp.dsl import Dataset, Input

ASR_IMAGE = "ghcr.io/voxline/asr-train:3.1.0-cu121"


@dsl.container_component
def stage_audio(audio_root: str):
    return dsl.ContainerSpec(
        image="amazon/aws-cli:2.17.0",
        command=["sh", "-c"],
        args=[
            f"set -eu; mkdir -p /scratch/wav && "
            f"aws s3 sync {audio_root}/wav/ /scratch/wav/ --only-show-errors --exclude '*.tmp' && "
            f"du -sh /scratch/wav"
        ],
    )


@dsl.component(base_image=ASR_IMAGE)
def finetune_whisper(
    manifest: Input[Dataset],
    base_model: str,
    epochs: int,
    learning_rate: float,
) -> str:
    import datetime
    import json
    import os
    import subprocess

    run_id = datetime.datetime.utcnow().strftime("%Y%m%dT%H%M")
    out_dir = "/scratch/ckpt"
    rows = [json.loads(l) for l in open(manifest.path)]
    with open("/scratch/train.jsonl", "w") as f:
        for row in rows:
            row["audio_filepath"] = os.path.join("/scratch/wav", row["audio_filepath"])
            f.write(json.dumps(row) + "\n")

    subprocess.run(
        [
            "python", "-m", "voxline_asr.train",
            "--model_name_or_path", base_model,
            "--train_manifest", "/scratch/train.jsonl",
            "--output_dir", out_dir,
            "--num_train_epochs", str(epochs),
            "--learning_rate", str(learning_rate),
            "--fp16",
        ],
        check=True,
    )
    dest = f"s3://voxline-asr-models/whisper-small-callcenter/run-{run_id}/"
    subprocess.run(["aws", "s3", "sync", out_dir, dest], check=True)
    return dest


@dsl.component(base_image=ASR_IMAGE)
def evaluate_wer(checkpoint_uri: str, eval_set: str, lm_bucket: str) -> float:
    import subprocess

    import jiwer
    import pandas as pd

    subprocess.run(["aws", "s3", "sync", checkpoint_uri, "/tmp/ckpt"], check=True)
    lm_uri = "s3://" + lm_bucket + "/kenlm/en-callcenter-5gram.bin"
    subprocess.run(["aws", "s3", "cp", lm_uri, "/tmp/lm.bin"], check=True)
    manifest = pd.read_json(f"s3://voxline-asr-data/eval/{eval_set}/manifest.jsonl", lines=True)
    subprocess.run(
        ["aws", "s3", "sync", f"s3://voxline-asr-data/eval/{eval_set}/wav/", "/tmp/wav"], check=True
    )
    hyps = subprocess.run(
        ["python", "-m", "voxline_asr.transcribe", "--model", "/tmp/ckpt", "--kenlm", "/tmp/lm.bin",
         "--manifest", "-"],
        input=manifest.to_json(orient="records", lines=True),
        capture_output=True, text=True, check=True,
    ).stdout.splitlines()
    return jiwer.wer(list(manifest["text"]), hyps)


@dsl.pipeline(name="whisper-callcenter-finetune")
def speech_asr(
    manifest_uri: str = "s3://voxline-asr-data/manifests/callcenter-en/v7/train.jsonl",
    audio_root: str = "s3://voxline-asr-data/audio/callcenter-en",
    base_model: str = "openai/whisper-small",
    lm_bucket: str = "voxline-asr-lm",
    eval_sets: List[str] = ["librispeech-test-clean", "callcenter-heldout-2025q1"],
    epochs: int = 3,
):
    scratch = kubernetes.CreatePVC(
        pvc_name_suffix="-asr-scratch",
        access_modes=["ReadWriteOnce"],
        size="200Gi",
        storage_class_name="gp3",
    )

    manifest = dsl.importer(
        artifact_uri=manifest_uri,
        artifact_class=Dataset,
        reimport=False,
        metadata={"language": "en", "domain": "callcenter"},
    )

    stage = stage_audio(audio_root=audio_root)
    kubernetes.mount_pvc(stage, pvc_name=scratch.outputs["name"], mount_path="/scratch")

    ft = finetune_whisper(
        manifest=manifest.output, base_model=base_model, epochs=epochs, learning_rate=1e-5
    ).after(stage)
    ft.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(4)
    ft.set_memory_limit("240G")
    kubernetes.mount_pvc(ft, pvc_name=scratch.outputs["name"], mount_path="/scratch")
    kubernetes.add_toleration(ft, key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")

    with dsl.ParallelFor(eval_sets) as eval_set:
        ev = evaluate_wer(checkpoint_uri=ft.output, eval_set=eval_set, lm_bucket=lm_bucket)
        ev.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(1)

    kubernetes.DeletePVC(pvc_name=scratch.outputs["name"]).after(ev)


if __name__ == "__main__":
    compiler.Compiler().compile(speech_asr, __file__.replace(".py", ".yaml"))
