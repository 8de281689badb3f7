# ruff: noqa
"""Job-marketplace search ranking: nightly LambdaMART retrain per market.

Impression/apply logs (Hive-partitioned parquet on S3) are joined with the
human relevance judgments and the job-embedding Delta table, one LightGBM
lambdarank model is trained per market, gated on NDCG@10, and pushed to the
ranking service's model bucket.

    /tmp/kfp2/bin/python kfp2_r11_job_ltr.py
"""
from typing import List

from kfp import compiler, dsl
from kfp.dsl import Dataset, Input, Model, Output

BASE = "python:3.11-slim"
LTR_IMAGE = "ghcr.io/acme-talent/ltr-train:2025.05.2"


@dsl.component(base_image=BASE, packages_to_install=["duckdb==1.1.3", "pyarrow==17.0.0"])
def extract_sessions(lake_root: str, log_date: str, sessions: Output[Dataset]):
    import duckdb

    con = duckdb.connect()
    con.execute("INSTALL httpfs; LOAD httpfs;")
    con.execute("CREATE SECRET (TYPE S3, PROVIDER CREDENTIAL_CHAIN);")
    con.execute(f"""
        COPY (
          SELECT i.market, i.search_id, i.query_norm, i.job_id, i.position,
                 coalesce(a.applied, false) AS applied, i.dwell_ms
          FROM read_parquet('{lake_root}/search_impressions/dt={log_date}/*.parquet') i
          LEFT JOIN (
            SELECT search_id, job_id, true AS applied
            FROM read_parquet('{lake_root}/applications/dt={log_date}/*.parquet')
          ) a USING (search_id, job_id)
          WHERE i.is_bot = false
        ) TO '{sessions.path}' (FORMAT PARQUET)
    """)


@dsl.component(base_image=LTR_IMAGE)
def train_ranker(sessions: Input[Dataset], judgments: Input[Dataset], market: str,
                 num_leaves: int, model: Output[Model]) -> float:
    import lightgbm as lgb
    import pandas as pd
    import polars as pl
    from deltalake import DeltaTable
    from ltr.features import build_features, group_sizes, ndcg_at_k

    sess = pl.read_parquet(sessions.path).filter(pl.col("market") == market)
    judg = pl.read_parquet(judgments.path).filter(pl.col("market") == market)
    emb = pl.from_arrow(
        DeltaTable("s3://acme-talent-features/delta/job_embeddings_v4")
        .to_pyarrow_table(partitions=[("market", "=", market)],
                          columns=["job_id", "title_emb", "skills_emb"]))
    df = build_features(sess, judg, emb).sort(["search_id", "position"])
    train, valid = df.filter(pl.col("fold") != 0), df.filter(pl.col("fold") == 0)

    ranker = lgb.LGBMRanker(objective="lambdarank", n_estimators=1500, num_leaves=num_leaves,
                            learning_rate=0.05, min_child_samples=50, label_gain=[0, 1, 3, 7])
    feats = [c for c in df.columns if c.startswith("f_")]
    ranker.fit(train[feats].to_pandas(), train["label"].to_numpy(),
               group=group_sizes(train), eval_set=[(valid[feats].to_pandas(), valid["label"].to_numpy())],
               eval_group=[group_sizes(valid)], eval_at=[10],
               callbacks=[lgb.early_stopping(100)])
    ranker.booster_.save_model(model.path)
    return float(ndcg_at_k(ranker, valid, feats, k=10))


@dsl.component(base_image=BASE, packages_to_install=["boto3==1.35.36"])
def push_model(model: Input[Model], market: str, log_date: str, ndcg: float):
    import boto3

    s3 = boto3.client("s3")
    key = f"ltr/{market}/{log_date}/model.txt"
    s3.upload_file(model.path, "acme-talent-models", key,
                   ExtraArgs={"Metadata": {"ndcg10": f"{ndcg:.4f}"}})
    # the ranking service hot-reloads whatever LATEST points at
    s3.put_object(Bucket="acme-talent-models", Key=f"ltr/{market}/LATEST", Body=key.encode())


@dsl.component(base_image=BASE, packages_to_install=["s3fs==2024.10.0", "pandas==2.2.3"])
def publish_report(ndcgs: List[float], markets: List[str], log_date: str):
    import pandas as pd

    df = pd.DataFrame({"market": markets, "ndcg10": ndcgs})
    df.to_json(f"s3://acme-talent-reports/ltr/{log_date}/summary.json", orient="records")
    print(df.to_markdown())


@dsl.component(base_image=BASE, packages_to_install=["requests==2.32.3"])
def notify_slack(status: dsl.PipelineTaskFinalStatus, channel: str):
    import os

    import requests

    requests.post(os.environ.get("SLACK_WEBHOOK", "https://hooks.slack.com/services/T000/B000/XXXX"),
                  json={"channel": channel,
                        "text": f"ltr-nightly {status.pipeline_job_resource_name}: {status.state}"},
                  timeout=10)


@dsl.pipeline(name="job-search-ltr-nightly")
def job_ltr(
    log_date: str = "2025-05-18",
    lake_root: str = "s3://acme-talent-lake/events",
    markets: List[str] = ["us", "uk", "de"],
    num_leaves: int = 63,
    min_ndcg: float = 0.42,
):
    exit_task = notify_slack(channel="#search-ranking-alerts")
    with dsl.ExitHandler(exit_task, name="ltr-nightly"):
        judgments = dsl.importer(
            artifact_uri="s3://acme-talent-lake/judgments/2025-04/graded_pairs.parquet",
            artifact_class=dsl.Dataset,
            reimport=False,
            metadata={"annotator_pool": "vendor-b", "scale": "0-3"},
        )
        sessions = extract_sessions(lake_root=lake_root, log_date=log_date)
        sessions.set_memory_limit("32Gi").set_cpu_limit("8")

        with dsl.ParallelFor(markets, parallelism=3) as market:
            ranker = train_ranker(sessions=sessions.outputs["sessions"],
                                  judgments=judgments.output, market=market,
                                  num_leaves=num_leaves)
            ranker.set_retry(num_retries=2, backoff_duration="60s")
            ranker.set_memory_limit("48Gi")
            with dsl.If(ranker.outputs["Output"] >= min_ndcg, name="ndcg-gate"):
                push_model(model=ranker.outputs["model"], market=market,
                           log_date=log_date, ndcg=ranker.outputs["Output"])

        publish_report(ndcgs=dsl.Collected(ranker.outputs["Output"]), markets=markets, log_date=log_date)


if __name__ == "__main__":
    compiler.Compiler().compile(job_ltr, __file__.replace(".py", ".yaml"))
