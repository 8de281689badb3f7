# ruff: noqa
"""Vintage wine-quality regression: lab assays (GCS) + fermentation-tank sensors (MinIO)
merged on a workspace volume, a small model sweep, and optional promotion to prod."""
import kfp
from kfp import dsl
from kfp.components import create_component_from_func


def merge_features(vintage: str, min_days: int) -> str:
    import glob

    import pandas as pd

    assays = pd.concat(pd.read_csv(f) for f in glob.glob(f"/mnt/ws/raw/{vintage}/assays/*.csv"))
    sensors = pd.concat(pd.read_csv(f, parse_dates=["ts"]) for f in glob.glob("/mnt/ws/sensors/*.csv"))
    agg = (
        sensors.groupby("lot_id")
        .agg(temp_mean=("temp_c", "mean"), brix_slope=("brix", lambda s: s.diff().mean()), days=("ts", lambda t: (t.max() - t.min()).days))
        .reset_index()
    )
    agg = agg[agg["days"] >= min_days]
    df = assays.merge(agg, on="lot_id", how="inner")
    out = f"/mnt/ws/features/{vintage}.parquet"
    df.to_parquet(out, index=False)
    print(df.shape)
    return out


merge_features_op = create_component_from_func(
    merge_features, base_image="python:3.11-slim", packages_to_install=["pandas==2.2.2", "pyarrow==16.1.0"]
)

SWEEP = [
    {"algo": "xgboost", "max_depth": "6", "lr": "0.05"},
    {"algo": "lightgbm", "max_depth": "8", "lr": "0.03"},
    {"algo": "catboost", "max_depth": "6", "lr": "0.05"},
]


@dsl.pipeline(name="wine-quality-vintage", description="Predict sensory panel score from assays + fermentation telemetry")
def wine_quality(
    assay_bucket: str = "estate-winery-lab",
    vintage: str = "2024",
    models_bucket: str = "estate-winery-ml",
    min_fermentation_days: int = 10,
    promote: str = "false",
):
    ws = dsl.VolumeOp(
        name="wine-ws",
        resource_name="wine-ws",
        size="20Gi",
        modes=dsl.VOLUME_MODE_RWO,
        storage_class="standard-rwo",
    )

    lab = dsl.ContainerOp(
        name="download-lab-results",
        image="gcr.io/google.com/cloudsdktool/google-cloud-cli:489.0.0-slim",
        command=["bash", "-c"],
        arguments=[
            f"set -euo pipefail; mkdir -p /mnt/ws/raw/{vintage}; "
            f"gsutil -m cp -r gs://{assay_bucket}/assays/vintage={vintage}/ /mnt/ws/raw/{vintage}/assays/"
        ],
        pvolumes={"/mnt/ws": ws.volume},
    )

    sensors = dsl.ContainerOp(
        name="download-sensors",
        image="peakcom/s5cmd:v2.2.2",
        command=["/s5cmd"],
        arguments=[
            "--endpoint-url", "https://minio.cellar.estate.internal",
            "--numworkers", "32",
            "cp", "s3://cellar-telemetry/fermentation/2024/tank-*.csv", "/mnt/ws/sensors/",
        ],
        pvolumes={"/mnt/ws": ws.volume},
    )

    feats = merge_features_op(vintage=vintage, min_days=min_fermentation_days).add_pvolumes({"/mnt/ws": ws.volume})
    feats.after(lab, sensors)

    with dsl.ParallelFor(SWEEP) as cfg:
        train = dsl.ContainerOp(
            name="train-model",
            image="ghcr.io/estate-winery/quality-trainer:1.9.0",
            command=["python", "-m", "quality.train"],
            arguments=[
                "--features", feats.output,
                "--algo", cfg.algo,
                "--max-depth", cfg.max_depth,
                "--learning-rate", cfg.lr,
                "--target", "panel_score",
                "--output-uri", f"s3://{models_bucket}/quality/{vintage}/{cfg.algo}/",
            ],
            pvolumes={"/mnt/ws": ws.volume},
        )
        train.set_cpu_limit("4").set_memory_limit("8G")

    with dsl.Condition(promote == "true", name="promote-gate"):
        dsl.ContainerOp(
            name="promote-model",
            image="amazon/aws-cli:2.17.0",
            command=["sh", "-c"],
            arguments=[
                f"aws s3 cp s3://{models_bucket}/quality/{vintage}/xgboost/model.json "
                f"s3://{models_bucket}/registry/quality/prod/model.json "
                f"--metadata vintage={vintage}"
            ],
        ).after(train)


if __name__ == "__main__":
    kfp.compiler.Compiler().compile(wine_quality, __file__.replace(".py", ".yaml"))
