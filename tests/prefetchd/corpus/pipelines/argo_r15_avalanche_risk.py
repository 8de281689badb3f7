# ruff: noqa
"""Daily avalanche-danger nowcast per forecast zone.

Runs every morning before the bulletin: pulls snow-pit observations and the latest
HRDPS NWP cycle onto the shared avalanche volume, builds zone features, scores the
danger model once per active zone, and (in prod) publishes the bulletin JSON."""
from hera.workflows import (
    Container,
    CronWorkflow,
    Parameter,
    Step,
    Steps,
    models as m,
    script,
)

AVY_VOL = m.Volume(
    name="avy-data",
    persistent_volume_claim=m.PersistentVolumeClaimVolumeSource(claim_name="avalanche-data"),
)


@script(image="python:3.11-slim")
def list_zones(season: str):
    import json

    zones = {
        "2024-25": ["sea-to-sky", "south-coast", "north-columbia", "purcells", "kootenay-boundary"],
    }
    print(json.dumps(zones[season]))


@script(
    image="ghcr.io/avy-forecast/snowpack-tools:4.1.0",
    inputs=[Parameter(name="region")],
    volume_mounts=[m.VolumeMount(name="avy-data", mount_path="/data", sub_path="snowpack")],
)
def pull_snowpack(region: str):
    import json
    import os

    import boto3

    s3 = boto3.client("s3")
    bucket = "avy-forecast-obs"
    prefix = f"snowpits/{region}/current-season/"
    os.makedirs("/data/pits", exist_ok=True)
    n = 0
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            if obj["Key"].endswith(".caaml.xml"):
                s3.download_file(bucket, obj["Key"], os.path.join("/data/pits", os.path.basename(obj["Key"])))
                n += 1
    print(json.dumps({"pits": n}))


@script(
    image="ghcr.io/avy-forecast/snowpack-tools:4.1.0",
    inputs=[Parameter(name="zone")],
    volume_mounts=[m.VolumeMount(name="avy-data", mount_path="/data")],
    resources=m.ResourceRequirements(requests={"cpu": "2", "memory": "4Gi"}),
)
def score_zone(zone: str):
    import json

    import lightgbm as lgb
    import pandas as pd
    import s3fs

    fs = s3fs.S3FileSystem()
    fs.get("s3://avy-forecast-models/danger-gbm/v5.2/model.txt", "/tmp/model.txt")
    booster = lgb.Booster(model_file="/tmp/model.txt")
    tests = pd.read_parquet(f"s3://avy-forecast-obs/stability-tests/{zone}/last-7d.parquet")
    feats = pd.read_parquet(f"/data/features/{zone}.parquet")
    feats["ect_propagations"] = int((tests["result"] == "ECTP").sum())
    danger = booster.predict(feats.drop(columns=["zone"]))
    out = {"zone": zone, "alpine": int(danger[:, 0].argmax()), "treeline": int(danger[:, 1].argmax())}
    with open(f"/data/danger/{zone}.json", "w") as f:
        json.dump(out, f)
    print(json.dumps(out))


with CronWorkflow(
    name="avalanche-nowcast",
    schedule="30 4 * * *",
    timezone="America/Vancouver",
    concurrency_policy="Forbid",
    starting_deadline_seconds=600,
    entrypoint="nowcast",
    service_account_name="avy-pipelines",
    arguments=[
        Parameter(name="region", value="bc-interior"),
        Parameter(name="season", value="2024-25"),
        Parameter(name="env", value="prod"),
    ],
    volumes=[AVY_VOL],
) as cw:
    pull_weather = Container(
        name="pull-weather",
        image="gcr.io/google.com/cloudsdktool/google-cloud-cli:489.0.0-slim",
        command=["bash", "-c"],
        args=[
            "set -euo pipefail; mkdir -p /data/nwp && "
            "gsutil -m rsync -r -x '.*\\.idx$' gs://avy-forecast-nwp/hrdps/latest/ /data/nwp/"
        ],
        volume_mounts=[m.VolumeMount(name="avy-data", mount_path="/data", sub_path="weather")],
    )
    build_features = Container(
        name="build-features",
        image="ghcr.io/avy-forecast/snowpack-tools:4.1.0",
        command=["python", "-m", "avy.features"],
        args=[
            "--pits", "/data/snowpack/pits",
            "--nwp", "/data/weather/nwp",
            "--terrain", "s3://avy-forecast-ref/terrain/ates-v2/zones.gpkg",
            "--out", "/data/features/",
            "--danger-dir", "/data/danger/",
        ],
        volume_mounts=[m.VolumeMount(name="avy-data", mount_path="/data")],
    )
    publish = Container(
        name="publish-bulletin",
        image="amazon/aws-cli:2.17.0",
        inputs=[Parameter(name="region")],
        command=["sh", "-c"],
        args=[
            "aws s3 sync /data/danger/ "
            "s3://avy-forecast-public/bulletins/{{inputs.parameters.region}}/today/ "
            "--delete --cache-control max-age=300 --content-type application/json"
        ],
        volume_mounts=[m.VolumeMount(name="avy-data", mount_path="/data", read_only=True)],
    )

    with Steps(name="nowcast") as nowcast:
        zones = list_zones(arguments={"season": "{{workflow.parameters.season}}"})
        with nowcast.parallel():
            pull_snowpack(arguments={"region": "{{workflow.parameters.region}}"})
            pull_weather()
        build_features()
        score_zone(
            arguments={"zone": "{{item}}"},
            with_param=zones.result,
        )
        publish(
            arguments={"region": "{{workflow.parameters.region}}"},
            when="{{workflow.parameters.env}} == prod",
        )

if __name__ == "__main__":
    with open(__file__.replace(".py", ".yaml"), "w") as f:
        f.write(cw.to_yaml())
