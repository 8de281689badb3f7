# ruff: noqa
"""Mobile game player lifetime value (LTV, day-90 revenue) per platform.
Raw client events of the day are sessionized with spark-submit (Delta packages, local mode on a big node), then a
PySpark component joins sessions, installs and the Delta payments table into the gold feature table, Dask profiles it
(data quality report), and when it passes one LTV model per platform is trained on a GPU warm-started from the
MLflow run of the last release and evaluated on a fixed holdout. When every platform clears the bar, players are
scored with Ray Data on the shared Ray cluster and the scores land in the marketing Delta table.
The live-ops channel is told however the run ends."""
from typing import List

from kfp import compiler, dsl, kubernetes

SPARK_IMAGE = "us-docker.pkg.dev/lumen-games/ml/spark-delta:3.5.3-py311"
LTV_IMAGE = "us-docker.pkg.dev/lumen-games/ml/ltv:2.8.0"
LTV_GPU_IMAGE = "us-docker.pkg.dev/lumen-games/ml/ltv:2.8.0-cu124"


@dsl.container_component
def sessionize_events(lake: str, ds: str):
    return dsl.ContainerSpec(
        image=SPARK_IMAGE,
        command=["/opt/spark/bin/spark-submit"],
        args=["--master", "local[16]",
              "--driver-memory", "48g",
              "--packages", "io.delta:delta-spark_2.12:3.2.0,org.apache.hadoop:hadoop-aws:3.3.4",
              "--conf", "spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension",
              "--conf", "spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog",
              "--conf", "spark.hadoop.fs.s3a.aws.credentials.provider=com.amazonaws.auth.WebIdentityTokenCredentialsProvider",
              "--conf", "spark.sql.shuffle.partitions=64",
              "/opt/ltv/jobs/sessionize.py",
              "--events", f"{lake}/events/dt={ds}/",
              "--gap-minutes", "30",
              "--output", f"s3a://lumen-lake/silver/sessions/dt={ds}/"],
    )


@dsl.component(base_image=SPARK_IMAGE)
def build_features(lake: str, ds: str, install_window_days: int) -> int:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    spark = (SparkSession.builder.appName(f"ltv-features-{ds}")
             .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
             .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
             .config("spark.sql.shuffle.partitions", "128")
             .getOrCreate())

    sessions = spark.read.parquet(f"s3a://lumen-lake/silver/sessions/dt={ds}/")
    installs = spark.read.json(f"{lake}/installs/dt={ds}/*.json.gz")
    payments = (spark.read.format("delta").load("s3a://lumen-lake/silver/payments")
                .where(F.col("dt") <= ds))
    fx = spark.read.option("header", "true").csv("s3a://lumen-ref/fx/usd_daily_2025.csv")

    cohort = installs.where(F.col("install_date") >= F.date_sub(F.lit(ds), install_window_days))
    spend = (payments.join(fx, ["currency", "dt"], "left")
             .withColumn("usd", F.col("amount") * F.col("usd_rate"))
             .groupBy("player_id").agg(F.sum("usd").alias("spend_usd"), F.count("*").alias("n_purchases")))
    play = sessions.groupBy("player_id").agg(F.count("*").alias("n_sessions"),
                                             F.sum("duration_s").alias("play_s"),
                                             F.max("level").alias("max_level"))
    feats = (cohort.join(play, "player_id", "left").join(spend, "player_id", "left")
             .fillna(0, ["spend_usd", "n_purchases", "n_sessions", "play_s"]))
    (feats.repartition("platform").write.mode("overwrite").partitionBy("platform")
     .parquet(f"s3a://lumen-lake/gold/ltv_features/dt={ds}/"))
    return feats.count()


@dsl.component(base_image=LTV_IMAGE)
def validate_features(ds: str, platforms: List[str]) -> str:
    import json

    import dask.dataframe as dd
    import fsspec

    ddf = dd.read_parquet(f"s3://lumen-lake/gold/ltv_features/dt={ds}/", storage_options={"anon": False})
    null_rates = ddf.isna().mean().compute().to_dict()
    rows = ddf.groupby("platform").size().compute().to_dict()
    with fsspec.open(f"s3://lumen-dq/ltv/{ds}/profile.json", "w") as f:
        json.dump({"null_rates": null_rates, "rows": rows}, f, default=float, indent=2)
    missing = [p for p in platforms if rows.get(p, 0) == 0]
    return "fail" if missing or max(null_rates.values()) > 0.2 else "pass"


@dsl.container_component
def train_ltv(ds: str, platform: str, mlflow_base: str):
    return dsl.ContainerSpec(
        image=LTV_GPU_IMAGE,
        command=["python", "-m", "ltv.train"],
        args=["--features", f"s3://lumen-lake/gold/ltv_features/dt={ds}/platform={platform}/",
              "--init-from", f"{mlflow_base}/ltv-{platform}/model/",
              "--epochs", "20",
              "--target", "revenue_d90",
              "--model-out", f"s3://lumen-models/ltv/{ds}/{platform}/"],
    )


