# ruff: noqa
"""Weekly insect-trap counting for orchard pest pressure (agriculture).

Sticky-trap cameras upload images per farm. The pipeline reads the region's
farm list, syncs each farm's images onto a per-run volume (loop over that
list), snapshots the volume for audit, counts codling moth / navel orangeworm
per trap with a YOLO model, evaluates against agronomist labels, publishes the
counts and, when the model is good enough, rolls it out to the KServe endpoint
growers' apps call. Agronomists are told at the end whatever happened.
"""
import os

from kfp import compiler, components, dsl
from kubernetes.client import models as k8s

TOOLS = "ghcr.io/agrisense/field-ml:2025.07"

DETECT_YAML = """
name: Detect pests
description: Runs the trap detector over every image folder on the workspace volume.
inputs:
- {name: images_dir, type: String}
- {name: weights, type: String}
- {name: conf, type: Float, default: '0.35'}
- {name: counts_file, type: String}
implementation:
  container:
    image: ghcr.io/agrisense/pest-yolo:11.2-cu121
    command: [python, -m, pestcount.detect]
    args:
    - --images
    - {inputValue: images_dir}
    - --weights
    - {inputValue: weights}
    - --conf
    - {inputValue: conf}
    - --counts
    - {inputValue: counts_file}
"""


@dsl.pipeline(name="orchard-pest-traps", description="Weekly sticky-trap counting per region")
def orchard_pest_traps(
    season: str = "2025",
    region: str = "central-valley",
    trap_bucket: str = "agrisense-traps",
    weights_uri: str = "s3://agrisense-models/pest-yolo/v11/best.pt",
    min_map: float = 0.62,
):
    notify = dsl.ContainerOp(
        name="notify-agronomists",
        image="curlimages/curl:8.8.0",
        command=["sh", "-c"],
        arguments=[
            'curl -fsS -X POST -H "Content-Type: application/json" '
            '-d "{\\"text\\": \\"pest-trap run {{workflow.name}} finished: {{workflow.status}}\\"}" "$AGRO_WEBHOOK"'
        ],
    )
    notify.container.add_env_variable(
        k8s.V1EnvVar(
            name="AGRO_WEBHOOK",
            value_from=k8s.V1EnvVarSource(secret_key_ref=k8s.V1SecretKeySelector(name="agro-webhook", key="url")),
        )
    )

    with dsl.ExitHandler(notify):
        ws = dsl.VolumeOp(
            name="trap-workspace",
            resource_name="trap-ws",
            size="200Gi",
            modes=dsl.VOLUME_MODE_RWO,
            storage_class="gp3",
        )

        farms = dsl.ContainerOp(
            name="list-farms",
            image="python:3.11-slim",
            command=["python", "-c"],
            arguments=[
                "import json, sys, boto3\n"
                "region = sys.argv[1]\n"
                "obj = boto3.client('s3').get_object(Bucket='agrisense-config', Key=f'regions/{region}/farms.json')\n"
                "farms = [f['id'] for f in json.load(obj['Body']) if f['traps_active']]\n"
                "json.dump(farms, open('/tmp/farms.json', 'w'))\n",
                region,
            ],
            file_outputs={"farms": "/tmp/farms.json"},
        )

        with dsl.ParallelFor(farms.outputs["farms"], parallelism=3) as farm:
            sync = dsl.ContainerOp(
                name="sync-traps",
                image="amazon/aws-cli:2.17.0",
                command=["sh", "-c"],
                arguments=[
                    'aws s3 sync "s3://$0/$1/$2/$3/images/" "/ws/images/$3/" --exclude "*.json" --only-show-errors',
                    trap_bucket, season, region, farm,
                ],
                pvolumes={"/ws": ws.volume},
            )
            sync.set_retry(3)

        snap = dsl.VolumeSnapshotOp(
            name="snap-images",
            resource_name="trap-images-snap",
            volume=ws.volume,
            snapshot_class="ebs-csi-snapclass",
        ).after(sync)

        detect_op = components.load_component_from_text(DETECT_YAML)
        detect = detect_op(images_dir="/ws/images", weights=weights_uri, counts_file="/ws/counts/counts.csv").add_pvolumes({"/ws": ws.volume}).after(snap)
        detect.set_gpu_limit(1)
        detect.add_volume(k8s.V1Volume(name="dshm", empty_dir=k8s.V1EmptyDirVolumeSource(medium="Memory", size_limit="8Gi")))
        detect.container.add_volume_mount(k8s.V1VolumeMount(name="dshm", mount_path="/dev/shm"))
        detect.set_retry(2)

        evaluate = dsl.ContainerOp(
            name="evaluate-detector",
            image="ghcr.io/agrisense/pest-yolo:11.2-cu121",
            command=["python", "-m", "pestcount.evaluate"],
            arguments=[
                "--counts", "/ws/counts/counts.csv",
                "--labels", f"s3://agrisense-labels/holdout/{region}/{season}_trap_labels.csv",
                "--map-file", "/tmp/map.txt",
            ],
            file_outputs={"map": "/tmp/map.txt"},
            pvolumes={"/ws": ws.volume},
        ).after(detect)

        publish = dsl.ContainerOp(
            name="publish-counts",
            image="amazon/aws-cli:2.17.0",
            command=["sh", "-c"],
            arguments=[
                'aws s3 cp /ws/counts/counts.csv "s3://agrisense-reports/pest-counts/$0/$1/counts.csv"',
                season, region,
            ],
            pvolumes={"/ws": ws.volume},
        ).after(detect)

        with dsl.Condition(evaluate.outputs["map"] >= min_map, name="map-ok"):
            isvc = {
                "apiVersion": "serving.kserve.io/v1beta1",
                "kind": "InferenceService",
                "metadata": {"name": "pest-yolo", "namespace": "agri-serving"},
                "spec": {
                    "predictor": {
                        "model": {
                            "modelFormat": {"name": "pytorch"},
                            "storageUri": str(weights_uri),
                            "resources": {"limits": {"nvidia.com/gpu": "1"}},
                        }
                    }
                },
            }
            dsl.ResourceOp(
                name="deploy-pest-model",
                k8s_resource=isvc,
                action="apply",
                success_condition="status.url",
            ).after(publish)


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    compiler.Compiler().compile(orchard_pest_traps, os.path.join(here, "kfp1_r18_pest_traps.yaml"))
