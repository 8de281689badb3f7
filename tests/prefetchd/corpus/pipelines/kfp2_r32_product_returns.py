# ruff: noqa
"""E-commerce product returns: monthly return-risk model per category.
Orders and returns of the month are joined in DuckDB straight from the lake, the product catalog snapshot is scanned
with polars, features are built (carrier zone map through smart_open), one XGBoost model per category is trained on a
GPU warm-started from the MLflow run of last quarter, evaluated on a Hugging Face parquet holdout, gated on the
collected AUCs, and when the gate passes published to serving and used to score the open orders of the day.
The team channel is told however the run ends."""
from typing import List

from kfp import compiler, dsl, kubernetes
from kfp.dsl import Dataset, Input, Output

RR_IMAGE = "europe-docker.pkg.dev/shopco-ml/returns/returns-risk:3.4.1"


@dsl.component(base_image=RR_IMAGE)
def extract_orders(lake: str, as_of: str, orders: Output[Dataset]):
    import duckdb

    month = as_of[:7]
    con = duckdb.connect()
    con.execute("INSTALL httpfs; LOAD httpfs; CREATE SECRET (TYPE S3, PROVIDER CREDENTIAL_CHAIN);")
    con.execute(f"""
        COPY (
            SELECT o.order_id, o.sku, o.customer_id, o.price, o.ship_zone, o.ordered_at,
                   r.return_reason, r.returned_at IS NOT NULL AS returned
            FROM read_parquet('{lake}/orders/month={month}/*.parquet') AS o
            LEFT JOIN read_parquet('{lake}/returns/month={month}/*.parquet') AS r USING (order_id)
        ) TO '{orders.path}' (FORMAT PARQUET)
    """)


@dsl.component(base_image=RR_IMAGE)
def load_catalog(as_of: str, catalog: Output[Dataset]):
    import polars as pl

    storage = {"aws_region": "eu-west-1"}
    products = (
        pl.scan_parquet(f"s3://shopco-catalog/products/snapshot={as_of}/*.parquet", storage_options=storage)
        .select(["sku", "category", "brand", "size_system", "material", "list_price"])
        .filter(pl.col("category").is_not_null())
    )
    charts = pl.read_csv("s3://shopco-catalog/size-charts/size_charts_v3.csv", storage_options=storage)
    products.collect().join(charts, on=["brand", "size_system"], how="left").write_parquet(catalog.path)


@dsl.component(base_image=RR_IMAGE)
def build_features(orders: Input[Dataset], catalog: Input[Dataset], as_of: str, features: Output[Dataset]):
    import json

    import polars as pl
    from smart_open import open as sopen

    from returns_risk.features import add_customer_history, add_zone_features

    with sopen("s3://shopco-ref/carriers/zone_map_2025.json", "r") as f:
        zones = json.load(f)
    df = pl.read_parquet(orders.path).join(pl.read_parquet(catalog.path), on="sku", how="inner")
    df = add_zone_features(add_customer_history(df), zones)
    df.write_parquet(features.path)
    df.write_parquet(f"s3://shopco-features/returns/{as_of}/features.parquet")


@dsl.container_component
def train_category(features: Input[Dataset], category: str, warm_start_uri: str, as_of: str,
                   auc_file: dsl.OutputPath(str)):
    return dsl.ContainerSpec(
        image=RR_IMAGE,
        command=["python", "-m", "returns_risk.train"],
        args=["--features", features.path,
              "--category", category,
              "--init-model", f"{warm_start_uri}/{category}/model.ubj",
              "--output-dir", f"s3://shopco-models/returns/{as_of}/{category}/",
              "--tree-method", "gpu_hist",
              "--auc-file", auc_file],
    )


@dsl.component(base_image=RR_IMAGE)
def eval_category(category: str, as_of: str) -> float:
    import fsspec
    import xgboost as xgb
    from datasets import load_dataset
    from sklearn.metrics import roc_auc_score

    booster = xgb.Booster()
    with fsspec.open(f"s3://shopco-models/returns/{as_of}/{category}/model.ubj", "rb") as f:
        booster.load_model(bytearray(f.read()))
    hold = load_dataset("parquet", data_files={"test": f"s3://shopco-holdout/returns/{category}/*.parquet"},
                        split="test", storage_options={"anon": False}).to_pandas()
    y = hold.pop("returned")
    return float(roc_auc_score(y, booster.predict(xgb.DMatrix(hold))))


