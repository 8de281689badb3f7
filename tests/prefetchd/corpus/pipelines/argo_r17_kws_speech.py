# ruff: noqa
"""Nightly keyword-spotting (wake word) retrain.

Pulls the newest labelled clips per locale and the noise/RIR augmentation pack
onto the shared corpus volume, extracts log-mel features, fine-tunes the
conformer KWS model from the current base, measures false accepts per hour on
the 24h negative set and promotes the model when it is under budget.
"""
from hera.workflows import (
    Container,
    CronWorkflow,
    Parallel,
    Parameter,
    S3Artifact,
    Script,
    Steps,
    models as m,
)

LOCALES = ["en-US", "de-DE", "ja-JP"]
CORPUS_MOUNT = m.VolumeMount(name="kws-corpus", mount_path="/corpus")

SYNC_CLIPS_SH = """set -euo pipefail
LOCALE="{{inputs.parameters.locale}}"
SRC="s3://voxwake-clips/keyword/${LOCALE}/snapshot={{inputs.parameters.snapshot}}/"
DST="/corpus/clips/${LOCALE}/"
mkdir -p "$DST"
aws s3 sync "$SRC" "$DST" --only-show-errors --exclude "*.txt"
echo "synced $(find "$DST" -name '*.wav' | wc -l) clips for ${LOCALE}"
"""

FEATURIZE_PY = """import glob, os
import torch, torchaudio

mel = torchaudio.transforms.MelSpectrogram(sample_rate=16000, n_fft=480, hop_length=160, n_mels=40)
for wav in glob.glob("/corpus/clips/*/*.wav"):
    x, sr = torchaudio.load(wav)
    feats = torch.log(mel(x) + 1e-6)
    out = wav.replace("/corpus/clips/", "/corpus/features/").replace(".wav", ".pt")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    torch.save(feats, out)
"""

EVAL_FAR_PY = """import tarfile
import boto3
import torch
import torchaudio
from kws.infer import Detector

s3 = boto3.client("s3")
s3.download_file("voxwake-models", "kws-conformer/nightly/{{inputs.parameters.snapshot}}/model.pt", "/tmp/model.pt")
s3.download_file("voxwake-eval", "far/negatives_24h.tar", "/tmp/negatives.tar")
det = Detector(torch.jit.load("/tmp/model.pt"), threshold=0.85)

false_accepts, seconds = 0, 0.0
with tarfile.open("/tmp/negatives.tar") as tar:
    for member in tar:
        if not member.name.endswith(".wav"):
            continue
        wav, sr = torchaudio.load(tar.extractfile(member))
        false_accepts += det.count_triggers(wav, sr)
        seconds += wav.shape[-1] / sr
far = false_accepts / (seconds / 3600)
print("pass" if far <= float("{{inputs.parameters.max-far}}") else "fail")
"""

with CronWorkflow(
    name="kws-nightly-retrain",
    schedule="0 3 * * *",
    timezone="Europe/Berlin",
    concurrency_policy="Forbid",
    starting_deadline_seconds=600,
    entrypoint="nightly",
    on_exit="notify",
    service_account_name="kws-trainer",
    arguments=[Parameter(name="snapshot", value="2025-06-15")],
    volumes=[
        m.Volume(
            name="kws-corpus",
            persistent_volume_claim=m.PersistentVolumeClaimVolumeSource(claim_name="kws-corpus"),
        )
    ],
) as w:
    sync_clips = Container(
        name="sync-clips",
        image="amazon/aws-cli:2.17.0",
        inputs=[Parameter(name="locale"), Parameter(name="snapshot")],
        command=["bash", "-c"],
        args=[SYNC_CLIPS_SH],
        volume_mounts=[CORPUS_MOUNT],
    )

    fetch_noise = Container(
        name="fetch-noise",
        image="alpine:3.20",
        inputs=[
            S3Artifact(
                name="noise-pack",
                path="/tmp/noise.tar.gz",
                bucket="voxwake-augment",
                key="noise/musan-rirs-v2.tar.gz",
                endpoint="s3.amazonaws.com",
                archive=m.ArchiveStrategy(none=m.NoneStrategy()),
            )
        ],
        command=["sh", "-c"],
        args=["mkdir -p /corpus/noise && tar -xzf /tmp/noise.tar.gz -C /corpus/noise"],
        volume_mounts=[CORPUS_MOUNT],
    )

    featurize = Script(
        name="featurize",
        image="ghcr.io/voxwake/audio-py:2.3.1",
        command=["python"],
        source=FEATURIZE_PY,
        volume_mounts=[CORPUS_MOUNT],
    )

    train_kws = Container(
        name="train-kws",
        image="ghcr.io/voxwake/kws-train:5.1.0-cu121",
        inputs=[Parameter(name="snapshot")],
        command=["python", "-m", "kws.train"],
        args=[
            "--train-data", "/corpus/features",
            "--noise-dir", "/corpus/noise",
            "--init-weights", "s3://voxwake-models/kws-conformer/base-2025-03/weights.pt",
            "--output", "s3://voxwake-models/kws-conformer/nightly/{{inputs.parameters.snapshot}}/",
            "--epochs", "12",
        ],
        volume_mounts=[m.VolumeMount(name="kws-corpus", mount_path="/corpus", read_only=True)],
        resources=m.ResourceRequirements(limits={"nvidia.com/gpu": "1"}),
    )

    eval_far = Script(
        name="eval-far",
        image="ghcr.io/voxwake/kws-train:5.1.0-cu121",
        inputs=[Parameter(name="snapshot"), Parameter(name="max-far", value="0.5")],
        command=["python"],
        source=EVAL_FAR_PY,
    )

    promote = Container(
        name="promote",
        image="amazon/aws-cli:2.17.0",
        inputs=[Parameter(name="snapshot")],
        command=["aws", "s3", "cp"],
        args=[
            "s3://voxwake-models/kws-conformer/nightly/{{inputs.parameters.snapshot}}/",
            "s3://voxwake-models/kws-conformer/production/",
            "--recursive",
        ],
    )

    notify = Container(
        name="notify",
        image="curlimages/curl:8.8.0",
        command=["sh", "-c"],
        args=['curl -sf -X POST -d "kws-nightly {{workflow.name}}: {{workflow.status}}" "$SLACK_URL"'],
        env=[
            m.EnvVar(
                name="SLACK_URL",
                value_from=m.EnvVarSource(secret_key_ref=m.SecretKeySelector(name="voxwake-slack", key="url")),
            )
        ],
    )

    with Steps(name="nightly"):
        with Parallel():
            sync_clips(
                name="sync-clips",
                arguments={"locale": "{{item}}", "snapshot": "{{workflow.parameters.snapshot}}"},
                with_items=LOCALES,
            )
            fetch_noise(name="fetch-noise")
        featurize(name="featurize")
        train_kws(name="train-kws", arguments={"snapshot": "{{workflow.parameters.snapshot}}"})
        eval_far(name="eval-far", arguments={"snapshot": "{{workflow.parameters.snapshot}}"})
        promote(
            name="promote",
            arguments={"snapshot": "{{workflow.parameters.snapshot}}"},
            when="{{steps.eval-far.outputs.result}} == pass",
        )

if __name__ == "__main__":
    with open(__file__.replace(".py", ".yaml"), "w") as f:
        f.write(w.to_yaml())
