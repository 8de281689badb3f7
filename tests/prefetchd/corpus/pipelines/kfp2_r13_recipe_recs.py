# ruff: noqa
"""Nightly two-tower retrieval model for recipe recommendations (TF Recommenders + ScaNN)."""
from kfp import compiler, dsl, kubernetes
from kfp.dsl import Dataset, Input, Metrics, Model, Output


@dsl.component(
    base_image="python:3.11-slim",
    packages_to_install=["polars==1.2.1", "gcsfs==2024.6.1", "pyarrow==16.1.0"],
)
def build_training_pairs(
    interactions_uri: str,
    recipes: Input[Dataset],
    lookback_days: int,
    train: Output[Dataset],
    val: Output[Dataset],
):
    import polars as pl

    events = pl.scan_parquet(f"{interactions_uri}part-*.parquet")
    catalog = pl.read_parquet(recipes.path).select(["recipe_id", "cuisine", "title", "tags"])
    pos = (
        events.filter(pl.col("event").is_in(["cook", "save", "rate_4plus"]))
        .filter(pl.col("age_days") <= lookback_days)
        .select(["user_id", "recipe_id", "ts"])
        .collect()
        .join(catalog, on="recipe_id", how="inner")
    )
    cutoff = pos["ts"].quantile(0.95)
    pos.filter(pl.col("ts") < cutoff).write_parquet(train.path)
    pos.filter(pl.col("ts") >= cutoff).write_parquet(val.path)


@dsl.container_component
def train_two_tower(
    train: Input[Dataset],
    recipes: Input[Dataset],
    embedding_dim: int,
    model: Output[Model],
):
    return dsl.ContainerSpec(
        image="us-docker.pkg.dev/tastebud-ml/images/two-tower-trainer:2025.05.2",
        command=["python", "/app/train.py"],
        args=[
            "--train", train.path,
            "--items", recipes.path,
            "--embedding-dim", embedding_dim,
            "--epochs", "6",
            "--batch-size", "8192",
            "--export-dir", model.path,
        ],
    )


@dsl.component(
    base_image="tensorflow/tensorflow:2.16.1",
    packages_to_install=["tensorflow-recommenders==0.7.3", "pandas==2.2.2", "pyarrow==16.1.0"],
)
def eval_recall(model: Input[Model], val: Input[Dataset], k: int, metrics: Output[Metrics]) -> float:
    import numpy as np
    import pandas as pd
    import tensorflow as tf

    m = tf.saved_model.load(model.path)
    df = pd.read_parquet(val.path)
    _, top = m.signatures["retrieve"](user_id=tf.constant(df["user_id"].values), k=tf.constant(k)).values()
    hits = np.any(top.numpy().astype(str) == df["recipe_id"].values[:, None], axis=1)
    recall = float(hits.mean())
    metrics.log_metric(f"recall_at_{k}", recall)
    return recall


@dsl.container_component
def build_scann_index(model: Input[Model], recipes: Input[Dataset], run_date: str):
    return dsl.ContainerSpec(
        image="us-docker.pkg.dev/tastebud-ml/images/two-tower-trainer:2025.05.2",
        command=["python", "/app/build_index.py"],
        args=[
            "--model", model.path,
            "--items", recipes.path,
            "--num-leaves", "2000",
            "--output", dsl.ConcatPlaceholder(["gs://tastebud-ml-serving/scann/", run_date, "/"]),
        ],
    )


@dsl.component(base_image="python:3.11-slim", packages_to_install=["requests==2.32.3"])
def notify_slack(run_date: str, status: dsl.PipelineTaskFinalStatus):
    import os

    import requests

    requests.post(
        os.environ["SLACK_WEBHOOK_URL"],
        json={"text": f"recipe-recs {run_date}: {status.state} ({status.pipeline_job_resource_name})"},
        timeout=10,
    )


@dsl.pipeline(name="recipe-two-tower-nightly")
def recipe_recs(
    interactions_uri: str = "gs://tastebud-ml-data/interactions/dt=2025-05-31/",
    recipes_uri: str = "gs://tastebud-ml-data/catalog/recipes_v7.parquet",
    run_date: str = "2025-05-31",
    embedding_dim: int = 128,
    lookback_days: int = 90,
    min_recall: float = 0.32,
):
    notify = notify_slack(run_date=run_date)
    kubernetes.use_secret_as_env(notify, secret_name="slack-webhook", secret_key_to_env={"url": "SLACK_WEBHOOK_URL"})

    with dsl.ExitHandler(notify, name="nightly"):
        recipes = dsl.importer(
            artifact_uri=recipes_uri,
            artifact_class=Dataset,
            reimport=False,
            metadata={"catalog_version": "v7"},
        )
        pairs = build_training_pairs(
            interactions_uri=interactions_uri,
            recipes=recipes.output,
            lookback_days=lookback_days,
        )
        pairs.set_memory_limit("64G").set_cpu_limit("16")

        trainer = train_two_tower(
            train=pairs.outputs["train"], recipes=recipes.output, embedding_dim=embedding_dim
        )
        trainer.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(1)
        trainer.set_env_variable("TEXT_ENCODER_URI", "gs://tastebud-ml-models/text-encoders/all-MiniLM-L6-v2/")
        trainer.set_env_variable("TF_FORCE_GPU_ALLOW_GROWTH", "true")
        kubernetes.add_node_selector(trainer, label_key="cloud.google.com/gke-accelerator", label_value="nvidia-l4")

        evaluation = eval_recall(model=trainer.outputs["model"], val=pairs.outputs["val"], k=50)

        with dsl.If(evaluation.outputs["Output"] >= min_recall, name="recall-ok"):
            build_scann_index(model=trainer.outputs["model"], recipes=recipes.output, run_date=run_date)


if __name__ == "__main__":
    compiler.Compiler().compile(recipe_recs, __file__.replace(".py", ".yaml"))
