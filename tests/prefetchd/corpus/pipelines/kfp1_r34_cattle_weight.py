# ruff: noqa
"""Live-weight estimation of feedlot cattle from overhead depth cameras (daily).

The day's manifest names the pens that uploaded depth clips; a scratch volume is created, each pen's
clips are synced onto it and the animals segmented (Mask2Former weights from the model bucket,
camera intrinsics from the shared calibration claim), a point-cloud regressor is fine-tuned on a
GPU against the weighbridge scale records, checked on the quarter's holdout, and copied to serving
when its error is low. A run report is posted however the run ends.
"""
import kfp
from kfp import dsl
from kfp.aws import use_aws_secret
from kfp.components import create_component_from_func

HERD = "ghcr.io/herdsight/depth-weight:1.8.3"
HERD_GPU = "ghcr.io/herdsight/depth-weight:1.8.3-cu121"


def segment_animals(pen: str, date: str):
    import json
    import os

    import s3fs

    from herdsight.segment import CattleSegmenter

    fs = s3fs.S3FileSystem()
    fs.get("s3://herdsight-models/segment/mask2former-cattle-v3/", "/tmp/seg/", recursive=True)
    with open(f"/calib/{pen}/intrinsics.json") as f:
        intr = json.load(f)
    seg = CattleSegmenter("/tmp/seg", intrinsics=intr)
    src = f"/scratch/{date}/{pen}/clips"
    dst = f"/scratch/{date}/{pen}/clouds"
    os.makedirs(dst, exist_ok=True)
    for name in sorted(os.listdir(src)):
        seg.to_point_clouds(os.path.join(src, name), dst)


def evaluate_holdout(model_uri: str) -> float:
    import pandas as pd

    from herdsight.infer import WeightRegressor

    holdout = pd.read_parquet("s3://herdsight-labels/holdout/2025-q3-weighbridge.parquet")
    reg = WeightRegressor.from_uri(model_uri)
    pred = reg.predict(holdout["cloud_uri"].tolist())
    return float((holdout["weight_kg"] - pred).abs().mean())


segment_op = create_component_from_func(segment_animals, base_image=HERD)
evaluate_op = create_component_from_func(evaluate_holdout, base_image=HERD)


@dsl.pipeline(name="cattle-weight-daily", description="Depth-camera live-weight regressor, daily retrain")
def cattle_weight(date: str = "2025-10-14", feedlot: str = "tx-panhandle-07", max_mae: float = 9.5):
    report = dsl.ContainerOp(
        name="report-run",
        image="curlimages/curl:8.8.0",
        command=["sh", "-c"],
        arguments=[
            'curl -sf -X POST "$HERD_WEBHOOK" -d "cattle-weight $0 $1 finished: {{workflow.status}}"',
            date, feedlot,
        ],
    )
    with dsl.ExitHandler(report):
        pens = dsl.ContainerOp(
            name="list-pens",
            image="ghcr.io/herdsight/cloud-tools:2025.09",
            command=["sh", "-c"],
            arguments=[
                "set -eu; mkdir -p /tmp/out; "
                'aws s3 cp "s3://herdsight-raw/depth/$0/$1/manifest.json" - | jq -c "[.pens[].id]" > /tmp/out/pens.json',
                feedlot, date,
            ],
            file_outputs={"pens": "/tmp/out/pens.json"},
        ).apply(use_aws_secret("herdsight-aws", "access_key_id", "secret_access_key"))

        scratch = dsl.VolumeOp(
            name="scratch",
            resource_name="depth-scratch",
            size="300Gi",
            modes=dsl.VOLUME_MODE_RWM,
            storage_class="efs-sc",
        )
        calib = dsl.PipelineVolume(pvc="feedlot-calibration")

        with dsl.ParallelFor(pens.outputs["pens"], parallelism=4) as pen:
            sync = dsl.ContainerOp(
                name="sync-pen",
                image="amazon/aws-cli:2.17.0",
                command=["aws", "s3", "sync"],
                arguments=[
                    f"s3://herdsight-raw/depth/{feedlot}/{date}/{pen}/",
                    f"/scratch/{date}/{pen}/clips/",
                    "--exclude", "*.tmp",
                    "--only-show-errors",
                ],
                pvolumes={"/scratch": scratch.volume},
            ).apply(use_aws_secret("herdsight-aws", "access_key_id", "secret_access_key"))
            sync.set_retry(3)

            seg = segment_op(pen=pen, date=date).add_pvolumes({"/scratch": scratch.volume, "/calib": calib}).after(sync)
            seg.apply(use_aws_secret("herdsight-aws", "access_key_id", "secret_access_key"))
            seg.set_memory_limit("24G")

        train = dsl.ContainerOp(
            name="train-regressor",
            image=HERD_GPU,
            command=["python", "-m", "herdsight.train"],
            arguments=[
                "--clouds-root", f"/scratch/{date}",
                "--scales", f"s3://herdsight-labels/scale-weights/{feedlot}/{date}.csv",
                "--pretrained", "s3://herdsight-models/pointnet2/base-v1/",
                "--epochs", "25",
                "--export-dir", f"s3://herdsight-models/weight-regressor/{date}/",
                "--metrics-file", "/tmp/metrics/mae.txt",
            ],
            file_outputs={"mae": "/tmp/metrics/mae.txt", "model_uri": "/tmp/metrics/model_uri.txt"},
        ).add_pvolumes({"/scratch": scratch.volume}).after(seg)
        train.apply(use_aws_secret("herdsight-aws", "access_key_id", "secret_access_key"))
        train.set_gpu_limit(1)
        train.add_node_selector_constraint("node.kubernetes.io/instance-type", "g5.2xlarge")

        ev = evaluate_op(model_uri=train.outputs["model_uri"])
        ev.apply(use_aws_secret("herdsight-aws", "access_key_id", "secret_access_key"))

        with dsl.Condition(ev.output < max_mae):
            publish = dsl.ContainerOp(
                name="publish-model",
                image="amazon/aws-cli:2.17.0",
                command=["aws", "s3", "cp", "--recursive"],
                arguments=[
                    f"s3://herdsight-models/weight-regressor/{date}/",
                    "s3://herdsight-serving/weight-regressor/current/",
                ],
            ).apply(use_aws_secret("herdsight-aws", "access_key_id", "secret_access_key"))


if __name__ == "__main__":
    kfp.compiler.Compiler().compile(cattle_weight, __file__.replace(".py", ".yaml"))
