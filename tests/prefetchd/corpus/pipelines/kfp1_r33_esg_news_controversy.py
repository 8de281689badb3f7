# ruff: noqa
"""ESG controversy detection from news for an asset manager's stewardship desk (daily).
The day's GDELT GKG mirror is parsed and filtered to the investable universe by a PySpark job submitted to the
Spark-on-Kubernetes cluster (spark-submit with event logs in S3), near-duplicate articles are removed with Dask,
companies are linked per region (Dask + alias tables through smart_open), the FinBERT-ESG classifier is staged on a
volume and scores the mentions on a GPU, precision is checked on the analysts' gold labels and, when good enough,
the controversies are appended to the Delta table the portfolio managers query. The desk is told however it ends."""
import kfp
from kfp import dsl
from kfp.aws import use_aws_secret
from kfp.components import create_component_from_func
from kubernetes import client as k8s

ESG_IMAGE = "ghcr.io/verdant-am/esg-nlp:4.3.1"


def dedup_articles(run_date: str) -> int:
    import dask.dataframe as dd

    from esg.text import minhash_dedup

    arts = dd.read_parquet(f"s3://verdant-lake/esg/articles/dt={run_date}/",
                           columns=["article_id", "url", "title", "body", "lang", "published"],
                           storage_options={"anon": False})
    kept = minhash_dedup(arts, threshold=0.85, num_perm=128)
    kept.to_parquet(f"s3://verdant-lake/esg/articles_dedup/dt={run_date}/", write_index=False, overwrite=True)
    return int(kept.shape[0].compute())


def link_entities(run_date: str, region: str, universe_uri: str):
    import dask.dataframe as dd
    import pandas as pd
    from smart_open import open as sopen

    from esg.entities import AliasMatcher

    universe = pd.read_csv(universe_uri, dtype={"isin": str})
    universe = universe[universe["region"] == region]
    with sopen(f"s3://verdant-ref/aliases/{region}.jsonl", "r") as f:
        matcher = AliasMatcher.from_jsonl(f, universe)
    arts = dd.read_parquet(f"s3://verdant-lake/esg/articles_dedup/dt={run_date}/")
    mentions = arts.map_partitions(matcher.link, meta=matcher.meta)
    mentions.to_parquet(f"s3://verdant-lake/esg/mentions/dt={run_date}/region={region}/", write_index=False)


def eval_labels(run_date: str) -> float:
    import pandas as pd
    from sklearn.metrics import precision_score

    gold = pd.read_parquet("s3://verdant-labels/esg/gold/controversies_2025q4.parquet")
    pred = pd.read_parquet(f"s3://verdant-lake/esg/scores/dt={run_date}/",
                           columns=["article_id", "isin", "controversy", "severity"])
    m = gold.merge(pred, on=["article_id", "isin"], how="inner")
    return float(precision_score(m["label"], m["controversy"]))


def publish_controversies(run_date: str, min_severity: float):
    import pandas as pd
    from deltalake import write_deltalake

    scores = pd.read_parquet(f"s3://verdant-lake/esg/scores/dt={run_date}/")
    hits = scores[(scores["controversy"] == 1) & (scores["severity"] >= min_severity)].assign(dt=run_date)
    write_deltalake("s3://verdant-warehouse/esg/controversies", hits, mode="append", partition_by=["dt"])


dedup_op = create_component_from_func(dedup_articles, base_image=ESG_IMAGE)
link_op = create_component_from_func(link_entities, base_image=ESG_IMAGE)
eval_op = create_component_from_func(eval_labels, base_image=ESG_IMAGE)
publish_op = create_component_from_func(publish_controversies, base_image=ESG_IMAGE)

STAGE = """set -euo pipefail
aws s3 sync "s3://verdant-models/finbert-esg/$0/" /models/finbert-esg/ --only-show-errors
cd /models/finbert-esg && sha256sum -c SHA256SUMS
"""


