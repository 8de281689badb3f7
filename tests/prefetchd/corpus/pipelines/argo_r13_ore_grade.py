# ruff: noqa
"""Nightly ore-grade regression from drill-core hyperspectral scans (Cu %), one open pit.

CronWorkflow: the core-scanner writes ENVI cubes to an NFS share; assays arrive from the lab in S3.
"""
from hera.workflows import (
    Container,
    CronWorkflow,
    ExistingVolume,
    Parameter,
    RetryStrategy,
    Script,
    Step,
    Steps,
    models as m,
    script,
)

scans = ExistingVolume(
    name="core-scans",
    claim_name="core-scans-nfs",
    mount_path="/scans",
    sub_path="hyperspectral/pit-3",
    read_only=True,
)
work = ExistingVolume(name="work", claim_name="ore-grade-work", mount_path="/work")

sync_assays = Container(
    name="sync-assays",
    image="amazon/aws-cli:2.17.0",
    command=["sh", "-c"],
    args=[
        "set -e; mkdir -p /work/{{workflow.parameters.pit}}/assays && "
        "aws s3 cp {{workflow.parameters.assay_uri}} /work/{{workflow.parameters.pit}}/assays/assays.csv && "
        "aws s3 cp s3://ridgeline-geo/drillholes/{{workflow.parameters.pit}}/collars_surveys.csv "
        "/work/{{workflow.parameters.pit}}/assays/collars_surveys.csv"
    ],
    volume_mounts=[m.VolumeMount(name="work", mount_path="/work")],
    retry_strategy=RetryStrategy(limit=3, retry_policy="OnFailure", backoff=m.Backoff(duration="30s", factor="2")),
)


@script(image="python:3.11-slim", volume_mounts=[m.VolumeMount(name="core-scans", mount_path="/scans", sub_path="hyperspectral/pit-3", read_only=True)])
def count_new_scans(since_days: int):
    import pathlib
    import time

    cutoff = time.time() - since_days * 86400
    hdrs = [p for p in pathlib.Path("/scans").rglob("*.hdr") if p.stat().st_mtime >= cutoff]
    print(len(hdrs))


build_dataset = Container(
    name="build-dataset",
    image="ghcr.io/ridgeline-geo/spectral-features:0.9.3",
    command=["python", "-m", "corefeat.build"],
    args=[
        "--cubes", "/scans",
        "--assays", "/work/{{workflow.parameters.pit}}/assays/assays.csv",
        "--collars", "/work/{{workflow.parameters.pit}}/assays/collars_surveys.csv",
        "--mineral-library", "s3://ridgeline-geo-ref/usgs-splib07/swir_convolved.parquet",
        "--composite-m", "2.0",
        "--out", "/work/{{workflow.parameters.pit}}/dataset.parquet",
    ],
    volume_mounts=[
        m.VolumeMount(name="core-scans", mount_path="/scans", sub_path="hyperspectral/pit-3", read_only=True),
        m.VolumeMount(name="work", mount_path="/work"),
    ],
    resources=m.ResourceRequirements(requests={"cpu": "8", "memory": "32Gi"}),
)

train = Container(
    name="train",
    image="ghcr.io/ridgeline-geo/ore-grade:2.4.0",
    command=["python", "-m", "oregrade.train"],
    args=[
        "--dataset", "/work/{{workflow.parameters.pit}}/dataset.parquet",
        "--target", "cu_pct",
        "--model", "xgboost",
        "--cv", "group-kfold-by-hole",
        "--output-uri", "s3://ridgeline-geo-models/ore-grade/{{workflow.parameters.pit}}/nightly/",
        "--metrics-file", "/tmp/r2.txt",
    ],
    volume_mounts=[m.VolumeMount(name="work", mount_path="/work", read_only=True)],
    outputs=[Parameter(name="r2", value_from=m.ValueFrom(path="/tmp/r2.txt"))],
    retry_strategy=RetryStrategy(limit=2, retry_policy="OnError"),
)

publish_block_model = Container(
    name="publish-block-model",
    image="ghcr.io/ridgeline-geo/ore-grade:2.4.0",
    command=["python", "-m", "oregrade.krige_blocks"],
    args=[
        "--model-uri", "s3://ridgeline-geo-models/ore-grade/{{workflow.parameters.pit}}/nightly/",
        "--blocks", "s3://ridgeline-geo/block-models/{{workflow.parameters.pit}}/grid_10m.csv",
        "--out", "s3://ridgeline-geo-products/block-models/{{workflow.parameters.pit}}/cu_graded_10m.csv",
    ],
)


def notify():
    import json
    import os
    import urllib.request

    text = f"ore-grade nightly {os.environ['PIT']}: {os.environ['WF_STATUS']} ({os.environ['WF_NAME']})"
    req = urllib.request.Request(
        os.environ["SLACK_WEBHOOK"], data=json.dumps({"text": text}).encode(), headers={"Content-Type": "application/json"}
    )
    urllib.request.urlopen(req, timeout=10)


with CronWorkflow(
    name="ore-grade-nightly",
    schedule="30 2 * * *",
    timezone="Australia/Perth",
    concurrency_policy="Forbid",
    starting_deadline_seconds=600,
    entrypoint="main",
    on_exit="notify",
    volumes=[scans, work],
    service_account_name="argo-geo",
    arguments=[
        Parameter(name="pit", value="pit-3"),
        Parameter(name="assay_uri", value="s3://ridgeline-geo/assays/pit-3/assays_2025.csv"),
        Parameter(name="since_days", value="1"),
        Parameter(name="min_r2", value="0.6"),
    ],
) as cw:
    with Steps(name="main") as main:
        with main.parallel():
            sync_assays(name="sync-assays")
            count_new_scans(name="count-new-scans", arguments={"since_days": "{{workflow.parameters.since_days}}"})
        build_dataset(name="build-dataset", when="{{steps.count-new-scans.outputs.result}} > 0")
        train(name="train", when="{{steps.count-new-scans.outputs.result}} > 0")
        publish_block_model(
            name="publish-block-model",
            when="{{steps.count-new-scans.outputs.result}} > 0 && {{steps.train.outputs.parameters.r2}} >= {{workflow.parameters.min_r2}}",
        )

    Script(
        name="notify",
        image="python:3.11-slim",
        source=notify,
        env=[
            m.EnvVar(name="WF_STATUS", value="{{workflow.status}}"),
            m.EnvVar(name="WF_NAME", value="{{workflow.name}}"),
            m.EnvVar(name="PIT", value="{{workflow.parameters.pit}}"),
            m.EnvVar(
                name="SLACK_WEBHOOK",
                value_from=m.EnvVarSource(secret_key_ref=m.SecretKeySelector(name="geo-slack", key="webhook")),
            ),
        ],
    )

if __name__ == "__main__":
    with open(__file__.replace(".py", ".yaml"), "w") as f:
        f.write(cw.to_yaml())
