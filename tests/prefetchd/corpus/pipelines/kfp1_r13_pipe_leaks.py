# ruff: noqa
"""Weekly leak detection on acoustic logger recordings for one district metered area (DMA).

Kubeflow Pipelines v1 (kfp 1.8) - still running on the utility's on-prem KFP 1.8 install.
"""
import kfp
from kfp import dsl
from kfp.components import create_component_from_func
from kubernetes.client import V1EnvVar, V1EnvVarSource, V1SecretKeySelector

SENSOR_MODELS = [
    {"sensor": "hydrophone", "ckpt": "s3://aquanet-models/leaknet/hydrophone/v5/model.onnx"},
    {"sensor": "accelerometer", "ckpt": "s3://aquanet-models/leaknet/accel/v3/model.onnx"},
]


def compute_spectrograms(n_fft: int, hop: int):
    import glob
    import os

    import librosa
    import numpy as np

    os.makedirs("/scratch/spec", exist_ok=True)
    for wav in sorted(glob.glob("/scratch/wav/**/*.wav", recursive=True)):
        y, sr = librosa.load(wav, sr=8000)
        S = librosa.feature.melspectrogram(y=y, sr=sr, n_fft=n_fft, hop_length=hop, n_mels=64)
        out = os.path.join("/scratch/spec", os.path.basename(wav).replace(".wav", ".npy"))
        np.save(out, librosa.power_to_db(S, ref=np.max))


def merge_alerts(district: str, week: str, threshold: float) -> int:
    import glob

    import geopandas as gpd
    import pandas as pd
    import s3fs

    scores = pd.concat(pd.read_parquet(p) for p in glob.glob("/scratch/scores/*.parquet"))
    agg = scores.groupby("logger_id").agg(p_leak=("p_leak", "max"), n_sensors=("sensor", "nunique")).reset_index()
    hits = agg[agg.p_leak >= threshold]
    pipes = gpd.read_file("/scratch/gis/pipes.gpkg", layer="loggers")
    gdf = pipes.merge(hits, on="logger_id")
    fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": "https://minio.aquanet.internal:9000"})
    with fs.open(f"s3://aquanet-leak-alerts/{district}/{week}/alerts.geojson", "w") as f:
        f.write(gdf.to_json())
    return int(len(gdf))


spectrogram_op = create_component_from_func(
    compute_spectrograms,
    base_image="python:3.10-slim",
    packages_to_install=["librosa==0.10.2", "numpy==1.26.4", "soundfile==0.12.1"],
)
merge_alerts_op = create_component_from_func(
    merge_alerts,
    base_image="ghcr.io/osgeo/gdal:ubuntu-small-3.9.0",
    packages_to_install=["geopandas==0.14.4", "pandas==2.2.2", "pyarrow==16.1.0", "s3fs==2024.6.1"],
)


@dsl.pipeline(name="dma-leak-detection", description="Acoustic logger leak scoring per DMA")
def leak_pipeline(
    utility_bucket: str = "aquanet-acoustics",
    district: str = "dma-017",
    week: str = "2025-W22",
    threshold: float = 0.85,
):
    notify = dsl.ContainerOp(
        name="notify-oncall",
        image="curlimages/curl:8.8.0",
        command=["sh", "-c"],
        arguments=[
            'curl -sf -X POST -H "Content-Type: application/json" '
            '-d "{\\"text\\": \\"leak scoring %s %s finished: {{workflow.status}}\\"}" "$TEAMS_WEBHOOK"'
            % (district, week)
        ],
    )
    notify.container.add_env_variable(
        V1EnvVar(
            name="TEAMS_WEBHOOK",
            value_from=V1EnvVarSource(secret_key_ref=V1SecretKeySelector(name="oncall-teams-webhook", key="url")),
        )
    )

    with dsl.ExitHandler(notify):
        scratch = dsl.VolumeOp(
            name="create-scratch",
            resource_name="leak-scratch",
            size="80Gi",
            modes=dsl.VOLUME_MODE_RWO,
            storage_class="longhorn",
        )

        pull = dsl.ContainerOp(
            name="pull-recordings",
            image="peakcom/s5cmd:v2.2.2",
            command=["/s5cmd"],
            arguments=[
                "--endpoint-url", "https://minio.aquanet.internal:9000",
                "--numworkers", "64",
                "cp", "s3://%s/loggers/%s/%s/*.wav" % (utility_bucket, district, week),
                "/scratch/wav/",
            ],
            pvolumes={"/scratch": scratch.volume},
        )
        pull.set_retry(3)

        gis = dsl.ContainerOp(
            name="pull-network-gis",
            image="rclone/rclone:1.67",
            command=["rclone"],
            arguments=[
                "copyto",
                "gis:aquanet-gis/networks/%s/pipes.gpkg" % district,
                "/scratch/gis/pipes.gpkg",
                "--s3-no-check-bucket",
            ],
            pvolumes={"/scratch": scratch.volume},
        )
        gis.add_env_variable(V1EnvVar(name="RCLONE_CONFIG_GIS_TYPE", value="s3"))
        gis.add_env_variable(V1EnvVar(name="RCLONE_CONFIG_GIS_PROVIDER", value="Minio"))
        gis.add_env_variable(V1EnvVar(name="RCLONE_CONFIG_GIS_ENV_AUTH", value="true"))
        gis.add_env_variable(
            V1EnvVar(name="RCLONE_CONFIG_GIS_ENDPOINT", value="https://minio.aquanet.internal:9000")
        )

        spec = spectrogram_op(n_fft=1024, hop=256).add_pvolumes({"/scratch": pull.pvolume})
        spec.set_display_name("mel-spectrograms")

        with dsl.ParallelFor(SENSOR_MODELS) as item:
            score = dsl.ContainerOp(
                name="score-leaks",
                image="registry.aquanet.internal/ml/leaknet-infer:5.2.0",
                command=["python", "-m", "leaknet.score"],
                arguments=[
                    "--sensor", item.sensor,
                    "--model", item.ckpt,
                    "--spec-dir", "/scratch/spec",
                    "--out", "/scratch/scores/%s.parquet" % item.sensor,
                ],
                pvolumes={"/scratch": spec.pvolume},
            )
            score.set_cpu_limit("4").set_memory_limit("8G")

        merge = merge_alerts_op(district=district, week=week, threshold=threshold)
        merge.add_pvolumes({"/scratch": scratch.volume}).after(score, gis)

        with dsl.Condition(merge.output > 0, name="has-alerts"):
            wo = dsl.ContainerOp(
                name="create-work-orders",
                image="registry.aquanet.internal/ops/maximo-sync:1.9.1",
                command=["python", "-m", "maximo_sync.from_alerts"],
                arguments=[
                    "--alerts", "s3://aquanet-leak-alerts/%s/%s/alerts.geojson" % (district, week),
                    "--work-type", "LEAK-INVESTIGATE",
                    "--priority", "2",
                ],
            )
            wo.add_env_variable(V1EnvVar(name="AWS_ENDPOINT_URL", value="https://minio.aquanet.internal:9000"))
            wo.add_env_variable(
                V1EnvVar(
                    name="MAXIMO_API_KEY",
                    value_from=V1EnvVarSource(secret_key_ref=V1SecretKeySelector(name="maximo-api", key="apikey")),
                )
            )


if __name__ == "__main__":
    kfp.compiler.Compiler().compile(leak_pipeline, __file__.replace(".py", ".yaml"))