@dsl.pipeline(name="esg-news-controversy", description="Daily ESG controversy detection from news")
def esg_news(run_date: str = "2025-12-03",
             news_root: str = "s3://verdant-news/gdelt/gkg",
             universe_uri: str = "s3://verdant-ref/universe/msci_acwi_2025q4.csv",
             regions: str = '["emea", "amer", "apac"]',
             model_version: str = "v7",
             min_precision: float = 0.8,
             min_severity: float = 0.6):
    notify = dsl.ContainerOp(
        name="notify-pm-desk",
        image="curlimages/curl:8.8.0",
        command=["sh", "-c"],
        arguments=['curl -fsS -X POST -H "Content-Type: application/json" '
                   '-d "{\\"text\\": \\"ESG controversies $0 finished\\"}" "$TEAMS_WEBHOOK"', run_date],
    )
    notify.container.add_env_variable(k8s.V1EnvVar(
        name="TEAMS_WEBHOOK",
        value_from=k8s.V1EnvVarSource(secret_key_ref=k8s.V1SecretKeySelector(name="stewardship-teams", key="webhook"))))

    with dsl.ExitHandler(notify):
        etl = dsl.ContainerOp(
            name="news-etl",
            image="ghcr.io/verdant-am/spark:3.5.3-hadoop3.3.4",
            command=["/opt/spark/bin/spark-submit"],
            arguments=[
                "--master", "k8s://https://kubernetes.default.svc:443",
                "--deploy-mode", "client",
                "--name", "esg-news-etl",
                "--conf", "spark.kubernetes.namespace=$(SPARK_NAMESPACE)",
                "--conf", "spark.kubernetes.container.image=ghcr.io/verdant-am/spark:3.5.3-hadoop3.3.4",
                "--conf", "spark.executor.instances=8",
                "--conf", "spark.executor.memory=14g",
                "--conf", "spark.hadoop.fs.s3a.aws.credentials.provider=com.amazonaws.auth.WebIdentityTokenCredentialsProvider",
                "--conf", "spark.eventLog.enabled=true",
                "--conf", "spark.eventLog.dir=s3a://verdant-spark-history/esg/",
                "--py-files", "s3a://verdant-code/esg/esg_etl-1.4.2.zip",
                "s3a://verdant-code/esg/jobs/news_etl.py",
                "--gkg", f"{news_root}/{run_date}/",
                "--universe", universe_uri,
                "--languages", "en,de,fr",
                "--output", f"s3a://verdant-lake/esg/articles/dt={run_date}/",
            ],
        )
        etl.container.add_env_variable(k8s.V1EnvVar(
            name="SPARK_NAMESPACE",
            value_from=k8s.V1EnvVarSource(config_map_key_ref=k8s.V1ConfigMapKeySelector(name="spark-defaults",
                                                                                       key="namespace"))))
        etl.apply(use_aws_secret("verdant-aws"))
        etl.set_memory_limit("16G")

        dedup = dedup_op(run_date=run_date).after(etl).apply(use_aws_secret("verdant-aws"))
        dedup.set_memory_limit("64G").set_cpu_limit("16")

        with dsl.ParallelFor(regions) as region:
            link = link_op(run_date=run_date, region=region, universe_uri=universe_uri).after(dedup)
            link.apply(use_aws_secret("verdant-aws"))

        cache = dsl.VolumeOp(name="model-cache", resource_name="finbert-cache", size="20Gi",
                             modes=dsl.VOLUME_MODE_RWO, storage_class="gp3")

        stage = dsl.ContainerOp(
            name="stage-model",
            image="amazon/aws-cli:2.17.0",
            command=["sh", "-c"],
            arguments=[STAGE, model_version],
            pvolumes={"/models": cache.volume},
        ).apply(use_aws_secret("verdant-aws"))

        score = dsl.ContainerOp(
            name="score-sentiment",
            image="ghcr.io/verdant-am/esg-nlp:4.3.1-cu121",
            command=["python", "-m", "esg.score"],
            arguments=["--mentions", f"s3://verdant-lake/esg/mentions/dt={run_date}/",
                       "--model", "/models/finbert-esg",
                       "--batch-size", "256",
                       "--output", f"s3://verdant-lake/esg/scores/dt={run_date}/"],
            pvolumes={"/models": stage.pvolume},
        ).after(link).apply(use_aws_secret("verdant-aws"))
        score.set_gpu_limit(1)
        score.add_node_selector_constraint("node.kubernetes.io/instance-type", "g5.2xlarge")

        ev = eval_op(run_date=run_date).after(score).apply(use_aws_secret("verdant-aws"))

        with dsl.Condition(ev.output >= min_precision):
            publish_op(run_date=run_date, min_severity=min_severity).apply(use_aws_secret("verdant-aws"))


if __name__ == "__main__":
    kfp.compiler.Compiler().compile(esg_news, __file__.replace(".py", ".yaml"))