@dsl.component(base_image="python:3.11-slim")
def gate(aucs: List[float], min_auc: float) -> str:
    return "release" if min(aucs) >= min_auc else "hold"


@dsl.container_component
def publish_models(as_of: str, registered_model: str):
    return dsl.ContainerSpec(
        image=RR_IMAGE,
        command=["python", "-m", "returns_risk.publish"],
        args=["--models", f"s3://shopco-models/returns/{as_of}/",
              "--registered-model", registered_model,
              "--export", "s3://shopco-serving/returns-risk/current/"],
    )


@dsl.component(base_image=RR_IMAGE)
def score_open_orders(lake: str, as_of: str):
    import os

    import boto3
    import polars as pl
    import xgboost as xgb
    from smart_open import open as sopen

    bucket, root = lake[5:].split("/", 1)
    s3 = boto3.client("s3")
    os.makedirs("/tmp/open", exist_ok=True)
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{root}/open-orders/dt={as_of}/"):
        for obj in page.get("Contents", []):
            s3.download_file(bucket, obj["Key"], os.path.join("/tmp/open", os.path.basename(obj["Key"])))
    booster = xgb.Booster()
    with sopen("s3://shopco-serving/returns-risk/current/model.ubj", "rb") as f:
        booster.load_model(bytearray(f.read()))
    df = pl.read_parquet("/tmp/open/*.parquet")
    df = df.with_columns(pl.Series("return_risk", booster.predict(xgb.DMatrix(df.drop("order_id").to_pandas()))))
    df.select(["order_id", "return_risk"]).write_parquet(f"s3://shopco-ops/returns-risk/{as_of}/scores.parquet")


@dsl.component(base_image="python:3.11-slim", packages_to_install=["requests==2.32.3"])
def notify(as_of: str, status: dsl.PipelineTaskFinalStatus):
    import os

    import requests

    requests.post(os.environ["SLACK_WEBHOOK_URL"],
                  json={"text": f"returns-risk {as_of}: {status.state} ({status.pipeline_job_resource_name})"}, timeout=10)


@dsl.pipeline(name="returns-risk-monthly")
def returns_risk(as_of: str = "2025-11-30",
                 lake: str = "s3://shopco-lake/curated",
                 warm_start_uri: str = "s3://shopco-mlflow/artifacts/27/9f3c1e2ab4d14c6f/artifacts/returns-xgb",
                 categories: List[str] = ["apparel", "footwear", "home"],
                 min_auc: float = 0.78,
                 registered_model: str = "models:/returns-risk/Staging"):
    done = notify(as_of=as_of)
    kubernetes.use_secret_as_env(done, secret_name="ml-slack", secret_key_to_env={"webhook": "SLACK_WEBHOOK_URL"})

    with dsl.ExitHandler(done, name="returns-monthly"):
        orders = extract_orders(lake=lake, as_of=as_of).set_memory_limit("32G").set_cpu_limit("8")
        catalog = load_catalog(as_of=as_of)
        feats = build_features(orders=orders.outputs["orders"], catalog=catalog.outputs["catalog"], as_of=as_of)
        feats.set_memory_limit("64G")

        with dsl.ParallelFor(categories, parallelism=3) as cat:
            tr = train_category(features=feats.outputs["features"], category=cat, warm_start_uri=warm_start_uri,
                                as_of=as_of)
            tr.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(1).set_memory_limit("48G")
            kubernetes.add_node_selector(tr, label_key="cloud.google.com/gke-accelerator", label_value="nvidia-l4")
            ev = eval_category(category=cat, as_of=as_of).after(tr)

        g = gate(aucs=dsl.Collected(ev.output), min_auc=min_auc)

        with dsl.If(g.output == "release", name="release"):
            pub = publish_models(as_of=as_of, registered_model=registered_model)
            score_open_orders(lake=lake, as_of=as_of).after(pub)


if __name__ == "__main__":
    compiler.Compiler().compile(returns_risk, __file__.replace(".py", ".yaml"))
