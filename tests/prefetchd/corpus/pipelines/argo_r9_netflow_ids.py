# ruff: noqa
"""Nightly network-intrusion scoring over yesterday's Zeek conn logs.

Owned by the SecOps ML team. Zeek sensors ship gzipped conn.log files to
s3://acme-secops-zeek/conn/<YYYY-MM-DD>/; features and scores live on the team's
RWX feature-store volume so analysts can poke at them from notebooks.
"""
from hera.workflows import (
    CronWorkflow,
    Container,
    Env,
    Parameter,
    RetryStrategy,
    S3Artifact,
    SecretEnv,
    Step,
    Steps,
    script,
)
from hera.workflows import models as m

FS_MOUNT = m.VolumeMount(name="feature-store", mount_path="/data", sub_path="ids")
SCORE_IMAGE = "ghcr.io/acme-secops/ids-score:1.8.0"


@script(image="python:3.11-slim")
def resolve_window():
    import datetime

    day = datetime.datetime.now(datetime.timezone.utc).date() - datetime.timedelta(days=1)
    print(day.isoformat())


@script(
    image="ghcr.io/acme-secops/ids-features:1.8.0",
    volume_mounts=[FS_MOUNT],
    resources=m.ResourceRequirements(requests={"cpu": "8", "memory": "32Gi"}),
)
def featurize(day: str):
    import glob

    import polars as pl

    assets = pl.read_parquet("s3://acme-secops-cmdb/assets/latest/assets.parquet")
    frames = []
    for path in glob.glob(f"/data/raw/{day}/*.log.gz"):
        frames.append(pl.read_csv(path, separator="\t", comment_prefix="#", has_header=False,
                                  new_columns=["ts", "uid", "orig_h", "orig_p", "resp_h", "resp_p", "proto",
                                               "service", "duration", "orig_bytes", "resp_bytes",
                                               "conn_state"]))
    conns = pl.concat(frames)
    feats = (
        conns.join(assets, left_on="orig_h", right_on="ip", how="left")
        .group_by(["orig_h", "asset_class"])
        .agg(
            pl.len().alias("n_conns"),
            pl.col("resp_h").n_unique().alias("n_peers"),
            pl.col("resp_p").n_unique().alias("n_ports"),
            pl.col("orig_bytes").cast(pl.Float64).sum().alias("bytes_out"),
            (pl.col("conn_state") == "REJ").mean().alias("rej_rate"),
        )
    )
    feats.write_parquet(f"/data/features/{day}.parquet")


@script(
    image=SCORE_IMAGE,
    volume_mounts=[FS_MOUNT],
    resources=m.ResourceRequirements(limits={"nvidia.com/gpu": "1"}),
)
def score_autoencoder(day: str):
    import boto3
    import pandas as pd
    import torch

    boto3.client("s3").download_file("acme-secops-models", "ids/autoencoder/v7/model.pt", "/tmp/ae.pt")
    model = torch.jit.load("/tmp/ae.pt").eval().cuda()
    df = pd.read_parquet(f"/data/features/{day}.parquet")
    x = torch.tensor(df.drop(columns=["orig_h", "asset_class"]).to_numpy(), dtype=torch.float32).cuda()
    with torch.no_grad():
        err = ((model(x) - x) ** 2).mean(dim=1).cpu().numpy()
    df.assign(ae_score=err)[["orig_h", "ae_score"]].to_parquet(f"/data/scores/{day}-ae.parquet")


@script(image=SCORE_IMAGE, volume_mounts=[FS_MOUNT])
def triage(day: str, threshold: float):
    import pandas as pd

    a = pd.read_parquet(f"/data/scores/{day}-iforest.parquet")
    b = pd.read_parquet(f"/data/scores/{day}-ae.parquet")
    s = a.merge(b, on="orig_h")
    s["score"] = 0.5 * s["if_score"].rank(pct=True) + 0.5 * s["ae_score"].rank(pct=True)
    alerts = s[s["score"] >= threshold].sort_values("score", ascending=False)
    alerts.to_json(f"/data/alerts/{day}.jsonl", orient="records", lines=True)
    print(len(alerts))


