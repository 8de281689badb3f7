# ruff: noqa
"""Consumer-credit collections: nightly promise-to-pay (PTP) propensity models per delinquency bucket.
Waits for the lake's partitions, builds features (with bureau attributes from a shared claim), checks drift against
the champion, trains and evaluates one LightGBM per DPD bucket, compares with the champion, promotes or raises an
alert, and scores tomorrow's dialer call list. An audit record is written however the run ends."""
from typing import List, NamedTuple

from kfp import compiler, dsl, kubernetes
from kfp.dsl import Dataset, HTML, Input, Metrics, Model, Output

CC_IMAGE = "123456789012.dkr.ecr.eu-west-1.amazonaws.com/collections/ptp:2.8.3"


@dsl.component(base_image=CC_IMAGE)
def check_partitions(lake_root: str, as_of: str):
    import s3fs

    fs = s3fs.S3FileSystem()
    missing = [t for t in ["accounts", "payments", "contacts"]
               if not fs.exists(f"{lake_root}/{t}/dt={as_of}/_SUCCESS")]
    if missing:
        raise RuntimeError(f"partitions not ready for {as_of}: {missing}")


@dsl.component(base_image=CC_IMAGE)
def build_features(lake_root: str, as_of: str, feature_set: str, features: Output[Dataset]):
    import pandas as pd
    from ptp.features import assemble

    tables = {t: pd.read_parquet(f"{lake_root}/{t}/dt={as_of}/") for t in ["accounts", "payments", "contacts"]}
    bureau = pd.read_parquet(f"/bureau/{as_of[:7]}/bureau_attributes.parquet")
    df = assemble(tables["accounts"], tables["payments"], tables["contacts"], bureau)
    df.to_parquet(features.path, index=False)
    df.to_parquet(f"s3://cc-feature-store/ptp/{feature_set}/dt={as_of}/features.parquet", index=False)


@dsl.component(base_image=CC_IMAGE)
def validate_features(features: Input[Dataset], champion_uri: str, report: Output[HTML]) -> float:
    import json

    import fsspec
    import pandas as pd
    from ptp.drift import population_stability

    df = pd.read_parquet(features.path)
    with fsspec.open(f"{champion_uri.rstrip('/')}/feature_stats.json", "r") as f:
        ref = json.load(f)
    psi, html = population_stability(df, ref)
    with open(report.path, "w") as f:
        f.write(html)
    if psi > 0.25:
        raise ValueError(f"feature drift too high: PSI={psi:.3f}")
    return float(psi)


@dsl.component(base_image=CC_IMAGE)
def train_segment(features: Input[Dataset], segment: str, as_of: str, model: Output[Model]):
    import boto3
    import fsspec
    import lightgbm as lgb
    import pandas as pd
    import yaml

    with fsspec.open(f"s3://cc-config/ptp/params/{segment}.yaml", "r") as f:
        params = yaml.safe_load(f)
    df = pd.read_parquet(features.path)
    df = df[df["dpd_bucket"] == segment]
    booster = lgb.train(params, lgb.Dataset(df.drop(columns=["ptp_kept"]), df["ptp_kept"]))
    booster.save_model(model.path)
    boto3.client("s3").upload_file(model.path, "cc-models", f"ptp/{as_of}/{segment}/model.txt")


@dsl.component(base_image=CC_IMAGE)
def eval_segment(model: Input[Model], segment: str, metrics: Output[Metrics]) -> float:
    import lightgbm as lgb
    import pandas as pd
    from sklearn.metrics import roc_auc_score

    hold = pd.read_parquet(f"s3://cc-holdout/ptp/{segment}/latest.parquet")
    booster = lgb.Booster(model_file=model.path)
    gini = 2 * roc_auc_score(hold["ptp_kept"], booster.predict(hold.drop(columns=["ptp_kept"]))) - 1
    metrics.log_metric("gini", gini)
    return float(gini)


