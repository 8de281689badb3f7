# ruff: noqa
"""Retail-credit probability-of-default (PD) model refresh, quarterly snapshot.

Bureau extract + application data -> WoE/behavioural features on a scratch
volume -> XGBoost and LightGBM challengers -> champion/challenger on OOT Gini
-> promote winner. KFP v1 SDK (kfp 1.8.24).

    /tmp/kfp1/bin/python kfp1_r11_credit_pd.py
"""
import kfp
from kfp import dsl
from kfp.components import create_component_from_func

PY = "python:3.10-slim"
ML = "ghcr.io/acme-credit/risk-ml:4.2.1"


def pull_applications(snapshot: str, out_dir: str) -> int:
    import os

    import pandas as pd

    df = pd.read_parquet(
        f"s3://acme-credit-lake/applications/snapshot={snapshot}/",
        columns=["app_id", "customer_id", "product", "app_date", "income", "dti",
                 "loan_amount", "term", "default_12m"],
    )
    os.makedirs(out_dir, exist_ok=True)
    df.to_parquet(f"{out_dir}/applications.parquet", index=False)
    return len(df)


def build_features(out_dir: str, snapshot: str) -> str:
    import json

    import pandas as pd
    from riskml.woe import WoEBinner

    apps = pd.read_parquet(f"{out_dir}/applications.parquet")
    bureau = pd.read_csv(f"{out_dir}/bureau/tradelines.csv.gz", dtype={"customer_id": str})
    macro = pd.read_csv("s3://acme-credit-ref/macro/fred_monthly.csv", parse_dates=["month"])
    agg = bureau.groupby("customer_id").agg(
        n_trades=("trade_id", "count"), max_dpd=("dpd", "max"),
        util=("balance", "sum"), limit=("credit_limit", "sum"))
    agg["util"] = agg["util"] / agg["limit"].clip(lower=1)
    df = apps.merge(agg, on="customer_id", how="left")
    df["app_month"] = df["app_date"].dt.to_period("M").dt.to_timestamp()
    df = df.merge(macro, left_on="app_month", right_on="month", how="left")
    binner = WoEBinner(target="default_12m", max_bins=8).fit(df)
    binner.transform(df).to_parquet(f"{out_dir}/features.parquet", index=False)
    return json.dumps({"rows": len(df), "snapshot": snapshot})


def train_pd(out_dir: str, algo: str, max_depth: int, model_root: str, snapshot: str) -> float:
    import json

    import joblib
    import pandas as pd
    import s3fs
    from riskml.metrics import gini
    from riskml.split import oot_split

    df = pd.read_parquet(f"{out_dir}/features.parquet")
    train, oot = oot_split(df, date_col="app_date", oot_months=3)
    X, y = train.filter(like="woe_"), train["default_12m"]
    if algo == "xgboost":
        import xgboost as xgb
        model = xgb.XGBClassifier(n_estimators=600, max_depth=max_depth, learning_rate=0.03,
                                  subsample=0.8, eval_metric="auc", monotone_constraints=None)
    else:
        import lightgbm as lgb
        model = lgb.LGBMClassifier(n_estimators=800, max_depth=max_depth, learning_rate=0.03,
                                   num_leaves=2 ** max_depth - 1)
    model.fit(X, y)
    g = gini(oot["default_12m"], model.predict_proba(oot.filter(like="woe_"))[:, 1])
    fs = s3fs.S3FileSystem()
    dest = f"{model_root}{snapshot}/{algo}"
    with fs.open(f"{dest}/model.joblib", "wb") as f:
        joblib.dump(model, f)
    with fs.open(f"{dest}/metrics.json", "w") as f:
        json.dump({"oot_gini": g, "algo": algo}, f)
    return g


def champion_challenger(model_root: str, snapshot: str, min_uplift: float) -> str:
    import json

    import s3fs

    fs = s3fs.S3FileSystem()
    champ = json.load(fs.open(f"{model_root}champion/metrics.json"))
    best = max((json.load(fs.open(f"{model_root}{snapshot}/{a}/metrics.json"))
                for a in ("xgboost", "lightgbm")), key=lambda m: m["oot_gini"])
    print(f"champion {champ['oot_gini']:.4f} vs best challenger {best['algo']} {best['oot_gini']:.4f}")
    return best["algo"] if best["oot_gini"] - champ["oot_gini"] >= min_uplift else "hold"


