# ruff: noqa
"""Daily card-fraud GBDT retrain (PayCore risk team).

Features are built from the day's transactions and chargebacks, a small grid
of XGBoost candidates is trained in parallel, the best candidate is compared
with production, and promoted when allowed.
"""
import kfp
from kfp import dsl
from kfp.components import func_to_container_op
from kubernetes.client.models import V1EnvVar

RISK_IMAGE = "123456789012.dkr.ecr.eu-west-1.amazonaws.com/paycore/risk-ml:5.2.0"

CANDIDATES = [
    {"candidate": "xgb-d6-eta05", "max_depth": "6", "eta": "0.05"},
    {"candidate": "xgb-d8-eta05", "max_depth": "8", "eta": "0.05"},
    {"candidate": "xgb-d8-eta10", "max_depth": "8", "eta": "0.1"},
]


def build_features(lake_bucket: str, dt: str) -> str:
    import os

    import pandas as pd

    txn = pd.read_parquet(f"s3://{lake_bucket}/transactions/dt={dt}/")
    cb = pd.read_parquet(os.path.join("s3://" + lake_bucket, "chargebacks", "v2", f"dt={dt}", "chargebacks.parquet"))
    mcc = pd.read_csv(os.environ["MCC_TABLE_URI"])
    df = txn.merge(cb[["txn_id", "is_fraud"]], on="txn_id", how="left").fillna({"is_fraud": 0})
    df = df.merge(mcc, on="mcc", how="left")
    out = f"s3://paycore-risk-features/fraud/dt={dt}/features.parquet"
    df.to_parquet(out, index=False)
    return out


def train_candidate(features_uri: str, name: str, max_depth: str, eta: str, registry: str) -> float:
    import json

    import pandas as pd
    import s3fs
    import xgboost as xgb
    from sklearn.metrics import average_precision_score

    df = pd.read_parquet(features_uri)
    valid = df.sample(frac=0.1, random_state=7)
    train = df.drop(valid.index)
    y = "is_fraud"
    booster = xgb.train(
        {"max_depth": int(max_depth), "eta": float(eta), "objective": "binary:logistic"},
        xgb.DMatrix(train.drop(columns=[y]), train[y]),
        num_boost_round=600,
    )
    ap = average_precision_score(valid[y], booster.predict(xgb.DMatrix(valid.drop(columns=[y]))))
    fs = s3fs.S3FileSystem()
    prefix = registry.rstrip("/") + "/candidates/" + name
    booster.save_model("/tmp/model.json")
    fs.put("/tmp/model.json", prefix + "/model.json")
    fs.pipe(prefix + "/metrics.json", json.dumps({"auprc": ap}).encode())
    return ap


def select_champion(registry: str) -> str:
    import json
    from urllib.parse import urlparse

    import boto3

    u = urlparse(registry)
    bucket, root = u.netloc, u.path.strip("/")
    s3 = boto3.client("s3")
    best_name, best_ap = None, -1.0
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=root + "/candidates/")
    for page in pages:
        for obj in page.get("Contents", []):
            if obj["Key"].endswith("/metrics.json"):
                m = json.loads(s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read())
                if m["auprc"] > best_ap:
                    best_name, best_ap = obj["Key"].split("/")[-2], m["auprc"]
    prod = json.loads(s3.get_object(Bucket=bucket, Key=root + "/prod/metrics.json")["Body"].read())
    return best_name if best_ap > prod["auprc"] + 0.002 else "hold"


build_features_op = func_to_container_op(build_features, base_image=RISK_IMAGE)
train_candidate_op = func_to_container_op(train_candidate, base_image=RISK_IMAGE)
select_champion_op = func_to_container_op(select_champion, base_image=RISK_IMAGE)


@dsl.pipeline(name="fraud-gbdt-daily", description="Daily fraud model retrain and guarded promotion")
def fraud_pipeline(
    lake_bucket: str = "paycore-risk-lake",
    dt: str = "2025-06-01",
    registry: str = "s3://paycore-model-registry/fraud-gbdt",
    allow_promotion: str = "true",
):
    audit = dsl.ContainerOp(
        name="audit-log",
        image="amazon/aws-cli:2.17.0",
        command=["sh", "-c"],
        arguments=[
            "echo '{\"workflow\": \"{{workflow.name}}\", \"status\": \"{{workflow.status}}\"}' > /tmp/audit.json && "
            "aws s3 cp /tmp/audit.json s3://paycore-audit/ml-pipelines/fraud-gbdt/{{workflow.name}}.json"
        ],
    )

    with dsl.ExitHandler(audit):
        feats = build_features_op(lake_bucket=lake_bucket, dt=dt)
        feats.add_env_variable(V1EnvVar(name="MCC_TABLE_URI", value="s3://paycore-risk-ref/merchant-mcc/v5/mcc.csv"))
        feats.set_memory_request("32G")

        with dsl.ParallelFor(CANDIDATES, parallelism=2) as cand:
            train = train_candidate_op(
                features_uri=feats.output,
                name=cand.candidate,
                max_depth=cand.max_depth,
                eta=cand.eta,
                registry=registry,
            )

        champ = select_champion_op(registry=registry).after(train)
        champ.execution_options.caching_strategy.max_cache_staleness = "P0D"

        with dsl.Condition(allow_promotion == "true"):
            with dsl.Condition(champ.output != "hold"):
                dsl.ContainerOp(
                    name="promote-model",
                    image="amazon/aws-cli:2.17.0",
                    command=["bash", "-c"],
                    arguments=[
                        f"set -euo pipefail\n"
                        f"aws s3 cp {registry}/prod/ {registry}/archive/{dt}/ --recursive\n"
                        f"aws s3 sync {registry}/candidates/{champ.output}/ {registry}/prod/ --delete"
                    ],
                )


if __name__ == "__main__":
    kfp.compiler.Compiler().compile(fraud_pipeline, __file__.replace(".py", ".yaml"))