@dsl.component(base_image=CC_IMAGE)
def compare_champion(ginis: List[float], champion_uri: str, min_gini: float) -> NamedTuple(
        "Decision", [("decision", str), ("mean_gini", float)]):
    import json
    from collections import namedtuple

    import fsspec

    with fsspec.open(champion_uri + "metrics.json", "r") as f:
        champ = json.load(f)
    mean_gini = sum(ginis) / len(ginis)
    promote = mean_gini >= min_gini and mean_gini > champ["mean_gini"] + 0.005
    return namedtuple("Decision", ["decision", "mean_gini"])("promote" if promote else "hold", mean_gini)


@dsl.container_component
def promote_models(as_of: str, champion_uri: str):
    return dsl.ContainerSpec(
        image="amazon/aws-cli:2.17.0",
        command=["sh", "-c", 'aws s3 sync "$0" "$1" --delete --only-show-errors'],
        args=[f"s3://cc-models/ptp/{as_of}/", champion_uri],
    )


@dsl.component(base_image="python:3.11-slim", packages_to_install=["requests==2.32.3"])
def hold_alert(as_of: str, mean_gini: float):
    import os

    import requests

    requests.post(os.environ["TEAMS_WEBHOOK"], json={"text": f"PTP {as_of}: champion kept (challenger gini {mean_gini:.3f})"},
                  timeout=10)


@dsl.container_component
def score_call_list(champion_uri: str, lake_root: str, as_of: str):
    return dsl.ContainerSpec(
        image=CC_IMAGE,
        command=["python", "-m", "ptp.score"],
        args=["--model", champion_uri,
              "--accounts", f"{lake_root}/accounts/dt={as_of}/",
              "--output", f"s3://cc-dialer/call-lists/{as_of}/ptp_scores.csv",
              "--top-k", "40000"],
    )


@dsl.component(base_image=CC_IMAGE)
def record_run(as_of: str, feature_set: str):
    import json

    import boto3

    boto3.client("s3").put_object(Bucket="cc-ml-audit", Key=f"ptp/runs/{as_of}.json",
                                  Body=json.dumps({"as_of": as_of, "feature_set": feature_set}).encode())


@dsl.pipeline(name="collections-ptp-nightly")
def collections_ptp(as_of: str = "2025-11-28",
                    lake_root: str = "s3://cc-datalake/collections",
                    feature_set: str = "fs-v12",
                    champion_uri: str = "s3://cc-model-registry/ptp/champion/",
                    min_gini: float = 0.45):
    audit = record_run(as_of=as_of, feature_set=feature_set)

    with dsl.ExitHandler(audit, name="ptp-nightly"):
        ready = check_partitions(lake_root=lake_root, as_of=as_of)
        ready.set_retry(num_retries=6, backoff_duration="600s", backoff_factor=1.0)

        feats = build_features(lake_root=lake_root, as_of=as_of, feature_set=feature_set).after(ready)
        feats.set_memory_limit("64G").set_cpu_limit("16")
        kubernetes.mount_pvc(feats, pvc_name="cc-bureau-snapshots", mount_path="/bureau")

        drift = validate_features(features=feats.outputs["features"], champion_uri=champion_uri)

        with dsl.ParallelFor(["dpd_1_30", "dpd_31_60", "dpd_61_90"]) as seg:
            tr = train_segment(features=feats.outputs["features"], segment=seg, as_of=as_of).after(drift)
            tr.set_memory_limit("32G").set_cpu_limit("8")
            ev = eval_segment(model=tr.outputs["model"], segment=seg)

        cmp = compare_champion(ginis=dsl.Collected(ev.outputs["Output"]), champion_uri=champion_uri, min_gini=min_gini)

        with dsl.If(cmp.outputs["decision"] == "promote", name="promote"):
            promote_models(as_of=as_of, champion_uri=champion_uri)
        with dsl.Else(name="keep-champion"):
            alert = hold_alert(as_of=as_of, mean_gini=cmp.outputs["mean_gini"])
            kubernetes.use_secret_as_env(alert, secret_name="ml-alerts", secret_key_to_env={"teams": "TEAMS_WEBHOOK"})

        score = score_call_list(champion_uri=champion_uri, lake_root=lake_root, as_of=as_of).after(cmp)
        score.set_memory_limit("32G")


if __name__ == "__main__":
    compiler.Compiler().compile(collections_ptp, __file__.replace(".py", ".yaml"))
