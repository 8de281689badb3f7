# ruff: noqa
"""IFCB (Imaging FlowCytobot) plankton classification for one research cruise.

list bins -> extract ROI images per bin (fan-out) -> CNN classification -> class counts -> EcoTaxa export.
"""
from hera.workflows import (
    DAG,
    Container,
    Parameter,
    RetryStrategy,
    S3Artifact,
    Volume,
    Workflow,
    models as m,
    script,
)

work = Volume(
    name="work",
    size="150Gi",
    storage_class_name="efs-sc",
    access_modes=["ReadWriteMany"],
    mount_path="/work",
)


@script(image="python:3.11-slim")
def list_bins(ifcb_bucket: str, cruise: str):
    import json
    import subprocess
    import sys

    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "boto3==1.34.131"], check=True)
    import boto3

    pages = boto3.client("s3").get_paginator("list_objects_v2").paginate(
        Bucket=ifcb_bucket, Prefix=f"raw/{cruise}/", Delimiter="/"
    )
    bins = [p["Prefix"].rstrip("/").rsplit("/", 1)[-1] for page in pages for p in page.get("CommonPrefixes", [])]
    json.dump(sorted(bins), sys.stdout)


extract_rois = Container(
    name="extract-rois",
    image="ghcr.io/ocean-obs/ifcb-tools:1.6.0",
    command=["python", "-m", "ifcb_tools.extract"],
    args=[
        "--bin-dir", "/tmp/bin",
        "--bin-id", "{{inputs.parameters.bin}}",
        "--out", "/work/rois/{{inputs.parameters.bin}}",
        "--min-area", "80",
    ],
    inputs=[
        Parameter(name="bin"),
        S3Artifact(
            name="raw-bin",
            path="/tmp/bin",
            bucket="{{workflow.parameters.ifcb_bucket}}",
            key="raw/{{workflow.parameters.cruise}}/{{inputs.parameters.bin}}",
            endpoint="s3.us-east-1.amazonaws.com",
            region="us-east-1",
        ),
    ],
    volume_mounts=[m.VolumeMount(name="work", mount_path="/work")],
    retry_strategy=RetryStrategy(limit=3, retry_policy="OnError"),
    resources=m.ResourceRequirements(requests={"cpu": "1", "memory": "2Gi"}),
)

classify = Container(
    name="classify",
    image="ghcr.io/ocean-obs/ifcb-cnn:4.1.0-cu121",
    command=["python", "-m", "ifcb_cnn.predict"],
    args=[
        "--rois", "/work/rois",
        "--weights", "/models/model.pt",
        "--classes", "/models/classes.json",
        "--batch-size", "512",
        "--out", "/work/predictions.parquet",
    ],
    inputs=[
        S3Artifact(
            name="weights",
            path="/models/model.pt",
            bucket="ocean-obs-models",
            key="ifcb-cnn/v4.1/model.pt",
            endpoint="s3.us-east-1.amazonaws.com",
        ),
        S3Artifact(
            name="classes",
            path="/models/classes.json",
            bucket="ocean-obs-models",
            key="ifcb-cnn/v4.1/classes.json",
            endpoint="s3.us-east-1.amazonaws.com",
        ),
    ],
    volume_mounts=[m.VolumeMount(name="work", mount_path="/work")],
    resources=m.ResourceRequirements(limits={"nvidia.com/gpu": "1", "memory": "24Gi"}),
    tolerations=[m.Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")],
)


@script(
    image="ghcr.io/ocean-obs/ifcb-tools:1.6.0",
    volume_mounts=[m.VolumeMount(name="work", mount_path="/work")],
    outputs=[
        S3Artifact(
            name="class-counts",
            path="/tmp/class_counts.csv",
            bucket="ocean-obs-products",
            key="ifcb/{{workflow.parameters.cruise}}/class_counts.csv",
            endpoint="s3.us-east-1.amazonaws.com",
            archive=m.ArchiveStrategy(none=m.NoneStrategy()),
        )
    ],
)
def summarize(cruise: str, min_confidence: float):
    import pandas as pd

    pred = pd.read_parquet("/work/predictions.parquet")
    pred = pred[pred.confidence >= min_confidence]
    meta = pd.read_csv(f"s3://ocean-obs-ifcb/metadata/{cruise}/bin_metadata.csv")
    counts = pred.groupby(["bin", "label"]).size().unstack(fill_value=0).reset_index()
    counts = counts.merge(meta[["bin", "lat", "lon", "ml_analyzed"]], on="bin", how="left")
    counts.to_csv("/tmp/class_counts.csv", index=False)


export_ecotaxa = Container(
    name="export-ecotaxa",
    image="amazon/aws-cli:2.17.0",
    command=["sh", "-c"],
    args=[
        "set -e; "
        "tar -czf /tmp/ecotaxa_{{workflow.parameters.cruise}}.tar.gz -C /work rois predictions.parquet && "
        "aws s3 cp /tmp/ecotaxa_{{workflow.parameters.cruise}}.tar.gz "
        "s3://ocean-obs-ecotaxa-exports/{{workflow.parameters.cruise}}/ --no-progress"
    ],
    volume_mounts=[m.VolumeMount(name="work", mount_path="/work", read_only=True)],
)

with Workflow(
    generate_name="ifcb-plankton-",
    entrypoint="main",
    service_account_name="argo-ocean-obs",
    volumes=[work],
    arguments=[
        Parameter(name="ifcb_bucket", value="ocean-obs-ifcb"),
        Parameter(name="cruise", value="EN715"),
        Parameter(name="min_confidence", value="0.6"),
        Parameter(name="push_ecotaxa", value="true"),
    ],
    pod_gc=m.PodGC(strategy="OnWorkflowSuccess"),
) as w:
    with DAG(name="main"):
        lb = list_bins(arguments={"ifcb_bucket": "{{workflow.parameters.ifcb_bucket}}", "cruise": "{{workflow.parameters.cruise}}"})
        ex = extract_rois(
            name="extract-rois",
            arguments=[Parameter(name="bin", value="{{item}}")],
            with_param=lb.result,
        )
        cl = classify(name="classify")
        sm = summarize(
            arguments={"cruise": "{{workflow.parameters.cruise}}", "min_confidence": "{{workflow.parameters.min_confidence}}"}
        )
        et = export_ecotaxa(name="export-ecotaxa", when="{{workflow.parameters.push_ecotaxa}} == true")
        lb >> ex >> cl >> [sm, et]

if __name__ == "__main__":
    with open(__file__.replace(".py", ".yaml"), "w") as f:
        f.write(w.to_yaml())
