# ruff: noqa
"""Early-warning model for student dropout: LMS activity + SIS enrollments -> XGBoost, scored per campus."""
from typing import NamedTuple

from kfp import compiler, dsl, kubernetes

IMAGE = "ghcr.io/edu-analytics/tabular:2025.01"


@dsl.component(base_image=IMAGE)
def build_features(lms_root: str, terms: str, sis_uri: str, out_uri: str) -> int:
    import pandas as pd

    frames = []
    for term in terms.split(","):
        df = pd.read_parquet(f"{lms_root}/term={term}/")
        df["term"] = term
        frames.append(df)
    events = pd.concat(frames, ignore_index=True)
    sis = pd.read_parquet(sis_uri)
    calendar = pd.read_csv("/ref/calendars/academic_calendar.csv", parse_dates=["start", "end"])

    weekly = (events.groupby(["student_id", "term", "week"])
              .agg(logins=("event_id", "count"), minutes=("duration_min", "sum"))
              .reset_index())
    feats = weekly.merge(sis, on="student_id", how="left")
    feats["n_weeks"] = len(calendar)
    feats.to_parquet(out_uri, index=False)
    return len(feats)


@dsl.component(base_image=IMAGE)
def train_model(features_uri: str, run_date: str, metrics: dsl.Output[dsl.Metrics]) -> NamedTuple("Out", [("auc", float)]):
    import os
    from collections import namedtuple

    import boto3
    import pandas as pd
    import xgboost as xgb
    from sklearn.metrics import roc_auc_score

    train = pd.read_parquet(features_uri)
    holdout = pd.read_parquet(os.environ["HOLDOUT_URI"])
    cols = [c for c in train.columns if c not in ("student_id", "term", "dropped_out")]
    model = xgb.XGBClassifier(n_estimators=400, max_depth=6, learning_rate=0.05)
    model.fit(train[cols], train["dropped_out"])
    auc = float(roc_auc_score(holdout["dropped_out"], model.predict_proba(holdout[cols])[:, 1]))
    metrics.log_metric("auc", auc)

    model.save_model("/tmp/model.json")
    boto3.client("s3").upload_file("/tmp/model.json", "edu-ml", f"dropout/models/{run_date}/model.json")
    return namedtuple("Out", ["auc"])(auc)


@dsl.component(base_image=IMAGE)
def score_campus(campus: str, run_date: str):
    import boto3
    import pandas as pd
    import xgboost as xgb

    boto3.client("s3").download_file("edu-ml", f"dropout/models/{run_date}/model.json", "/tmp/model.json")
    model = xgb.XGBClassifier()
    model.load_model("/tmp/model.json")
    roster = pd.read_parquet(f"s3://edu-lake/sis/active/{campus}/roster.parquet")
    cols = model.get_booster().feature_names
    roster["risk"] = model.predict_proba(roster[cols])[:, 1]
    roster[["student_id", "risk"]].to_csv(f"s3://edu-ml/dropout/{run_date}/scores/{campus}.csv", index=False)


@dsl.container_component
def promote_model(run_date: str):
    return dsl.ContainerSpec(
        image="amazon/aws-cli:2.17.0",
        command=["sh", "-c"],
        args=['aws s3 cp "s3://edu-ml/dropout/models/$0/model.json" s3://edu-serving/dropout/current/model.json', run_date],
    )


@dsl.container_component
def notify_advisors(run_date: str):
    return dsl.ContainerSpec(
        image="curlimages/curl:8.8.0",
        command=["sh", "-c"],
        args=['curl -sf -X POST -H "Content-Type: application/json" '
              '-d "{\\"text\\": \\"dropout scores for $0 are ready\\"}" "$WEBHOOK_URL"', run_date],
    )


@dsl.pipeline(name="student-dropout-early-warning")
def student_dropout(lms_root: str = "s3://edu-lake/lms/events",
                    terms: str = "2023-fall,2024-spring,2024-fall",
                    sis_uri: str = "s3://edu-lake/sis/enrollments/2025-01-15.parquet",
                    run_date: str = "2025-01-15",
                    min_auc: float = 0.75):
    notify = notify_advisors(run_date=run_date)
    kubernetes.use_secret_as_env(notify, secret_name="advisor-webhook", secret_key_to_env={"url": "WEBHOOK_URL"})

    with dsl.ExitHandler(notify):
        feats = build_features(lms_root=lms_root, terms=terms, sis_uri=sis_uri,
                               out_uri=f"s3://edu-ml/dropout/{run_date}/features.parquet")
        kubernetes.mount_pvc(feats, pvc_name="edu-shared-ref", mount_path="/ref")
        feats.set_memory_limit("32G")

        train = train_model(features_uri=f"s3://edu-ml/dropout/{run_date}/features.parquet", run_date=run_date)
        train.after(feats)
        train.set_env_variable("HOLDOUT_URI", "s3://edu-lake/holdout/cohort-2023-fall.parquet")

        with dsl.If(train.outputs["auc"] >= min_auc):
            promote_model(run_date=run_date)
            with dsl.ParallelFor(["north", "south", "online"]) as campus:
                score_campus(campus=campus, run_date=run_date)


if __name__ == "__main__":
    compiler.Compiler().compile(student_dropout, __file__.replace(".py", ".yaml"))
