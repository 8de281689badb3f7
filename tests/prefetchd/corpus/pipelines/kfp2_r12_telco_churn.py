# ruff: noqa
"""Monthly subscriber churn models, one LightGBM per customer segment.

Features come straight off the lakehouse (CDR parquet via DuckDB, subscriber
dimension from Delta). Each segment trains in parallel, the AUCs are fanned in
for a release gate, and scores are handed to the CRM team's inbound bucket.
"""
from typing import List, NamedTuple

from kfp import compiler, dsl
from kfp.dsl import Dataset, Input, Output

DS_IMAGE = "ghcr.io/acme-telco/ds-base:2025.05-py311"


@dsl.component(base_image=DS_IMAGE, packages_to_install=["duckdb==1.0.0", "deltalake==0.18.2", "polars==1.2.1", "pyarrow==16.1.0"])
def build_features(month: str, lake_bucket: str, features: Output[Dataset]):
    import duckdb
    import polars as pl
    from deltalake import DeltaTable

    con = duckdb.connect()
    con.sql("INSTALL httpfs; LOAD httpfs; SET s3_region='eu-west-1';")
    usage = con.sql(
        f"""
        SELECT msisdn,
               count(*)                                   AS n_events,
               sum(CASE WHEN event_type = 'voice' THEN duration_s END) AS voice_s,
               sum(bytes_dl) / 1e9                         AS data_gb,
               count(DISTINCT cell_id)                     AS n_cells,
               sum(CASE WHEN dropped THEN 1 ELSE 0 END)    AS dropped_calls
        FROM read_parquet('s3://{lake_bucket}/cdr/month={month}/*.parquet', hive_partitioning = true)
        GROUP BY msisdn
        """
    ).pl()

    subs = pl.from_arrow(
        DeltaTable(f"s3://{lake_bucket}/delta/subscribers", storage_options={"AWS_REGION": "eu-west-1"})
        .to_pyarrow_table(columns=["msisdn", "segment", "tenure_m", "arpu", "contract_end", "churned_next_m"])
    )
    df = subs.join(usage, on="msisdn", how="left").fill_null(0)
    df.write_parquet(features.path)
    features.metadata["rows"] = df.height


@dsl.component(base_image=DS_IMAGE, packages_to_install=["lightgbm==4.5.0", "polars==1.2.1", "pyarrow==16.1.0", "mlflow==2.15.1", "s3fs==2024.6.1"])
def train_segment(features: Input[Dataset], segment: str, model_dir: str) -> float:
    import json

    import lightgbm as lgb
    import mlflow
    import polars as pl
    import s3fs
    from sklearn.metrics import roc_auc_score

    df = pl.read_parquet(features.path).filter(pl.col("segment") == segment)
    y = df["churned_next_m"].to_numpy()
    X = df.drop(["msisdn", "segment", "contract_end", "churned_next_m"]).to_pandas()
    n = int(len(X) * 0.8)
    params = {"objective": "binary", "learning_rate": 0.05, "num_leaves": 63, "is_unbalance": True}
    booster = lgb.train(params, lgb.Dataset(X[:n], y[:n]), num_boost_round=800,
                        valid_sets=[lgb.Dataset(X[n:], y[n:])], callbacks=[lgb.early_stopping(50)])
    auc = float(roc_auc_score(y[n:], booster.predict(X[n:])))

    fs = s3fs.S3FileSystem()
    with fs.open(f"{model_dir.rstrip('/')}/model.txt", "w") as f:
        f.write(booster.model_to_string())
    with fs.open(f"{model_dir.rstrip('/')}/metrics.json", "w") as f:
        json.dump({"segment": segment, "auc": auc}, f)

    mlflow.set_experiment("churn-monthly")
    with mlflow.start_run(run_name=segment):
        mlflow.log_params(params)
        mlflow.log_metric("auc", auc)
    return auc


@dsl.component(base_image="python:3.11-slim")
def release_gate(aucs: List[float]) -> NamedTuple("Outputs", [("min_auc", float), ("n_models", int)]):
    from collections import namedtuple

    print("segment AUCs:", aucs)
    return namedtuple("Outputs", ["min_auc", "n_models"])(min(aucs), len(aucs))


@dsl.component(base_image=DS_IMAGE, packages_to_install=["lightgbm==4.5.0", "deltalake==0.18.2", "polars==1.2.1", "s3fs==2024.6.1"])
def batch_score(month: str, lake_bucket: str, models_prefix: str, scores_uri: str):
    import lightgbm as lgb
    import polars as pl
    import s3fs
    from deltalake import DeltaTable

    fs = s3fs.S3FileSystem()
    boosters = {}
    for path in fs.glob(f"{models_prefix.rstrip('/')}/*/model.txt"):
        segment = path.split("/")[-2]
        boosters[segment] = lgb.Booster(model_str=fs.cat(path).decode())

    active = pl.from_arrow(
        DeltaTable(f"s3://{lake_bucket}/delta/subscribers").to_pyarrow_table(filters=[("status", "=", "active")])
    )
    parts = []
    for segment, booster in boosters.items():
        seg = active.filter(pl.col("segment") == segment)
        X = seg.select(booster.feature_name()).to_pandas()
        parts.append(seg.select("msisdn").with_columns(pl.Series("p_churn", booster.predict(X)), pl.lit(segment).alias("segment")))
    out = pl.concat(parts).with_columns(pl.lit(month).alias("month"))
    with fs.open(scores_uri, "wb") as f:
        out.write_parquet(f)


@dsl.container_component
def handoff_to_crm(scores_uri: str, crm_uri: str):
    return dsl.ContainerSpec(
        image="amazon/aws-cli:2.17.20",
        command=["aws"],
        args=[
            "s3", "cp", scores_uri, crm_uri,
            "--sse", "aws:kms",
            "--sse-kms-key-id", "alias/crm-inbound",
            "--acl", "bucket-owner-full-control",
        ],
    )


@dsl.pipeline(name="churn-segment-models", description="Monthly per-segment churn models and CRM score hand-off")
def churn_segment_models(
    month: str = "2025-05",
    lake_bucket: str = "acme-telco-lake",
    segments: list = ["prepaid", "postpaid", "smb"],
    min_auc: float = 0.78,
):
    feats = build_features(month=month, lake_bucket=lake_bucket)
    feats.set_cpu_limit("8").set_memory_limit("48Gi")

    with dsl.ParallelFor(items=segments, parallelism=3) as segment:
        train = train_segment(
            features=feats.outputs["features"],
            segment=segment,
            model_dir=f"s3://acme-telco-models/churn/{month}/{segment}/",
        )
        train.set_retry(num_retries=2, backoff_duration="30s")

    gate = release_gate(aucs=dsl.Collected(train.output))

    with dsl.If(gate.outputs["min_auc"] >= min_auc, name="auc-gate"):
        score = batch_score(
            month=month,
            lake_bucket=lake_bucket,
            models_prefix=f"s3://acme-telco-models/churn/{month}/",
            scores_uri=f"s3://acme-telco-scores/churn/month={month}/scores.parquet",
        )
        score.set_cpu_limit("8").set_memory_limit("32Gi")
        handoff = handoff_to_crm(
            scores_uri=f"s3://acme-telco-scores/churn/month={month}/scores.parquet",
            crm_uri=f"s3://acme-crm-inbound/churn/scores_{month}.parquet",
        )
        handoff.after(score)
        handoff.set_caching_options(False)


if __name__ == "__main__":
    compiler.Compiler().compile(churn_segment_models, package_path=__file__.replace(".py", ".yaml"))
