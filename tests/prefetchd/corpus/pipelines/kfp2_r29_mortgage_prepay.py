# ruff: noqa
"""Mortgage prepayment model: Freddie Mac loan-level tapes per vintage + macro rates -> LightGBM CPR model, backtested on a later vintage."""
from typing import List, NamedTuple

from kfp import compiler, dsl, kubernetes
from kfp.dsl import Dataset, Input, Output

RISK_IMAGE = "registry.internal/mbs-risk/prepay:4.1.0"


@dsl.component(base_image=RISK_IMAGE)
def build_vintage(loan_tape_root: str, vintage: str, as_of: str):
    import pyarrow.dataset as ds

    tape = ds.dataset(f"{loan_tape_root}/vintage={vintage}/", format="parquet")
    df = tape.to_table(columns=["loan_id", "period", "upb", "rate", "fico", "ltv", "zb_code"]).to_pandas()
    df = df[df["period"] <= as_of.replace("-", "")[:6]]
    df["smm"] = (df["zb_code"] == "01").astype(int)
    df.to_parquet(f"s3://mbs-features/{as_of}/vintage={vintage}.parquet", index=False)


@dsl.component(base_image=RISK_IMAGE)
def join_macro(macro_uri: str, as_of: str, table: Output[Dataset]):
    import pandas as pd

    loans = pd.read_parquet(f"s3://mbs-features/{as_of}/")
    rates = pd.read_parquet(macro_uri)
    loans = loans.merge(rates[["period", "mortgage30us", "unrate"]], on="period", how="left")
    loans["incentive"] = loans["rate"] - loans["mortgage30us"]
    loans.to_parquet(table.path, index=False)


@dsl.component(base_image=RISK_IMAGE)
def train_lgbm(table: Input[Dataset], model_name: str, as_of: str) -> NamedTuple("Out", [("auc", float)]):
    import os
    from collections import namedtuple

    import boto3
    import fsspec
    import lightgbm as lgb
    import pandas as pd
    import yaml
    from sklearn.metrics import roc_auc_score

    with fsspec.open(os.environ["HPARAMS_URI"], "r") as f:
        params = yaml.safe_load(f)
    df = pd.read_parquet(table.path)
    train, valid = df[df["period"] < "202401"], df[df["period"] >= "202401"]
    feats = ["upb", "rate", "fico", "ltv", "incentive", "unrate"]
    booster = lgb.train(params, lgb.Dataset(train[feats], train["smm"]), num_boost_round=params.get("rounds", 800))
    auc = roc_auc_score(valid["smm"], booster.predict(valid[feats]))
    booster.save_model("/tmp/model.txt")
    boto3.client("s3").upload_file("/tmp/model.txt", "mbs-models", f"{model_name}/{as_of}/model.txt")
    return namedtuple("Out", ["auc"])(float(auc))


@dsl.container_component
def backtest(loan_tape_root: str, model_name: str, as_of: str):
    return dsl.ContainerSpec(
        image=RISK_IMAGE,
        command=["python", "-m", "prepay.backtest"],
        args=["--model", f"s3://mbs-models/{model_name}/{as_of}/model.txt",
              "--data", f"{loan_tape_root}/vintage=2022/",
              "--report", f"s3://mbs-reports/prepay/{as_of}/backtest.html"],
    )


@dsl.component(base_image="python:3.11-slim", packages_to_install=["requests"])
def notify_teams(model_name: str, as_of: str):
    import os

    import requests

    requests.post(os.environ["TEAMS_WEBHOOK"], json={"text": f"{model_name} {as_of} pipeline finished"}, timeout=15)


@dsl.pipeline(name="mortgage-prepayment-model")
def prepay(loan_tape_root: str = "s3://mbs-lake/freddie/standard",
           vintages: List[str] = ["2019", "2020", "2021"],
           macro_uri: str = "s3://mbs-lake/macro/fred_rates_monthly.parquet",
           as_of: str = "2025-06-30",
           model_name: str = "prepay-lgbm",
           min_auc: float = 0.78):
    bye = notify_teams(model_name=model_name, as_of=as_of)
    kubernetes.use_secret_as_env(bye, secret_name="risk-teams", secret_key_to_env={"url": "TEAMS_WEBHOOK"})

    with dsl.ExitHandler(bye):
        with dsl.ParallelFor(vintages) as v:
            vint = build_vintage(loan_tape_root=loan_tape_root, vintage=v, as_of=as_of)
            vint.set_memory_limit("64G")

        joined = join_macro(macro_uri=macro_uri, as_of=as_of).after(vint)
        model = train_lgbm(table=joined.outputs["table"], model_name=model_name, as_of=as_of)
        model.set_env_variable("HPARAMS_URI", "s3://mbs-config/prepay/lgbm_v4.yaml")
        model.set_cpu_limit("16")

        with dsl.If(model.outputs["auc"] >= min_auc):
            backtest(loan_tape_root=loan_tape_root, model_name=model_name, as_of=as_of)


if __name__ == "__main__":
    compiler.Compiler().compile(prepay, __file__.replace(".py", ".yaml"))
