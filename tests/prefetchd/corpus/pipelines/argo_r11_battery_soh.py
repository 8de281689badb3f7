# ruff: noqa
"""Li-ion cell state-of-health (SOH) regressor from cycler data.

WorkflowTemplate (Hera 7.1.0, Steps): list the cells of a test campaign ->
parse each cell's Arbin/Maccor export to parquet (fan-out over the listing)
while the OCV reference curve is fetched as an S3 artifact -> XGBoost SOH
model on incremental-capacity features -> validation gate -> Slack on exit.

    /tmp/hera/bin/python argo_r11_battery_soh.py
"""
import os

from hera.workflows import (Artifact, Container, Parameter, S3Artifact, Steps,
                            WorkflowTemplate, models as m, script)

PY = "ghcr.io/acme-cells/cycler-py:0.14.2"


@script(image=PY, env=[m.EnvVar(name="AWS_DEFAULT_REGION", value="eu-central-1")])
def list_cells(bucket: str, campaign: str):
    import json

    import boto3

    pages = boto3.client("s3").get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Prefix=f"raw/{campaign}/", Delimiter="/")
    cells = [p["Prefix"].rstrip("/").rsplit("/", 1)[-1]
             for page in pages for p in page.get("CommonPrefixes", [])]
    print(json.dumps(sorted(cells)))


@script(image=PY, env=[m.EnvVar(name="AWS_DEFAULT_REGION", value="eu-central-1")],
        retry_strategy=m.RetryStrategy(limit="3", retry_policy="OnFailure",
                                       backoff=m.Backoff(duration="30s", factor="2")))
def parse_cell(bucket: str, campaign: str, cell: str):
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq
    import s3fs

    fs = s3fs.S3FileSystem()
    raw = pd.read_csv(f"s3://{bucket}/raw/{campaign}/{cell}/cycles.csv.gz",
                      usecols=["Cycle_Index", "Step_Index", "Test_Time(s)", "Current(A)",
                               "Voltage(V)", "Discharge_Capacity(Ah)", "Aux_Temperature_1(C)"])
    raw.columns = ["cycle", "step", "t_s", "i_a", "v", "q_dis_ah", "temp_c"]
    raw["cell_id"] = cell
    with fs.open(f"s3://acme-cells-lake/parsed/{campaign}/cell={cell}/part-0.parquet", "wb") as f:
        pq.write_table(pa.Table.from_pandas(raw, preserve_index=False), f, compression="zstd")


fetch_ocv = Container(
    name="fetch-ocv",
    image="busybox:1.36",
    command=["sh", "-c"],
    args=["mkdir -p /out && cp /in/ocv.csv /out/ocv.csv && wc -l /out/ocv.csv"],
    inputs=[S3Artifact(name="ocv", path="/in/ocv.csv", bucket="acme-cells-ref",
                       key="ocv/{{workflow.parameters.chemistry}}/c20_ocv_25C.csv",
                       endpoint="s3.eu-central-1.amazonaws.com", region="eu-central-1")],
    outputs=[Artifact(name="ocv-curve", path="/out/ocv.csv")],
)

train_soh = Container(
    name="train-soh",
    image="ghcr.io/acme-cells/soh-xgb:2.1.0",
    command=["python", "-m", "soh.train"],
    args=["--parsed", "s3://acme-cells-lake/parsed/{{workflow.parameters.campaign}}/*/*.parquet",
          "--ocv", "/in/ocv.csv",
          "--features", "ica_peaks,dva,ccct",
          "--model-out", "s3://acme-cells-models/soh/{{workflow.parameters.campaign}}/xgb.json",
          "--metrics-out", "/tmp/metrics.json"],
    inputs=[Artifact(name="ocv-curve", path="/in/ocv.csv")],
    outputs=[Parameter(name="rmse", value_from=m.ValueFrom(path="/tmp/metrics.json",
                                                           json_path="$.rmse_pct"))],
    resources=m.ResourceRequirements(requests={"cpu": "16", "memory": "48Gi"}),
)


@script(image=PY)
def validate(campaign: str, rmse: float, max_rmse: float):
    import json
    import sys

    import s3fs

    fs = s3fs.S3FileSystem()
    holdout = json.load(fs.open(f"s3://acme-cells-lake/holdout/{campaign}/cells.json"))
    print(f"{campaign}: rmse={rmse:.2f}% on {len(holdout['cells'])} holdout cells (max {max_rmse}%)")
    sys.exit(0 if rmse <= max_rmse else 1)


with WorkflowTemplate(
    name="battery-soh-train",
    entrypoint="main",
    on_exit="notify",
    arguments=[
        Parameter(name="bucket", value="acme-cells-cycler"),
        Parameter(name="campaign", value="nmc811-2025q2"),
        Parameter(name="chemistry", value="NMC811"),
        Parameter(name="max_rmse", value="1.5"),
    ],
) as w:
    notify = Container(
        name="notify",
        image="curlimages/curl:8.8.0",
        command=["sh", "-c"],
        args=['curl -sS -X POST -H "Content-type: application/json" '
              '--data "{\\"text\\":\\"soh-train {{workflow.name}}: {{workflow.status}}\\"}" "$SLACK_URL"'],
        env=[m.EnvVar(name="SLACK_URL", value_from=m.EnvVarSource(
            secret_key_ref=m.SecretKeySelector(name="cells-slack", key="webhook")))],
    )

    with Steps(name="main") as main:
        list_cells(name="list-cells",
                   arguments={"bucket": "{{workflow.parameters.bucket}}",
                              "campaign": "{{workflow.parameters.campaign}}"})
        with main.parallel():
            parse_cell(name="parse-cells",
                       arguments={"bucket": "{{workflow.parameters.bucket}}",
                                  "campaign": "{{workflow.parameters.campaign}}",
                                  "cell": "{{item}}"},
                       with_param="{{steps.list-cells.outputs.result}}")
            fetch_ocv(name="fetch-ocv")
        train_soh(name="train-soh",
                  arguments=[Artifact(name="ocv-curve", from_="{{steps.fetch-ocv.outputs.artifacts.ocv-curve}}")])
        validate(name="validate",
                 arguments={"campaign": "{{workflow.parameters.campaign}}",
                            "rmse": "{{steps.train-soh.outputs.parameters.rmse}}",
                            "max_rmse": "{{workflow.parameters.max_rmse}}"})

if __name__ == "__main__":
    with open(os.path.splitext(__file__)[0] + ".yaml", "w") as f:
        f.write(w.to_yaml())
