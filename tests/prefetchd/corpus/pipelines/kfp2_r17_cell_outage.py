# ruff: noqa
"""Daily RAN cell outage / sleeping-cell detection for one region.

PM counters (15-min granularity) are pulled onto the shared KPI cache PVC,
joined with the fault-management alarm log and the site inventory, scored by
an isolation forest, and each outage cluster gets a root-cause pass against
the transport topology. NOC tickets are opened when anything was found.
"""
from kfp import compiler, dsl, kubernetes

KPI_MOUNT = "/mnt/kpi"
ANALYTICS_IMAGE = "registry.telco.internal/ran-analytics/py:3.11-2025.06"


@dsl.container_component
def sync_pm_counters(region: str, day: str):
    return dsl.ContainerSpec(
        image="peakcom/s5cmd:v2.2.2",
        command=["/s5cmd"],
        args=[
            "--numworkers", "32",
            "cp",
            dsl.ConcatPlaceholder(
                ["s3://telco-ran-pm/counters/region=", region, "/day=", day, "/*.parquet"]
            ),
            dsl.ConcatPlaceholder(["/mnt/kpi/pm/", day, "/"]),
        ],
    )


@dsl.component(base_image=ANALYTICS_IMAGE)
def pull_alarm_log(alarms_bucket: str, region: str, day: str, alarms: dsl.Output[dsl.Dataset]):
    import io

    import boto3
    import pandas as pd

    s3 = boto3.client("s3")
    frames = []
    paginator = s3.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=alarms_bucket, Prefix=f"fm/{region}/{day}/"):
        for obj in page.get("Contents", []):
            if not obj["Key"].endswith(".csv.gz"):
                continue
            body = s3.get_object(Bucket=alarms_bucket, Key=obj["Key"])["Body"].read()
            frames.append(pd.read_csv(io.BytesIO(body), compression="gzip"))
    pd.concat(frames).to_parquet(alarms.path)


@dsl.component(base_image=ANALYTICS_IMAGE)
def build_cell_features(
    region: str, day: str, alarms: dsl.Input[dsl.Dataset], features: dsl.Output[dsl.Dataset]
):
    import duckdb

    con = duckdb.connect()
    con.execute("INSTALL httpfs; LOAD httpfs; SET s3_region='eu-north-1';")
    con.execute(f"""
        CREATE TABLE f AS
        SELECT pm.cell_id,
               avg(pm.rrc_conn_estab_succ) AS rrc_succ,
               avg(pm.prb_dl_util) AS prb_dl,
               sum(pm.erab_drop) AS drops,
               any_value(inv.site_type) AS site_type,
               count(al.alarm_id) AS n_alarms
        FROM read_parquet('/mnt/kpi/pm/{day}/*.parquet') pm
        JOIN read_csv_auto('s3://telco-inventory/sites/{region}/cells.csv') inv USING (cell_id)
        LEFT JOIN read_parquet('{alarms.path}') al USING (cell_id)
        GROUP BY pm.cell_id
    """)
    con.execute(f"COPY f TO '{features.path}' (FORMAT PARQUET)")


@dsl.container_component
def detect_outages(
    features: dsl.Input[dsl.Dataset],
    scores: dsl.Output[dsl.Dataset],
    clusters: dsl.OutputPath(list),
):
    return dsl.ContainerSpec(
        image="registry.telco.internal/ran-analytics/outage-detector:4.2.0",
        command=["python", "-m", "outage.detect"],
        args=[
            "--input-path", features.path,
            "--model-uri", "s3://telco-ml-models/outage-iforest/v12/model.joblib",
            "--contamination", "0.002",
            "--output", scores.path,
            "--clusters-out", clusters,
        ],
    )


@dsl.component(base_image=ANALYTICS_IMAGE)
def root_cause_cluster(cluster_id: str, region: str) -> str:
    import json

    import s3fs

    fs = s3fs.S3FileSystem()
    with fs.open(f"s3://telco-transport/topology/{region}/{cluster_id}.json") as f:
        topo = json.load(f)
    upstream = [n["id"] for n in topo["nodes"] if n["role"] in ("agg-router", "microwave-hub")]
    return json.dumps({"cluster": cluster_id, "suspects": upstream})


@dsl.component(base_image=ANALYTICS_IMAGE)
def summarize_outages(scores: dsl.Input[dsl.Dataset], region: str, day: str) -> int:
    import pandas as pd

    df = pd.read_parquet(scores.path)
    out = df[df["is_outage"]].sort_values("score", ascending=False)
    out.to_parquet(f"s3://telco-noc-reports/outages/{region}/{day}/summary.parquet", index=False)
    return int(len(out))


@dsl.component(base_image=ANALYTICS_IMAGE)
def open_tickets(region: str, day: str):
    import os

    import pandas as pd
    import requests

    out = pd.read_parquet(f"s3://telco-noc-reports/outages/{region}/{day}/summary.parquet")
    for row in out.itertuples():
        requests.post(
            os.environ["ITSM_URL"] + "/api/incidents",
            json={"ci": row.cell_id, "severity": "P3", "summary": f"Sleeping cell {row.cell_id} ({day})"},
            timeout=30,
        ).raise_for_status()


@dsl.pipeline(name="ran-cell-outage-detector")
def cell_outage_pipeline(
    region: str = "emea-north",
    day: str = "2025-06-14",
    alarms_bucket: str = "telco-oss-alarms",
    kpi_pvc: str = "ran-kpi-cache",
):
    sync = sync_pm_counters(region=region, day=day)
    kubernetes.mount_pvc(sync, pvc_name=kpi_pvc, mount_path=KPI_MOUNT)

    alarms = pull_alarm_log(alarms_bucket=alarms_bucket, region=region, day=day)

    feats = build_cell_features(region=region, day=day, alarms=alarms.outputs["alarms"]).after(sync)
    kubernetes.mount_pvc(feats, pvc_name=kpi_pvc, mount_path=KPI_MOUNT)

    det = detect_outages(features=feats.outputs["features"])

    with dsl.ParallelFor(det.outputs["clusters"], parallelism=8) as cluster_id:
        root_cause_cluster(cluster_id=cluster_id, region=region)

    summary = summarize_outages(scores=det.outputs["scores"], region=region, day=day)
    with dsl.If(summary.output > 0):
        tickets = open_tickets(region=region, day=day)
        tickets.set_env_variable("ITSM_URL", "https://itsm.telco.internal")


if __name__ == "__main__":
    compiler.Compiler().compile(cell_outage_pipeline, __file__.replace(".py", ".yaml"))
