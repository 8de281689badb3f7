# ruff: noqa
"""30-day hospital readmission risk: nightly EHR extract (encounters + diagnoses) -> cohort with CCSR groups from a
reference claim -> candidate models per algorithm config -> pick the best -> fairness audit when AUC clears the bar."""
from typing import NamedTuple

from kfp import compiler, dsl, kubernetes
from kfp.dsl import Dataset, Input, Output

EHR_IMAGE = "registry.health.internal/ml/readmit:3.2.0"


@dsl.component(base_image=EHR_IMAGE)
def extract_cohort(ehr_root: str, extract_date: str, lookback_days: int, cohort: Output[Dataset]):
    import pandas as pd

    enc = pd.read_parquet(f"{ehr_root}/dt={extract_date}/encounters.parquet")
    dx = pd.read_parquet(f"{ehr_root}/dt={extract_date}/diagnoses.parquet")
    ccsr = pd.read_csv("/ref/icd10/ccsr_mapping_v2025.csv", dtype=str)
    dx = dx.merge(ccsr, left_on="icd10_code", right_on="icd10", how="left")
    enc = enc[enc["discharge_date"] >= pd.Timestamp(extract_date) - pd.Timedelta(days=lookback_days)]
    feats = enc.merge(dx.pivot_table(index="encounter_id", columns="ccsr_category", aggfunc="size", fill_value=0),
                      on="encounter_id", how="left")
    feats.to_parquet(cohort.path, index=False)


@dsl.component(base_image=EHR_IMAGE)
def train_candidate(cohort: Input[Dataset], algo: str, config_uri: str, extract_date: str):
    import json

    import fsspec
    import joblib
    import pandas as pd
    import s3fs
    import yaml
    from readmit.models import fit

    with fsspec.open(config_uri, "r") as f:
        cfg = yaml.safe_load(f)
    df = pd.read_parquet(cohort.path)
    model, auc = fit(algo, df, label="readmit_30d", **cfg)
    joblib.dump(model, "/tmp/model.joblib")
    fs = s3fs.S3FileSystem()
    fs.put("/tmp/model.joblib", f"s3://ehr-ml-models/readmit/{extract_date}/{algo}/model.joblib")
    with fs.open(f"s3://ehr-ml-models/readmit/{extract_date}/{algo}/metrics.json", "w") as f:
        json.dump({"algo": algo, "auc": auc}, f)


@dsl.component(base_image=EHR_IMAGE)
def select_best(extract_date: str) -> NamedTuple("Best", [("algo", str), ("auc", float)]):
    import json
    from collections import namedtuple

    import s3fs

    fs = s3fs.S3FileSystem()
    scores = []
    for path in fs.glob(f"s3://ehr-ml-models/readmit/{extract_date}/*/metrics.json"):
        with fs.open(path) as f:
            scores.append(json.load(f))
    best = max(scores, key=lambda s: s["auc"])
    return namedtuple("Best", ["algo", "auc"])(best["algo"], float(best["auc"]))


@dsl.container_component
def fairness_audit(extract_date: str, algo: str):
    return dsl.ContainerSpec(
        image=EHR_IMAGE,
        command=["python", "-m", "readmit.fairness"],
        args=["--model", f"s3://ehr-ml-models/readmit/{extract_date}/{algo}/model.joblib",
              "--demographics", "s3://ehr-lake/curated/patients/demographics.parquet",
              "--protected", "sex,race,payer",
              "--report", f"s3://ehr-ml-reports/readmit/{extract_date}/fairness.html"],
    )


@dsl.component(base_image="python:3.11-slim", packages_to_install=["requests==2.32.3"])
def notify_oncall(extract_date: str):
    import os

    import requests

    requests.post(os.environ["PAGER_WEBHOOK"], json={"summary": f"readmission pipeline {extract_date} finished"}, timeout=10)


@dsl.pipeline(name="readmission-risk-nightly")
def readmission(ehr_root: str = "s3://ehr-lake/curated/encounters",
                extract_date: str = "2025-08-31",
                lookback_days: int = 730,
                min_auc: float = 0.74):
    bye = notify_oncall(extract_date=extract_date)
    kubernetes.use_secret_as_env(bye, secret_name="oncall-pager", secret_key_to_env={"webhook": "PAGER_WEBHOOK"})

    with dsl.ExitHandler(bye, name="readmit-run"):
        coh = extract_cohort(ehr_root=ehr_root, extract_date=extract_date, lookback_days=lookback_days)
        coh.set_memory_limit("96G").set_cpu_limit("16")
        kubernetes.mount_pvc(coh, pvc_name="ehr-reference", mount_path="/ref")

        with dsl.ParallelFor([
            {"algo": "lgbm", "config": "s3://ehr-ml-config/readmit/lgbm_v3.yaml"},
            {"algo": "ebm", "config": "s3://ehr-ml-config/readmit/ebm_v1.yaml"},
            {"algo": "logreg", "config": "s3://ehr-ml-config/readmit/logreg_l1.yaml"},
        ]) as cand:
            tr = train_candidate(cohort=coh.outputs["cohort"], algo=cand.algo, config_uri=cand.config,
                                 extract_date=extract_date)
            tr.set_memory_limit("64G")

        best = select_best(extract_date=extract_date).after(tr)
        with dsl.If(best.outputs["auc"] >= min_auc, name="auc-gate"):
            fairness_audit(extract_date=extract_date, algo=best.outputs["algo"])


if __name__ == "__main__":
    compiler.Compiler().compile(readmission, __file__.replace(".py", ".yaml"))
