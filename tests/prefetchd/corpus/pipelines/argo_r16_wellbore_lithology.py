# ruff: noqa
"""Lithology classification from wireline logs (LAS), one basin at a time.

Subsurface data science team; submitted from the Argo UI per basin/run id.
"""
from hera.workflows import (
    Container,
    ExistingVolume,
    Parameter,
    Resources,
    Steps,
    WorkflowTemplate,
    script,
)
from hera.workflows import models as m

DATA = m.VolumeMount(name="geolog", mount_path="/data", sub_path="permian")
DATA_RO = m.VolumeMount(name="geolog", mount_path="/data", sub_path="permian", read_only=True)


@script(image="ghcr.io/geolog/py-tools:3.2.0")
def list_wells(basin: str):
    import json

    import boto3

    s3 = boto3.client("s3")
    wells = []
    paginator = s3.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket="geolog-las", Prefix=f"basin={basin}/", Delimiter="/"):
        for cp in page.get("CommonPrefixes", []):
            wells.append(cp["Prefix"].rstrip("/").split("/")[-1])
    print(json.dumps(sorted(wells)))


@script(image="ghcr.io/geolog/py-tools:3.2.0", volume_mounts=[DATA_RO])
def qc_report(basin: str, run_id: str):
    import glob

    import boto3
    import pandas as pd

    curated = pd.concat(pd.read_parquet(p) for p in sorted(glob.glob("/data/curated/*.parquet")))
    summary = curated.groupby("well_id")[["GR", "RHOB", "NPHI", "DT"]].describe()
    summary.to_html("/tmp/curve_qc.html")
    boto3.client("s3").upload_file("/tmp/curve_qc.html", "geolog-reports", f"qc/{basin}/{run_id}/curve_qc.html")


with WorkflowTemplate(
    name="wellbore-lithology",
    entrypoint="main",
    arguments=[
        Parameter(name="basin", value="permian"),
        Parameter(name="run_id", value="2025-06-a"),
        Parameter(name="make_report", value="true"),
    ],
    volumes=[ExistingVolume(name="geolog", claim_name="geolog-scratch")],
) as wt:
    fetch_well_logs = Container(
        name="fetch-well-logs",
        image="amazon/aws-cli:2.17.0",
        inputs=[Parameter(name="basin"), Parameter(name="well")],
        command=["aws", "s3", "cp", "--recursive"],
        args=[
            "s3://geolog-las/basin={{inputs.parameters.basin}}/{{inputs.parameters.well}}/",
            "/data/las/{{inputs.parameters.well}}/",
            "--exclude", "*",
            "--include", "*.las",
        ],
        volume_mounts=[DATA],
    )

    fetch_formation_tops = Container(
        name="fetch-formation-tops",
        image="gcr.io/google.com/cloudsdktool/google-cloud-cli:489.0.0-slim",
        command=["gsutil", "cp"],
        args=[
            "gs://geolog-public-tops/{{workflow.parameters.basin}}/formation_tops_2024.csv",
            "/data/tops/formation_tops_2024.csv",
        ],
        volume_mounts=[DATA],
    )

    normalize_curves = Container(
        name="normalize-curves",
        image="ghcr.io/geolog/petro-norm:1.9.4",
        command=["petro-norm"],
        args=[
            "--las-dir", "/data/las",
            "--tops", "/data/tops/formation_tops_2024.csv",
            "--curves", "GR,RHOB,NPHI,DT,RT",
            "--out-dir", "/data/curated",
        ],
        volume_mounts=[DATA],
    )

    train_lithology = Container(
        name="train-lithology",
        image="ghcr.io/geolog/lithonet:0.7.1-cu121",
        command=["python", "-m", "lithonet.train"],
        args=[
            "--train-dir", "/data/curated",
            "--labels", "s3://geolog-core-descriptions/{{workflow.parameters.basin}}/core_lithology.csv",
            "--pretrained", "s3://geolog-models/lithonet/base-v2/weights.pt",
            "--model-out", "s3://geolog-models/lithonet/{{workflow.parameters.basin}}/{{workflow.parameters.run_id}}/",
            "--epochs", "40",
        ],
        volume_mounts=[DATA_RO],
        resources=Resources(gpus=1),
    )

    with Steps(name="main") as s:
        wells = list_wells(arguments={"basin": "{{workflow.parameters.basin}}"})
        with s.parallel():
            fetch_well_logs(
                arguments={"basin": "{{workflow.parameters.basin}}", "well": "{{item}}"},
                with_param=wells.result,
            )
            fetch_formation_tops()
        normalize_curves()
        with s.parallel():
            train_lithology()
            qc_report(
                arguments={"basin": "{{workflow.parameters.basin}}", "run_id": "{{workflow.parameters.run_id}}"},
                when="{{workflow.parameters.make_report}} == true",
            )

if __name__ == "__main__":
    with open(__file__.replace(".py", ".yaml"), "w") as fh:
        fh.write(wt.to_yaml())
