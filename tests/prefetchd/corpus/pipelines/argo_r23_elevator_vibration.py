# ruff: noqa
"""Elevator vibration anomaly detection (Hera -> Argo Workflow): buildings x cars nested loop, per-fleet autoencoder."""
from hera.workflows import DAG, Container, Parameter, Script, Workflow, models as m

with Workflow(
    generate_name="elevator-vibration-",
    entrypoint="main",
    on_exit="notify",
    arguments=[Parameter(name="fleet", value="kone-hk"),
               Parameter(name="buildings", value='["tower-a", "tower-b"]'),
               Parameter(name="cars", value="3")],
    volume_claim_templates=[m.PersistentVolumeClaim(
        metadata=m.ObjectMeta(name="work"),
        spec=m.PersistentVolumeClaimSpec(access_modes=["ReadWriteOnce"],
                                         resources=m.VolumeResourceRequirements(requests={"storage": "200Gi"})))],
    service_account_name="lift-ml",
) as w:
    fetch_index = Script(
        name="fetch-index",
        image="ghcr.io/liftml/py:2025.07",
        command=["python"],
        source='''import json, boto3
fleet = "{{workflow.parameters.fleet}}"
s3 = boto3.client("s3", endpoint_url="http://minio.lift.svc:9000")
idx = json.load(s3.get_object(Bucket="lift-telemetry", Key=f"index/{fleet}.json")["Body"])
print(len(idx["cars"]))
''',
    )

    extract = Container(
        name="extract-car",
        image="ghcr.io/liftml/vib-tools:0.7.1",
        inputs=[Parameter(name="building"), Parameter(name="car")],
        command=["bash", "-c"],
        args=['''set -euo pipefail
B="{{inputs.parameters.building}}"; CAR="{{inputs.parameters.car}}"
aws --endpoint-url http://minio.lift.svc:9000 s3 cp "s3://lift-telemetry/raw/${B}/${CAR}/accel/" "/work/${B}/${CAR}/" --recursive --exclude "*.tmp"
python -m vib.features --in "/work/${B}/${CAR}" \\
  --out "s3://lift-features/{{workflow.parameters.fleet}}/${B}/${CAR}/features.parquet"
'''],
        volume_mounts=[m.VolumeMount(name="work", mount_path="/work")],
    )

    with DAG(name="per-building", inputs=[Parameter(name="building")]) as per_building:
        extract(arguments={"building": "{{inputs.parameters.building}}", "car": "{{item}}"},
                with_sequence=m.Sequence(start="1", end="{{workflow.parameters.cars}}", format="car%02d"))

    train = Script(
        name="train-ae",
        image="ghcr.io/liftml/vib-ae:1.2.0-cu121",
        command=["python"],
        source='''import fsspec, torch
import pandas as pd
from vib.ae import fit
fleet = "{{workflow.parameters.fleet}}"
opts = {"client_kwargs": {"endpoint_url": "http://minio.lift.svc:9000"}}
frames = {b: pd.read_parquet(f"s3://lift-features/{fleet}/{b}/car*/features.parquet", storage_options=opts)
          for b in ("tower-a", "tower-b")}
model, score = fit(pd.concat(frames.values()))
with fsspec.open(f"s3://lift-models/{fleet}/ae.pt", "wb", **opts) as f:
    torch.save(model.state_dict(), f)
print(round(score, 3))
''',
    )

    alert = Script(
        name="alert-maintenance",
        image="ghcr.io/liftml/py:2025.07",
        command=["python"],
        source='''import boto3, datetime
s3 = boto3.client("s3", endpoint_url="http://minio.lift.svc:9000")
key = f"alerts/{{workflow.parameters.fleet}}/{datetime.date.today():%Y-%m-%d}.txt"
s3.put_object(Bucket="lift-ops", Key=key, Body=b"anomaly score above threshold")
''',
    )

    notify = Container(name="notify", image="curlimages/curl:8.8.0", command=["sh", "-c"],
                       args=['curl -sf -X POST "$HOOK" -d "elevator run {{workflow.name}}: {{workflow.status}}"'],
                       env=[m.EnvVar(name="HOOK", value_from=m.EnvVarSource(secret_key_ref=m.SecretKeySelector(name="lift-chat", key="hook")))])

    with DAG(name="main"):
        fi = fetch_index(name="fetch-index")
        pb = per_building(name="building", arguments={"building": "{{item}}"}, with_param="{{workflow.parameters.buildings}}")
        tr = train(name="train")
        al = alert(name="alert", when="{{tasks.train.outputs.result}} > 0.9")
        fi >> pb >> tr >> al

w.to_file(".", "argo_r23_elevator_vibration.yaml") if False else open(__file__.replace(".py", ".yaml"), "w").write(w.to_yaml())
