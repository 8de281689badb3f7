# ruff: noqa
"""Greenhouse tomato yield forecasting: Priva climate-computer logs + per-compartment harvest logs -> weekly
yield model (temporal fusion transformer) on a scratch volume -> 6-week forecast; model published when MAPE is low."""
import kfp
from kfp import dsl
from kfp.components import create_component_from_func

AGRI_IMAGE = "ghcr.io/agrivision/yield-ml:1.9.2"


def harvest_features(compartment: str, season: str):
    import os

    import pandas as pd

    log = pd.read_csv(f"s3://agri-harvest/{season}/{compartment}/harvest_log.csv", parse_dates=["date"])
    weekly = log.resample("W-MON", on="date").agg({"kg": "sum", "trusses": "sum", "fruit_weight_g": "mean"})
    weekly["compartment"] = compartment
    os.makedirs("/work/features", exist_ok=True)
    weekly.reset_index().to_parquet(f"/work/features/{compartment}.parquet", index=False)


def train_yield(season: str, epochs: int) -> float:
    import glob

    import boto3
    import pandas as pd
    import torch
    from yieldml.tft import fit_tft

    feats = pd.concat([pd.read_parquet(p) for p in sorted(glob.glob("/work/features/*.parquet"))])
    climate = pd.concat([pd.read_csv(p) for p in sorted(glob.glob("/work/climate/*.csv"))])
    model, mape = fit_tft(feats, climate, epochs=epochs, device="cuda")
    torch.save(model.state_dict(), "/tmp/model.pt")
    boto3.client("s3").upload_file("/tmp/model.pt", "agri-models", f"tomato-yield/{season}/model.pt")
    return float(mape)


harvest_op = create_component_from_func(harvest_features, base_image=AGRI_IMAGE)
train_op = create_component_from_func(train_yield, base_image=AGRI_IMAGE)


@dsl.pipeline(name="greenhouse-tomato-yield", description="Weekly tomato yield forecast per compartment")
def greenhouse_yield(season: str = "2025",
                     compartments: str = '["gh-a1", "gh-a2", "gh-b1", "gh-b2"]',
                     epochs: int = 40,
                     max_mape: float = 0.12):
    vop = dsl.VolumeOp(name="workspace", resource_name="gh-work", size="100Gi", modes=dsl.VOLUME_MODE_RWO)

    pull = dsl.ContainerOp(
        name="pull-climate",
        image="amazon/aws-cli:2.17.0",
        command=["aws", "s3", "sync"],
        arguments=[f"s3://agri-sensors/priva/{season}/", "/work/climate/", "--exclude", "*", "--include", "*.csv"],
        pvolumes={"/work": vop.volume},
    )

    with dsl.ParallelFor(compartments) as comp:
        feats = harvest_op(compartment=comp, season=season).add_pvolumes({"/work": vop.volume})

    train = train_op(season=season, epochs=epochs).add_pvolumes({"/work": pull.pvolume})
    train.after(feats)
    train.set_gpu_limit(1)
    train.add_node_selector_constraint("cloud.google.com/gke-accelerator", "nvidia-l4")
    train.set_memory_limit("48G")

    forecast = dsl.ContainerOp(
        name="forecast-weekly",
        image=AGRI_IMAGE,
        command=["python", "-m", "yieldml.forecast"],
        arguments=["--model", f"s3://agri-models/tomato-yield/{season}/model.pt",
                   "--weather", "s3://agri-weather/knmi/harmonie/latest_6w.nc",
                   "--horizon-weeks", "6",
                   "--output", f"s3://agri-forecasts/{season}/weekly_forecast.csv"],
    ).after(train)

    with dsl.Condition(train.output < max_mape):
        dsl.ContainerOp(
            name="publish-model",
            image="amazon/aws-cli:2.17.0",
            command=["aws", "s3", "cp"],
            arguments=[f"s3://agri-models/tomato-yield/{season}/model.pt", "s3://agri-serving/tomato-yield/current/model.pt"],
        ).after(forecast)


if __name__ == "__main__":
    kfp.compiler.Compiler().compile(greenhouse_yield, __file__.replace(".py", ".yaml"))
