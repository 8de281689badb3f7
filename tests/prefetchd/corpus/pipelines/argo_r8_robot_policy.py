# ruff: noqa
"""RoboForge nightly imitation-learning refresh for the franka-kitchen cell.

New teleop episodes (those with a _DONE marker) are converted to LeRobot
format on the shared datasets PVC, a diffusion policy is fine-tuned from the
pretrained checkpoint while normalisation stats are recomputed, and the policy
is evaluated in simulation when training converged.
"""
from hera.workflows import (
    Container,
    CronWorkflow,
    ExistingVolume,
    Parameter,
    S3Artifact,
    Steps,
    models as m,
    script,
)

LEROBOT = "ghcr.io/roboforge/lerobot-train:0.6.2-cu121"

datasets_vol = ExistingVolume(name="datasets", claim_name="roboforge-datasets", mount_path="/datasets")


@script(image="python:3.11-slim", inputs=[Parameter(name="robot"), Parameter(name="since_hours", value="24")])
def list_episodes(robot: str, since_hours: str):
    import datetime
    import json

    import boto3

    s3 = boto3.client("s3")
    cutoff = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=int(since_hours))
    episodes = []
    paginator = s3.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket="roboforge-teleop", Prefix=f"episodes/{robot}/"):
        for obj in page.get("Contents", []):
            if obj["Key"].endswith("/_DONE") and obj["LastModified"] > cutoff:
                episodes.append(obj["Key"].split("/")[-2])
    print(json.dumps(sorted(episodes)))


@script(
    image="python:3.11-slim",
    inputs=[Parameter(name="robot")],
    volume_mounts=[m.VolumeMount(name="datasets", mount_path="/datasets", sub_path="lerobot")],
)
def compute_stats(robot: str):
    import glob
    import json

    import numpy as np
    import pyarrow.parquet as pq

    root = f"/datasets/{robot}"
    acts = [pq.read_table(p, columns=["action"]).column("action").to_numpy() for p in glob.glob(root + "/data/*.parquet")]
    a = np.concatenate([np.stack(x) for x in acts])
    json.dump({"mean": a.mean(0).tolist(), "std": a.std(0).tolist()}, open(root + "/meta/stats.json", "w"))


with CronWorkflow(
    name="franka-kitchen-nightly",
    schedule="30 2 * * *",
    timezone="Europe/Berlin",
    concurrency_policy="Forbid",
    starting_deadline_seconds=600,
    entrypoint="nightly",
    on_exit="post-status",
    arguments=[
        Parameter(name="robot", value="franka-kitchen"),
        Parameter(name="policy", value="diffusion"),
        Parameter(name="max_val_loss", value="0.045"),
    ],
    volumes=[datasets_vol],
    service_account_name="roboforge-ml",
) as cw:
    convert = Container(
        name="convert-episode",
        image="ghcr.io/roboforge/rosbag-tools:1.4.0",
        inputs=[Parameter(name="episode")],
        command=["bash", "-c"],
        args=[
            """set -euo pipefail
ROBOT="{{workflow.parameters.robot}}"
EP="{{inputs.parameters.episode}}"
SRC="s3://roboforge-teleop/episodes/${ROBOT}/${EP}"
aws s3 cp --recursive "${SRC}/" "/tmp/raw/${EP}/" --exclude '_DONE'
rosbag2lerobot --bag "/tmp/raw/${EP}/episode.mcap" \\
  --cameras wrist,overhead --fps 30 \\
  --out "/datasets/${ROBOT}"
"""
        ],
        volume_mounts=[m.VolumeMount(name="datasets", mount_path="/datasets", sub_path="lerobot")],
        retry_strategy=m.RetryStrategy(limit="2", retry_policy="OnError"),
    )

    train = Container(
        name="train-policy",
        image=LEROBOT,
        command=["bash", "-c"],
        args=[
            """set -euo pipefail
python -m lerobot.scripts.train \\
  --policy.type={{workflow.parameters.policy}} \\
  --policy.pretrained_path=/ckpt/octo-base \\
  --dataset.root=/datasets/{{workflow.parameters.robot}} \\
  --output_dir=/tmp/out \\
  --steps=20000 --batch_size=64
python -c "import json;print(json.load(open('/tmp/out/eval_info.json'))['val_loss'])" > /tmp/val_loss
aws s3 sync /tmp/out/checkpoints/last/ "s3://roboforge-policies/{{workflow.parameters.robot}}/{{workflow.parameters.policy}}/{{workflow.creationTimestamp.Y}}{{workflow.creationTimestamp.m}}{{workflow.creationTimestamp.d}}/"
"""
        ],
        inputs=[
            S3Artifact(
                name="pretrained",
                path="/ckpt/octo-base",
                bucket="roboforge-models",
                key="pretrained/octo-base-1.5/",
                endpoint="s3.eu-central-1.amazonaws.com",
                region="eu-central-1",
            )
        ],
        outputs=[Parameter(name="val_loss", value_from=m.ValueFrom(path="/tmp/val_loss"))],
        volume_mounts=[m.VolumeMount(name="datasets", mount_path="/datasets", sub_path="lerobot", read_only=True)],
        resources=m.ResourceRequirements(limits={"nvidia.com/gpu": "2"}),
    )

    sim_eval = Container(
        name="sim-eval",
        image="ghcr.io/roboforge/mujoco-eval:2.1.0",
        command=["bash", "-c"],
        args=[
            """set -euo pipefail
gsutil -m rsync -r gs://roboforge-sim-assets/mujoco/kitchen_v2/ /tmp/assets/
POLICY_URI="s3://roboforge-policies/{{workflow.parameters.robot}}/{{workflow.parameters.policy}}/{{workflow.creationTimestamp.Y}}{{workflow.creationTimestamp.m}}{{workflow.creationTimestamp.d}}/"
aws s3 sync "${POLICY_URI}" /tmp/policy/
python -m roboforge.sim_eval --assets /tmp/assets --policy /tmp/policy --episodes 200 \\
  --report "${POLICY_URI}sim_report.json"
"""
        ],
        resources=m.ResourceRequirements(limits={"nvidia.com/gpu": "1"}),
    )

    post_status = Container(
        name="post-status",
        image="curlimages/curl:8.8.0",
        command=["sh", "-c"],
        args=[
            'curl -sf -X POST "https://status.roboforge.internal/api/runs" '
            '-d "workflow={{workflow.name}}&status={{workflow.status}}"'
        ],
    )

    with Steps(name="nightly") as s:
        eps = list_episodes(name="list-episodes", arguments={"robot": "{{workflow.parameters.robot}}"})
        convert(
            name="convert-episode",
            arguments={"episode": "{{item}}"},
            with_param=eps.result,
        )
        with s.parallel():
            train(name="train-policy")
            compute_stats(name="compute-stats", arguments={"robot": "{{workflow.parameters.robot}}"})
        sim_eval(
            name="sim-eval",
            when="{{steps.train-policy.outputs.parameters.val_loss}} < {{workflow.parameters.max_val_loss}}",
        )


if __name__ == "__main__":
    with open(__file__.replace(".py", ".yaml"), "w") as f:
        f.write(cw.to_yaml())