with CronWorkflow(
    name="netflow-ids-nightly",
    schedule="30 2 * * *",
    timezone="UTC",
    concurrency_policy="Forbid",
    starting_deadline_seconds=900,
    successful_jobs_history_limit=7,
    failed_jobs_history_limit=3,
    entrypoint="nightly",
    on_exit="cleanup-scratch",
    service_account_name="secops-ml",
    arguments=[
        Parameter(name="zeek-bucket", value="acme-secops-zeek"),
        Parameter(name="iforest-version", value="v3"),
        Parameter(name="alert-threshold", value="0.995"),
    ],
    volumes=[
        m.Volume(name="feature-store",
                 persistent_volume_claim=m.PersistentVolumeClaimVolumeSource(claim_name="secops-feature-store")),
    ],
) as w:
    sync_zeek = Container(
        name="sync-zeek",
        image="rclone/rclone:1.67",
        inputs=[Parameter(name="day")],
        args=[
            "copy",
            "s3:{{workflow.parameters.zeek-bucket}}/conn/{{inputs.parameters.day}}/",
            "/data/raw/{{inputs.parameters.day}}/",
            "--include", "*.log.gz",
            "--transfers", "32",
            "--s3-no-check-bucket",
        ],
        env=[
            Env(name="RCLONE_CONFIG_S3_TYPE", value="s3"),
            Env(name="RCLONE_CONFIG_S3_PROVIDER", value="AWS"),
            Env(name="RCLONE_CONFIG_S3_ENV_AUTH", value="true"),
            Env(name="RCLONE_CONFIG_S3_REGION", value="us-east-1"),
        ],
        volume_mounts=[FS_MOUNT],
        retry_strategy=RetryStrategy(limit="3", retry_policy="OnError"),
    )

    score_iforest = Container(
        name="score-iforest",
        image=SCORE_IMAGE,
        inputs=[
            Parameter(name="day"),
            S3Artifact(
                name="model",
                path="/models/iforest.joblib",
                endpoint="s3.amazonaws.com",
                bucket="acme-secops-models",
                key="ids/iforest/{{workflow.parameters.iforest-version}}/model.joblib",
                region="us-east-1",
            ),
        ],
        command=["python", "-m", "ids_score.iforest"],
        args=[
            "--model", "/models/iforest.joblib",
            "--features", "/data/features/{{inputs.parameters.day}}.parquet",
            "--out", "/data/scores/{{inputs.parameters.day}}-iforest.parquet",
        ],
        volume_mounts=[FS_MOUNT],
    )

    open_tickets = Container(
        name="open-tickets",
        image="ghcr.io/acme-secops/soar-cli:4.2.1",
        inputs=[Parameter(name="day")],
        command=["sh", "-c"],
        args=[
            "aws s3 cp /data/alerts/{{inputs.parameters.day}}.jsonl "
            "s3://acme-secops-alerts/ids/{{inputs.parameters.day}}/alerts.jsonl && "
            "soar-cli cases import --source ids-nightly --file /data/alerts/{{inputs.parameters.day}}.jsonl"
        ],
        env=[SecretEnv(name="SOAR_TOKEN", secret_name="soar-api", secret_key="token")],
        volume_mounts=[FS_MOUNT],
    )

    Container(
        name="cleanup-scratch",
        image="busybox:1.36",
        command=["sh", "-c"],
        args=["find /data/raw -mindepth 1 -maxdepth 1 -type d -mtime +7 -exec rm -rf {} +"],
        volume_mounts=[FS_MOUNT],
    )

    with Steps(name="nightly") as nightly:
        resolve_window(name="resolve-window")
        day = "{{steps.resolve-window.outputs.result}}"
        sync_zeek(name="sync", arguments={"day": day})
        featurize(name="featurize", arguments={"day": day})
        with nightly.parallel():
            score_iforest(name="score-iforest", arguments={"day": day})
            score_autoencoder(name="score-autoencoder", arguments={"day": day})
        triage(name="triage", arguments={"day": day, "threshold": "{{workflow.parameters.alert-threshold}}"})
        open_tickets(
            name="open-tickets",
            arguments={"day": day},
            when="{{steps.triage.outputs.result}} > 0",
        )


if __name__ == "__main__":
    with open(__file__.replace(".py", ".yaml"), "w") as f:
        f.write(w.to_yaml())
