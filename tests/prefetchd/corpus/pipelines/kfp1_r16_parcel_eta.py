# ruff: noqa
"""Parcel delivery ETA models, one per region, retrained monthly from hub scan events.

Logistics data platform team (still on KFP v1 SDK).
"""
import kfp
from kfp import dsl
from kfp.components import create_component_from_func
from kubernetes.client.models import V1EnvVar


def build_features(work_dir: str, holidays_uri: str, month: str):
    import glob
    import os

    import pandas as pd

    scans = pd.concat(
        pd.read_parquet(p) for p in sorted(glob.glob(os.path.join(work_dir, "scans", "*.parquet")))
    )
    holidays = pd.read_csv(holidays_uri, parse_dates=["date"])
    scans["scan_ts"] = pd.to_datetime(scans["scan_ts"], utc=True)
    legs = scans.sort_values(["parcel_id", "scan_ts"]).groupby("parcel_id")
    feats = legs.agg(
        first_scan=("scan_ts", "min"),
        delivered=("scan_ts", "max"),
        n_hubs=("hub_id", "nunique"),
        origin_zip=("zip", "first"),
        dest_zip=("zip", "last"),
        region=("region", "first"),
    ).reset_index()
    feats["eta_minutes"] = (feats["delivered"] - feats["first_scan"]).dt.total_seconds() / 60
    feats["is_holiday_week"] = feats["first_scan"].dt.to_period("W").isin(holidays["date"].dt.to_period("W"))
    feats.to_parquet(os.path.join(work_dir, f"features_{month}.parquet"), index=False)


def evaluate_fleet(model_bucket: str, month: str, regions: str, max_mae_minutes: float) -> str:
    import json

    import boto3

    s3 = boto3.client("s3")
    worst = 0.0
    for region in regions.split(","):
        s3.download_file(model_bucket, f"eta/{month}/{region}/metrics.json", f"/tmp/{region}.json")
        with open(f"/tmp/{region}.json") as fh:
            mae = json.load(fh)["holdout_mae_minutes"]
        print(region, mae)
        worst = max(worst, mae)
    return "pass" if worst <= max_mae_minutes else "fail"


build_features_op = create_component_from_func(
    build_features,
    base_image="python:3.10-slim",
    packages_to_install=["pandas==2.0.3", "pyarrow==14.0.2", "s3fs==2023.12.2"],
)
evaluate_fleet_op = create_component_from_func(
    evaluate_fleet,
    base_image="python:3.10-slim",
    packages_to_install=["boto3==1.34.20"],
)

REGIONS = [
    {"region": "northeast", "holdout": "s3://swiftline-ml/eta/holdout/northeast_2025-04.parquet"},
    {"region": "southeast", "holdout": "s3://swiftline-ml/eta/holdout/southeast_2025-04.parquet"},
    {"region": "midwest", "holdout": "s3://swiftline-ml/eta/holdout/midwest_2025-04.parquet"},
]


@dsl.pipeline(name="parcel-eta-regional", description="Monthly regional ETA retrain")
def parcel_eta(
    hub_scans_uri: str = "s3://swiftline-telematics/hub-scans/2025-05/",
    month: str = "2025-05",
    model_bucket: str = "swiftline-ml",
    max_mae_minutes: float = 42.0,
):
    report = dsl.ContainerOp(
        name="report-status",
        image="curlimages/curl:8.8.0",
        command=["sh", "-c"],
        arguments=[
            'curl -sf -X POST "$OPS_WEBHOOK" -d "parcel-eta {{workflow.name}} finished: {{workflow.status}}"'
        ],
    )
    report.container.add_env_variable(V1EnvVar(name="OPS_WEBHOOK", value="https://hooks.swiftline.internal/ml-ops"))

    with dsl.ExitHandler(report):
        ws = dsl.VolumeOp(
            name="scan-workspace",
            resource_name="scan-ws",
            size="50Gi",
            modes=dsl.VOLUME_MODE_RWO,
            storage_class="gp3",
        )

        sync = dsl.ContainerOp(
            name="sync-scans",
            image="amazon/aws-cli:2.17.0",
            command=["aws", "s3", "sync"],
            arguments=[hub_scans_uri, "/work/scans/", "--exclude", "*.tmp", "--only-show-errors"],
            pvolumes={"/work": ws.volume},
        )

        graph = dsl.ContainerOp(
            name="fetch-road-graph",
            image="peakcom/s5cmd:v2.2.2",
            arguments=[
                "--numworkers", "16",
                "cp", "s3://swiftline-geo/osm/road-graph/us-2025q2/*", "/work/graph/",
            ],
            pvolumes={"/work": ws.volume},
        )

        feats = build_features_op(
            work_dir="/work",
            holidays_uri="s3://swiftline-ref/calendar/holidays_us_2025.csv",
            month=month,
        ).add_pvolumes({"/work": sync.pvolume}).after(graph)
        feats.set_memory_limit("24G")

        with dsl.ParallelFor(REGIONS) as item:
            train = dsl.ContainerOp(
                name="train-region-model",
                image="ghcr.io/swiftline/eta-trainer:2.1.0",
                command=["python", "-m", "eta.train"],
                arguments=[
                    "--features", f"/work/features_{month}.parquet",
                    "--graph-dir", "/work/graph",
                    "--region", item.region,
                    "--holdout", item.holdout,
                    "--model-out", f"s3://{model_bucket}/eta/{month}/{item.region}/",
                ],
                pvolumes={"/work": feats.pvolume},
            )
            train.set_cpu_limit("8").set_memory_limit("32G")

        ev = evaluate_fleet_op(
            model_bucket=model_bucket,
            month=month,
            regions="northeast,southeast,midwest",
            max_mae_minutes=max_mae_minutes,
        ).after(train)

        with dsl.Condition(ev.output == "pass"):
            dsl.ContainerOp(
                name="promote-models",
                image="amazon/aws-cli:2.17.0",
                command=["sh", "-c"],
                arguments=[
                    f'aws s3 sync "s3://{model_bucket}/eta/{month}/" "s3://{model_bucket}/eta/production/" --delete'
                ],
            )


if __name__ == "__main__":
    kfp.compiler.Compiler().compile(parcel_eta, __file__.replace(".py", ".yaml"))
