# ruff: noqa
"""Rail track line-scan defect detection per line segment: ParallelFor over a list parameter, existing scratch PVC,
AWS secret, func component with an s3fs glob, Condition on its output, a report written then read downstream."""
import kfp
from kfp import dsl, onprem
from kfp.aws import use_aws_secret
from kfp.components import create_component_from_func
from kubernetes.client import V1EnvVar


def merge_detections(capture_date: str, min_severity: int) -> int:
    import json

    import pandas as pd
    import s3fs

    fs = s3fs.S3FileSystem()
    rows = []
    for key in fs.glob(f"railscan-detections/{capture_date}/*.jsonl"):
        with fs.open(key) as f:
            rows += [json.loads(line) for line in f]
    df = pd.DataFrame(rows)
    crit = df[df["severity"] >= min_severity]
    crit.to_parquet(f"s3://railscan-reports/{capture_date}/critical_defects.parquet")
    return len(crit)


merge_op = create_component_from_func(merge_detections, base_image="ghcr.io/railscan/py-geo:3.2.0",
                                      packages_to_install=[])


@dsl.pipeline(name="rail-linescan-defects", description="Detect rail surface defects per track segment")
def rail_defects(line_segments: list = ["nec-014", "nec-015", "nec-021"], capture_date: str = "2025-06-30",
                 image_bucket: str = "railscan-imagery",
                 model_uri: str = "s3://railscan-models/defect-yolo/v11/best.pt", min_severity: int = 3):
    with dsl.ParallelFor(line_segments) as seg:
        tile = dsl.ContainerOp(
            name="tile-images",
            image="ghcr.io/railscan/tiler:1.9.0",
            command=["bash", "-c"],
            arguments=["""set -euo pipefail
SEG="$0"; DATE="$1"; BUCKET="$2"
aws s3 sync "s3://${BUCKET}/linescan/${SEG}/${DATE}/" "/scratch/${SEG}/raw/" --only-show-errors
python -m tiler --in "/scratch/${SEG}/raw" --out "/scratch/${SEG}/tiles" --tile 1024
""", seg, capture_date, image_bucket],
        ).apply(onprem.mount_pvc("railscan-scratch", "scratch", "/scratch")).apply(use_aws_secret("railscan-aws"))
        det = dsl.ContainerOp(
            name="detect-defects",
            image="ghcr.io/railscan/defect-yolo:11.0.2-cu121",
            command=["python", "detect.py"],
            arguments=["--weights", model_uri, "--images", "/scratch/%s/tiles" % seg, "--conf", "0.35",
                       "--out", "s3://railscan-detections/%s/%s.jsonl" % (capture_date, seg)],
        ).after(tile).apply(onprem.mount_pvc("railscan-scratch", "scratch", "/scratch")).apply(use_aws_secret("railscan-aws"))
        det.set_gpu_limit(1)
    merge = merge_op(capture_date=capture_date, min_severity=min_severity).after(det).apply(use_aws_secret("railscan-aws"))
    with dsl.Condition(merge.output > 0, name="critical-found"):
        dispatch = dsl.ContainerOp(
            name="dispatch-work-orders",
            image="ghcr.io/railscan/maximo-client:0.7.1",
            command=["python", "-m", "maximo_client.dispatch"],
            arguments=["--defects", "s3://railscan-reports/%s/critical_defects.parquet" % capture_date,
                       "--priority", "P1"],
        ).apply(use_aws_secret("railscan-aws"))
        dispatch.container.add_env_variable(V1EnvVar(name="TRACK_GEOMETRY_URI",
                                                     value="s3://railscan-assets/track-geometry/nec_2025q2.gpkg"))
        dispatch.container.add_env_variable(V1EnvVar(name="MAXIMO_URL", value="https://maximo.railco.internal/api"))


if __name__ == "__main__":
    kfp.compiler.Compiler().compile(rail_defects, __file__.replace(".py", ".yaml"))