pull_applications_op = create_component_from_func(
    pull_applications, base_image=PY, packages_to_install=["pandas==2.2.3", "pyarrow==17.0.0", "s3fs==2024.6.1"])
build_features_op = create_component_from_func(build_features, base_image=ML)
train_pd_op = create_component_from_func(train_pd, base_image=ML)
champion_challenger_op = create_component_from_func(
    champion_challenger, base_image=PY, packages_to_install=["s3fs==2024.6.1"])


@dsl.pipeline(name="credit-pd-refresh", description="Quarterly PD model refresh with champion/challenger")
def credit_pd(
    snapshot: str = "2025-06-30",
    bureau_bucket: str = "acme-credit-bureau",
    model_root: str = "s3://acme-credit-models/pd/",
    min_uplift: float = 0.005,
):
    vop = dsl.VolumeOp(
        name="create-workspace",
        resource_name="credit-work",
        size="100Gi",
        modes=dsl.VOLUME_MODE_RWO,
        storage_class="gp3",
    )

    report = dsl.ContainerOp(
        name="report-status",
        image="curlimages/curl:8.8.0",
        command=["sh", "-c"],
        arguments=['curl -sf -X POST -H "Content-Type: application/json" '
                   '-d "{\\"text\\": \\"credit-pd-refresh {{workflow.name}} finished: {{workflow.status}}\\"}" '
                   '"$TEAMS_WEBHOOK"'],
    )
    report.container.add_env_variable(
        kfp.dsl._container_op.V1EnvVar(
            name="TEAMS_WEBHOOK",
            value_from={"secretKeyRef": {"name": "risk-notify", "key": "teams_webhook"}}))

    with dsl.ExitHandler(report):
        bureau = dsl.ContainerOp(
            name="pull-bureau",
            image="amazon/aws-cli:2.17.0",
            command=["sh", "-c"],
            arguments=[
                f"aws s3 sync s3://{bureau_bucket}/experian/snapshot={snapshot}/ /mnt/data/bureau/ "
                "--exclude '*' --include 'tradelines*.csv.gz' --only-show-errors"
            ],
            pvolumes={"/mnt/data": vop.volume},
        )

        apps = pull_applications_op(snapshot=snapshot, out_dir="/mnt/data")
        apps.add_pvolumes({"/mnt/data": vop.volume})

        feats = build_features_op(out_dir="/mnt/data", snapshot=snapshot).after(bureau, apps)
        feats.add_pvolumes({"/mnt/data": vop.volume})
        feats.set_memory_request("24Gi").set_memory_limit("32Gi")

        with dsl.ParallelFor([{"algo": "xgboost", "depth": 5}, {"algo": "lightgbm", "depth": 6}]) as cfg:
            train = train_pd_op(out_dir="/mnt/data", algo=cfg.algo, max_depth=cfg.depth,
                                model_root=model_root, snapshot=snapshot).after(feats)
            train.add_pvolumes({"/mnt/data": vop.volume})
            train.set_cpu_request("8").set_memory_limit("32Gi")
            train.set_retry(2)

        cc = champion_challenger_op(model_root=model_root, snapshot=snapshot,
                                    min_uplift=min_uplift).after(train)

        with dsl.Condition(cc.output != "hold", name="promote-winner"):
            dsl.ContainerOp(
                name="promote",
                image="amazon/aws-cli:2.17.0",
                command=["sh", "-c"],
                arguments=[
                    f"aws s3 sync --delete {model_root}{snapshot}/{cc.output}/ {model_root}champion/ && "
                    f"echo {snapshot}/{cc.output} | aws s3 cp - {model_root}champion/SOURCE"
                ],
            )


if __name__ == "__main__":
    kfp.compiler.Compiler().compile(credit_pd, __file__.replace(".py", ".yaml"))
