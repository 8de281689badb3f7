# ruff: noqa
"""Monthly auto-insurance FNOL (first notice of loss) fraud triage.

Claims data science, runs on the 2nd of every month for the previous month.
"""
from kfp import compiler, dsl, kubernetes
from kfp.dsl import Dataset, Input, Output


@dsl.container_component
def pull_repair_estimates(claims_month: str):
    # Body-shop partners drop their estimate PDFs + JSON sidecars in our GCS inbox.
    return dsl.ContainerSpec(
        image="gcr.io/google.com/cloudsdktool/google-cloud-cli:489.0.0-slim",
        command=["sh", "-c"],
        args=[
            'mkdir -p /cache/estimates/$0 && gsutil -m rsync -r "gs://acme-ins-partner-estimates/bodyshop/$0/" "/cache/estimates/$0/"',
            claims_month,
        ],
    )


@dsl.container_component
def extract_fnol(claims_prefix: str, claims_month: str, fnol: Output[Dataset]):
    return dsl.ContainerSpec(
        image="ghcr.io/acme-ins/claims-etl:3.4.0",
        command=["python", "-m", "claims_etl.extract"],
        args=[
            "--source", f"{claims_prefix}/month={claims_month}/",
            "--policy-table", "s3://acme-ins-ref/policies/active_policies.parquet",
            "--out", fnol.path,
        ],
    )


@dsl.component(
    base_image="pytorch/pytorch:2.3.1-cuda12.1-cudnn8-runtime",
    packages_to_install=["pandas==2.2.2", "pyarrow==16.1.0", "boto3==1.34.131", "pytorch-tabnet==4.1.0"],
)
def score_claims(claims_month: str, fnol: Input[Dataset], scored: Output[Dataset]) -> int:
    import glob
    import json
    import os
    from urllib.parse import urlparse

    import boto3
    import numpy as np
    import pandas as pd
    import torch

    model_uri = urlparse(os.environ["MODEL_URI"])
    boto3.client("s3").download_file(model_uri.netloc, model_uri.path.lstrip("/"), "/tmp/model.pt")
    model = torch.jit.load("/tmp/model.pt").eval()

    claims = pd.read_parquet(fnol.path)
    garage_emb = np.load("/cache/embeddings/garage_network.npy")
    est = {}
    for fn in glob.glob(f"/cache/estimates/{claims_month}/*.json"):
        with open(fn) as fh:
            doc = json.load(fh)
        est[doc["claim_id"]] = doc["total_estimate"]
    claims["estimate_total"] = claims["claim_id"].map(est).fillna(0.0)
    x = np.hstack([claims.drop(columns=["claim_id"]).to_numpy(np.float32), garage_emb[claims["garage_idx"]]])
    with torch.no_grad():
        claims["fraud_score"] = torch.sigmoid(model(torch.from_numpy(x))).numpy().ravel()
    claims.to_parquet(scored.path, index=False)
    return int((claims["fraud_score"] > float(os.environ.get("SIU_THRESHOLD", "0.82"))).sum())


@dsl.component(base_image="python:3.11-slim", packages_to_install=["pandas==2.2.2", "pyarrow==16.1.0", "boto3==1.34.131"])
def push_siu_queue(claims_month: str, scored: Input[Dataset]):
    import io

    import boto3
    import pandas as pd

    df = pd.read_parquet(scored.path)
    hits = df[df["fraud_score"] > 0.82].sort_values("fraud_score", ascending=False)
    buf = io.StringIO()
    hits[["claim_id", "policy_id", "fraud_score", "estimate_total"]].to_csv(buf, index=False)
    boto3.client("s3").put_object(
        Bucket="acme-ins-siu-inbox",
        Key=f"auto/{claims_month}/high_risk.csv",
        Body=buf.getvalue().encode(),
    )


@dsl.component(base_image="python:3.11-slim", packages_to_install=["pandas==2.2.2", "pyarrow==16.1.0", "s3fs==2024.6.1"])
def summarize_month(claims_month: str, scored: Input[Dataset]):
    import json

    import pandas as pd
    import s3fs

    df = pd.read_parquet(scored.path)
    bench = pd.read_csv("s3://acme-ins-ref/benchmarks/industry_fraud_rates_2024.csv")
    summary = {
        "month": claims_month,
        "claims": int(len(df)),
        "flagged_share": float((df["fraud_score"] > 0.82).mean()),
        "industry_rate": float(bench.loc[bench["line"] == "auto", "rate"].iloc[0]),
    }
    fs = s3fs.S3FileSystem()
    with fs.open(f"s3://acme-ins-claims-reports/auto/summary/{claims_month}.json", "w") as fh:
        json.dump(summary, fh, indent=2)


@dsl.container_component
def notify_claims_team(channel: str):
    return dsl.ContainerSpec(
        image="curlimages/curl:8.8.0",
        command=["sh", "-c"],
        args=[
            'curl -sf -X POST -H "Content-Type: application/json" '
            '-d "{\\"channel\\": \\"$0\\", \\"text\\": \\"FNOL triage run finished\\"}" "$SLACK_WEBHOOK_URL"',
            channel,
        ],
    )


@dsl.pipeline(name="auto-fnol-fraud-triage")
def claims_triage(
    claims_month: str = "2025-04",
    claims_prefix: str = "s3://acme-ins-claims-lake/auto/fnol",
    features_pvc: str = "claims-feature-cache",
    notify_channel: str = "#claims-ml",
):
    notify = notify_claims_team(channel=notify_channel)
    kubernetes.use_secret_as_env(notify, secret_name="slack-webhook", secret_key_to_env={"url": "SLACK_WEBHOOK_URL"})

    with dsl.ExitHandler(notify, name="fnol-triage"):
        estimates = pull_repair_estimates(claims_month=claims_month)
        kubernetes.mount_pvc(estimates, pvc_name=features_pvc, mount_path="/cache")

        fnol = extract_fnol(claims_prefix=claims_prefix, claims_month=claims_month)

        score = score_claims(claims_month=claims_month, fnol=fnol.outputs["fnol"]).after(estimates)
        score.set_env_variable("MODEL_URI", "s3://acme-ins-models/fraud-tabnet/v7/model.pt")
        score.set_env_variable("SIU_THRESHOLD", "0.82")
        score.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(1)
        kubernetes.mount_pvc(score, pvc_name=features_pvc, mount_path="/cache")

        with dsl.If(score.outputs["Output"] > 0, name="any-high-risk"):
            push_siu_queue(claims_month=claims_month, scored=score.outputs["scored"])

        summarize_month(claims_month=claims_month, scored=score.outputs["scored"])


if __name__ == "__main__":
    compiler.Compiler().compile(claims_triage, __file__.replace(".py", ".yaml"))
