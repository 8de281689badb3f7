# ruff: noqa
"""Coffee roast quality: Artisan roast-curve telemetry + cupping scores -> XGBoost cup-score regressor, scored per roaster."""
import kfp
from kfp import dsl, onprem
from kfp.components import InputPath, OutputPath, create_component_from_func
from kubernetes import client as k8s

ROAST_IMAGE = "ghcr.io/roastlab/ml:2025.3"


def cupping_scores(season: str, scores_csv: OutputPath("CSV")):
    import pandas as pd

    cup = pd.read_excel(f"s3://roastlab-qc/cupping/{season}/scores.xlsx", sheet_name="SCA")
    cup = cup.dropna(subset=["batch_id", "total"])
    cup[["batch_id", "total", "acidity", "body", "sweetness"]].to_csv(scores_csv, index=False)


def featurize(season: str, scores_csv: InputPath("CSV")):
    import glob

    import pandas as pd
    from roastlab.curves import curve_features

    rows = []
    for path in sorted(glob.glob(f"/cache/artisan/{season}/*.alog")):
        rows.append(curve_features(path))
    feats = pd.DataFrame(rows).merge(pd.read_csv(scores_csv), on="batch_id", how="inner")
    feats.to_parquet(f"s3://roastlab-features/{season}/roast_features.parquet", index=False)


def score_roaster(roaster: str, season: str):
    import pandas as pd
    import s3fs
    import xgboost as xgb

    fs = s3fs.S3FileSystem()
    fs.get(f"s3://roastlab-models/{season}/model.json", "/tmp/model.json")
    booster = xgb.Booster()
    booster.load_model("/tmp/model.json")
    live = pd.read_parquet(f"s3://roastlab-telemetry/live/{roaster}/latest.parquet")
    live["pred_cup"] = booster.predict(xgb.DMatrix(live.drop(columns=["batch_id"])))
    live[["batch_id", "pred_cup"]].to_csv("/tmp/scores.csv", index=False)
    fs.put("/tmp/scores.csv", f"s3://roastlab-reports/{season}/{roaster}.csv")


cupping_op = create_component_from_func(cupping_scores, base_image=ROAST_IMAGE)
featurize_op = create_component_from_func(featurize, base_image=ROAST_IMAGE)
score_op = create_component_from_func(score_roaster, base_image=ROAST_IMAGE)


@dsl.pipeline(name="coffee-roast-quality", description="Predict cup score from roast curves")
def roast_pipeline(season: str = "2025-q2", max_rmse: str = "0.45", n_estimators: str = "600"):
    sync = dsl.ContainerOp(
        name="sync-telemetry",
        image="peakcom/s5cmd:v2.2.2",
        command=["/s5cmd"],
        arguments=["--numworkers", "16", "cp", f"s3://roastlab-telemetry/artisan/{season}/*", f"/cache/artisan/{season}/"],
    ).apply(onprem.mount_pvc("roastlab-cache", "cache", "/cache"))

    cup = cupping_op(season=season)
    feats = featurize_op(season=season, scores_csv=cup.outputs["scores_csv"]).after(sync)
    feats.apply(onprem.mount_pvc("roastlab-cache", "cache", "/cache"))

    train = dsl.ContainerOp(
        name="train-xgb",
        image=ROAST_IMAGE,
        command=["python", "/app/train.py"],
        arguments=["--features", f"s3://roastlab-features/{season}/roast_features.parquet",
                   "--n-estimators", n_estimators,
                   "--model-dir", f"s3://roastlab-models/{season}/",
                   "--metrics-file", "/tmp/rmse.txt"],
        file_outputs={"rmse": "/tmp/rmse.txt"},
    ).after(feats)
    train.set_gpu_limit(1)
    train.container.add_env_variable(k8s.V1EnvVar(name="XGB_TREE_METHOD", value="gpu_hist"))

    with dsl.Condition(train.outputs["rmse"] < max_rmse):
        dsl.ContainerOp(
            name="publish-model",
            image="amazon/aws-cli:2.17.0",
            command=["aws", "s3", "cp"],
            arguments=[f"s3://roastlab-models/{season}/model.json", "s3://roastlab-serving/cup-score/current/model.json"],
        )

    with dsl.ParallelFor(["probat-p12", "loring-s35", "giesen-w15"]) as roaster:
        score_op(roaster=roaster, season=season).after(train)


if __name__ == "__main__":
    kfp.compiler.Compiler().compile(roast_pipeline, __file__.replace(".py", ".yaml"))