@dsl.component(base_image=LTV_IMAGE, packages_to_install=["mlflow==2.18.0"])
def eval_ltv(ds: str, platform: str) -> float:
    import mlflow.pyfunc
    import pandas as pd
    from sklearn.metrics import r2_score

    model = mlflow.pyfunc.load_model(f"s3://lumen-models/ltv/{ds}/{platform}/")
    hold = pd.read_parquet(f"s3://lumen-lake/gold/ltv_holdout/platform={platform}/", storage_options={"anon": False})
    y = hold.pop("revenue_d90")
    return float(r2_score(y, model.predict(hold)))


@dsl.component(base_image="python:3.11-slim")
def gate(r2s: List[float], min_r2: float) -> str:
    return "promote" if min(r2s) >= min_r2 else "hold"


@dsl.component(base_image=LTV_IMAGE, packages_to_install=["ray[data]==2.40.0"])
def score_players(ds: str, platforms: List[str]):
    import os

    import ray

    from ltv.serving import LtvPredictor

    ray.init(address=os.environ["RAY_ADDRESS"])
    feats = ray.data.read_parquet(f"s3://lumen-lake/gold/ltv_features/dt={ds}/")
    scored = feats.map_batches(
        LtvPredictor,
        fn_constructor_kwargs={"model_root": f"s3://lumen-models/ltv/{ds}/", "platforms": platforms},
        batch_size=4096,
        concurrency=4,
        num_gpus=1,
    )
    scored.write_parquet(f"s3://lumen-serving/ltv-scores/dt={ds}/")


@dsl.component(base_image=LTV_IMAGE, packages_to_install=["deltalake==0.22.3"])
def export_delta(ds: str):
    import polars as pl
    from deltalake import write_deltalake

    scores = pl.read_parquet(f"s3://lumen-serving/ltv-scores/dt={ds}/*.parquet").with_columns(pl.lit(ds).alias("dt"))
    write_deltalake("s3://lumen-warehouse/marketing/player_ltv", scores.to_arrow(), mode="overwrite",
                    partition_by=["dt"], predicate=f"dt = '{ds}'",
                    storage_options={"AWS_S3_ALLOW_UNSAFE_RENAME": "true"})


@dsl.component(base_image="python:3.11-slim", packages_to_install=["requests==2.32.3"])
def notify(ds: str, status: dsl.PipelineTaskFinalStatus):
    import os

    import requests

    requests.post(os.environ["SLACK_WEBHOOK_URL"],
                  json={"text": f"ltv {ds}: {status.state} ({status.pipeline_job_resource_name})"}, timeout=10)


def aws(task):
    kubernetes.use_secret_as_env(task, secret_name="lumen-ml-aws",
                                 secret_key_to_env={"access_key_id": "AWS_ACCESS_KEY_ID",
                                                    "secret_access_key": "AWS_SECRET_ACCESS_KEY"})
    return task


@dsl.pipeline(name="player-ltv-daily")
def player_ltv(ds: str = "2025-12-01",
               lake: str = "s3a://lumen-lake/bronze",
               platforms: List[str] = ["ios", "android"],
               mlflow_base: str = "s3://lumen-mlflow/artifacts/12/0c9d7e51a2b84f3e/artifacts",
               min_r2: float = 0.35,
               install_window_days: int = 7):
    done = notify(ds=ds)
    kubernetes.use_secret_as_env(done, secret_name="liveops-slack", secret_key_to_env={"webhook": "SLACK_WEBHOOK_URL"})

    with dsl.ExitHandler(done, name="ltv-daily"):
        sess = aws(sessionize_events(lake=lake, ds=ds)).set_cpu_limit("16").set_memory_limit("64G")
        feats = aws(build_features(lake=lake, ds=ds, install_window_days=install_window_days)).after(sess)
        feats.set_cpu_limit("16").set_memory_limit("96G")
        val = aws(validate_features(ds=ds, platforms=platforms)).after(feats)

        with dsl.If(val.output == "pass", name="features-ok"):
            with dsl.ParallelFor(platforms, parallelism=2) as platform:
                tr = aws(train_ltv(ds=ds, platform=platform, mlflow_base=mlflow_base))
                tr.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(1).set_memory_limit("64G")
                kubernetes.add_node_selector(tr, label_key="cloud.google.com/gke-accelerator", label_value="nvidia-l4")
                kubernetes.add_toleration(tr, key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")
                ev = aws(eval_ltv(ds=ds, platform=platform)).after(tr)

            g = gate(r2s=dsl.Collected(ev.output), min_r2=min_r2)

            with dsl.If(g.output == "promote", name="promote"):
                sc = aws(score_players(ds=ds, platforms=platforms))
                kubernetes.use_config_map_as_env(sc, config_map_name="ray-cluster",
                                                 config_map_key_to_env={"address": "RAY_ADDRESS"})
                aws(export_delta(ds=ds)).after(sc)


if __name__ == "__main__":
    compiler.Compiler().compile(player_ltv, __file__.replace(".py", ".yaml"))
