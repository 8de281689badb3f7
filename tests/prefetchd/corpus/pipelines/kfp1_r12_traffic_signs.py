# ruff: noqa
"""GTSRB traffic-sign detector (YOLOv8s) for the ADAS perception stack.

Reusable components are kept as YAML specs in the team's component catalog
and loaded inline here; a per-run workspace PVC carries raw images, the YOLO
conversion and the training run directory between steps.
"""
import kfp
from kfp import components, dsl
from kfp.components import create_component_from_func
from kubernetes.client import V1EnvVar, V1EnvVarSource, V1SecretKeySelector

s3_sync_op = components.load_component_from_text(
    """
name: S3 sync
description: Mirror a prefix between S3 and a mounted path with aws s3 sync.
inputs:
- {name: source, type: String}
- {name: destination, type: String}
- {name: extra_args, type: String, default: "--only-show-errors --no-progress"}
implementation:
  container:
    image: amazon/aws-cli:2.17.20
    command: [sh, -ec]
    args:
    - aws s3 sync "$0" "$1" $2
    - {inputValue: source}
    - {inputValue: destination}
    - {inputValue: extra_args}
"""
)

convert_op = components.load_component_from_text(
    """
name: GTSRB to YOLO
description: Convert GTSRB ppm + CSV annotations into a YOLO detection dataset.
inputs:
- {name: train_dir, type: String}
- {name: test_dir, type: String}
- {name: class_map_uri, type: String}
- {name: out_dir, type: String}
- {name: val_fraction, type: Float, default: "0.1"}
outputs:
- {name: data_yaml, type: String}
implementation:
  container:
    image: ghcr.io/acme-adas/tsr-tools:0.9.2
    command: [python, -m, tsr_tools.gtsrb_to_yolo]
    args:
    - --train-dir
    - {inputValue: train_dir}
    - --test-dir
    - {inputValue: test_dir}
    - --class-map
    - {inputValue: class_map_uri}
    - --out-dir
    - {inputValue: out_dir}
    - --val-fraction
    - {inputValue: val_fraction}
    - --data-yaml-path-out
    - {outputPath: data_yaml}
"""
)

train_op = components.load_component_from_text(
    """
name: Train YOLO
description: Ultralytics detection training, writes run dir to the workspace.
inputs:
- {name: data_yaml, type: String}
- {name: base_weights, type: String, default: yolov8s.pt}
- {name: epochs, type: Integer, default: "100"}
- {name: imgsz, type: Integer, default: "640"}
- {name: project_dir, type: String}
outputs:
- {name: map50_95, type: Float}
implementation:
  container:
    image: ultralytics/ultralytics:8.3.40
    command: [python, /opt/acme/train_yolo.py]
    args:
    - --data
    - {inputValue: data_yaml}
    - --model
    - {inputValue: base_weights}
    - --epochs
    - {inputValue: epochs}
    - --imgsz
    - {inputValue: imgsz}
    - --project
    - {inputValue: project_dir}
    - --name
    - tsr
    - --map-out
    - {outputPath: map50_95}
"""
)


def evaluate_external(eval_set: str, eval_uri: str, weights: str) -> float:
    """Download an external sign benchmark and run ultralytics val on it."""
    import os
    import subprocess
    from urllib.parse import urlparse

    import boto3

    u = urlparse(eval_uri)
    s3 = boto3.client("s3")
    local = f"/tmp/{eval_set}"
    paginator = s3.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=u.netloc, Prefix=u.path.lstrip("/")):
        for obj in page.get("Contents", []):
            dest = os.path.join(local, os.path.relpath(obj["Key"], u.path.lstrip("/")))
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            s3.download_file(u.netloc, obj["Key"], dest)

    from ultralytics import YOLO

    metrics = YOLO(weights).val(data=os.path.join(local, "data.yaml"), split="test", imgsz=640)
    print(eval_set, metrics.box.map)
    return float(metrics.box.map)


evaluate_op = create_component_from_func(
    evaluate_external,
    base_image="ultralytics/ultralytics:8.3.40",
    packages_to_install=["boto3==1.34.144"],
)

EVAL_SETS = [
    {"eval_set": "gtsdb", "uri": "s3://acme-adas-data/benchmarks/gtsdb/test/"},
    {"eval_set": "mapillary-tsd", "uri": "s3://acme-adas-data/benchmarks/mapillary-tsd/val/"},
    {"eval_set": "dashcam-eu-2025q1", "uri": "s3://acme-adas-data/fleet-captures/2025q1/signs-labelled/"},
]


@dsl.pipeline(name="gtsrb-yolov8-tsr", description="Traffic-sign recognition detector training")
def gtsrb_yolov8_tsr(
    gtsrb_uri: str = "s3://acme-adas-data/gtsrb/v1/",
    model_out: str = "s3://acme-adas-models/tsr/yolov8s/2025-06/",
    epochs: int = 120,
):
    notify = dsl.ContainerOp(
        name="notify-teams",
        image="curlimages/curl:8.8.0",
        command=["sh", "-c"],
        arguments=[
            'curl -sf -X POST -H "Content-Type: application/json" '
            '-d "{\\"text\\": \\"gtsrb-yolov8-tsr {{workflow.name}} finished: {{workflow.status}}\\"}" "$TEAMS_WEBHOOK"'
        ],
    )
    notify.container.add_env_variable(
        V1EnvVar(
            name="TEAMS_WEBHOOK",
            value_from=V1EnvVarSource(secret_key_ref=V1SecretKeySelector(name="adas-teams-webhook", key="url")),
        )
    )

    with dsl.ExitHandler(notify):
        ws = dsl.VolumeOp(
            name="create-workspace",
            resource_name="gtsrb-ws",
            size="120Gi",
            storage_class="gp3",
            modes=dsl.VOLUME_MODE_RWO,
        )

        pull_train = s3_sync_op(source=f"{gtsrb_uri}Final_Training/Images/", destination="/ws/raw/train/")
        pull_train.add_pvolumes({"/ws": ws.volume})
        pull_test = s3_sync_op(source=f"{gtsrb_uri}Final_Test/", destination="/ws/raw/test/")
        pull_test.add_pvolumes({"/ws": ws.volume})

        conv = convert_op(
            train_dir="/ws/raw/train",
            test_dir="/ws/raw/test",
            class_map_uri="s3://acme-adas-data/gtsrb/v1/signnames.csv",
            out_dir="/ws/yolo",
        ).after(pull_train, pull_test)
        conv.add_pvolumes({"/ws": ws.volume})

        train = train_op(data_yaml=conv.outputs["data_yaml"], epochs=epochs, project_dir="/ws/runs")
        train.add_pvolumes({"/ws": ws.volume})
        train.set_gpu_limit(1)
        train.add_node_selector_constraint("node.kubernetes.io/instance-type", "g5.2xlarge")
        train.set_retry(2, policy="OnFailure")

        with dsl.ParallelFor(EVAL_SETS, parallelism=2) as item:
            ev = evaluate_op(eval_set=item.eval_set, eval_uri=item.uri, weights="/ws/runs/tsr/weights/best.pt").after(train)
            ev.add_pvolumes({"/ws": ws.volume})

        push = s3_sync_op(source="/ws/runs/tsr/weights/", destination=model_out).after(train)
        push.add_pvolumes({"/ws": ws.volume})


if __name__ == "__main__":
    kfp.compiler.Compiler().compile(gtsrb_yolov8_tsr, __file__.replace(".py", ".yaml"))
