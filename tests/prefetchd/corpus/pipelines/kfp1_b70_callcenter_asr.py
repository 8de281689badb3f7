# ruff: noqa
"""Call-centre ASR fine-tune and per-language WER evaluation (KFP v1, ContainerOp directly).

kfp 1.8.24 with pydantic<2, Python 3.11:  python kfp1_b70_callcenter_asr.py
"""
import kfp
from kfp import dsl
from kubernetes.client import V1EnvVar, V1EnvVarSource, V1SecretKeySelector

TESTSETS = [
    {"lang": "en", "testset": "s3://cc-eval/testsets/en/2024q2/", "max_wer": "0.12"},
    {"lang": "es", "testset": "s3://cc-eval/testsets/es/2024q2/", "max_wer": "0.15"},
    {"lang": "pt", "testset": "s3://cc-eval/testsets/pt-br/2024q2/", "max_wer": "0.18"},
]


@dsl.pipeline(name="callcenter-asr", description="Fine-tune Whisper on June calls, evaluate per language")
def callcenter_asr(
    audio_root: str = "s3://cc-audio-lake/calls/2024-06",
    lexicon_uri: str = "s3://cc-ref/lexicons/telecom_v2.txt",
    base_model: str = "s3://cc-models/base/whisper-small-telecom/",
):
    notify = dsl.ContainerOp(
        name="notify",
        image="curlimages/curl:8.8.0",
        command=["sh", "-c"],
        arguments=['curl -sf -X POST "$HOOK" -d "{\\"text\\": \\"callcenter-asr {{workflow.name}}: {{workflow.status}}\\"}"'],
    )
    notify.container.add_env_variable(
        V1EnvVar(name="HOOK", value_from=V1EnvVarSource(secret_key_ref=V1SecretKeySelector(name="cc-slack", key="webhook")))
    )

    with dsl.ExitHandler(notify):
        # lists the month's calls (names only, into a manifest) and fetches the speaker map
        manifest = dsl.ContainerOp(
            name="build-manifest",
            image="amazon/aws-cli:2.15.30",
            command=["sh", "-c"],
            arguments=[
                'aws s3 ls "$0/" --recursive | awk \'{print $4}\' | grep "\\.wav$" > /tmp/manifest.txt'
                ' && wc -l < /tmp/manifest.txt | tr -d " " > /tmp/count.txt'
                ' && aws s3 cp s3://cc-ref/speakers/speaker_map.csv /tmp/speaker_map.csv',
                audio_root,
            ],
            file_outputs={"manifest": "/tmp/manifest.txt", "count": "/tmp/count.txt",
                          "speakers": "/tmp/speaker_map.csv"},
        )

        feats = dsl.ContainerOp(
            name="extract-features",
            image="ghcr.io/cc-ml/asr-tools:1.9.0",
            command=["python", "-m", "cc_asr.features"],
            arguments=[
                "--audio", audio_root,
                "--file-list", manifest.outputs["manifest"],
                "--speakers", manifest.outputs["speakers"],
                "--out", "s3://cc-scratch/{{workflow.uid}}/feats/",
            ],
        )

        train = dsl.ContainerOp(
            name="finetune",
            image="ghcr.io/cc-ml/asr-train:1.9.0",
            command=["python", "-m", "cc_asr.finetune"],
            arguments=[
                "--init", base_model,
                "--feats", "s3://cc-scratch/{{workflow.uid}}/feats/",
                "--epochs", "6",
                "--out", "s3://cc-models/asr/{{workflow.uid}}/",
                "--ckpt-uri-file", "/tmp/ckpt_uri.txt",
            ],
            file_outputs={"ckpt": "/tmp/ckpt_uri.txt"},
        ).after(feats)
        train.set_gpu_limit(1)

        with dsl.ParallelFor(TESTSETS) as ts:
            dsl.ContainerOp(
                name="eval-wer",
                image="ghcr.io/cc-ml/asr-eval:1.9.0",
                command=["python", "-m", "cc_asr.wer"],
                arguments=[
                    "--model", train.outputs["ckpt"],
                    "--testset", ts.testset,
                    "--lang", ts.lang,
                    "--lexicon", lexicon_uri,
                    "--max-wer", ts.max_wer,
                    "--report", "/tmp/wer.json",
                ],
                file_outputs={"wer": "/tmp/wer.json"},
            )


if __name__ == "__main__":
    kfp.compiler.Compiler().compile(callcenter_asr, "kfp1_b70_callcenter_asr.yaml")
