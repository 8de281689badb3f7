# ruff: noqa
"""Tidal-stream power forecast for a turbine array (monthly retrain).

The month's ADCP current profiles and the Met Office UKV wind/pressure fields are pulled, the site's
bathymetry (registered with an importer from a pipeline parameter) and the tidal harmonic
constituents (on a shared claim) are joined into features, and either a Temporal Fusion Transformer
(fine-tuned on a GPU from the multi-site base model) or a LightGBM residual model is trained, as
the run asks; the chosen model is backtested against the array's SCADA power and the 48-hour
forecast published when the error is small. The grid operator's desk is told however it ends.
"""
import os

from kfp import compiler, dsl, kubernetes
from kfp.dsl import Dataset, Input, Model, Output

TIDE = "registry.tidewatch.energy/ml/tidewatch:5.2.1"
TIDE_GPU = "registry.tidewatch.energy/ml/tidewatch:5.2.1-cu121"


@dsl.component(base_image=TIDE)
def pull_adcp(adcp_root: str, site: str, month: str, adcp: Output[Dataset]):
    import pandas as pd

    df = pd.read_parquet(f"{adcp_root}/site={site}/month={month}/", columns=["ts", "depth_bin", "u", "v", "w"])
    df.to_parquet(adcp.path, index=False)


@dsl.container_component
def pull_met(month: str, met: Output[Dataset]):
    return dsl.ContainerSpec(
        image="amazon/aws-cli:2.17.0",
        command=["sh", "-c"],
        args=[
            'set -eu; mkdir -p "$(dirname "$1")"; '
            'aws s3 cp "s3://tidewatch-raw/met/ukv/$0/pentland_wind_pressure.nc" "$1" --only-show-errors',
            month,
            met.path,
        ],
    )


@dsl.component(base_image=TIDE)
def build_features(adcp: Input[Dataset], met: Input[Dataset], bathymetry: Input[Dataset], site: str,
                   features: Output[Dataset]):
    import json

    import pandas as pd
    import rioxarray
    import xarray as xr

    from tidewatch.features import make_features

    with open(f"/harmonics/{site}/constituents_2024.json") as f:
        cons = json.load(f)
    bathy = rioxarray.open_rasterio(bathymetry.path)
    met_ds = xr.open_dataset(met.path)
    feats = make_features(pd.read_parquet(adcp.path), met_ds, bathy, cons)
    feats.to_parquet(features.path, index=False)


@dsl.container_component
def train_tft(features: Input[Dataset], model: Output[Model]):
    return dsl.ContainerSpec(
        image=TIDE_GPU,
        command=["python", "-m", "tidewatch.train_tft"],
        args=[
            "--features", features.path,
            "--pretrained", "s3://tidewatch-models/tft/base-multisite-v3/",
            "--horizon-hours", "48",
            "--max-epochs", "40",
            "--model-out", model.path,
        ],
    )


@dsl.component(base_image=TIDE)
def train_gbm(features: Input[Dataset], site: str, model: Output[Model]):
    import os

    import lightgbm as lgb
    import pandas as pd

    from tidewatch.gbm import residual_frame

    curve = pd.read_csv(f"s3://tidewatch-ref/turbines/power_curve_{site}.csv")
    X, y = residual_frame(pd.read_parquet(features.path), curve)
    booster = lgb.train({"objective": "l2", "learning_rate": 0.03, "num_leaves": 63}, lgb.Dataset(X, y), 1500)
    os.makedirs(model.path, exist_ok=True)
    booster.save_model(os.path.join(model.path, "gbm.txt"))


@dsl.component(base_image=TIDE)
def backtest(model: Input[Model], features: Input[Dataset], site: str, month: str,
             forecast: Output[Dataset]) -> float:
    import pandas as pd

    from tidewatch.eval import load_any, mape

    power = pd.read_parquet(f"s3://tidewatch-scada/{site}/month={month}/power.parquet")
    fc = load_any(model.path).predict(pd.read_parquet(features.path))
    fc.to_parquet(forecast.path, index=False)
    return float(mape(power, fc))


@dsl.component(base_image=TIDE)
def publish_forecast(forecast: Input[Dataset], site: str, month: str):
    import pandas as pd

    fc = pd.read_parquet(forecast.path)
    fc.to_parquet(f"s3://tidewatch-forecasts/{site}/{month}/forecast_48h.parquet", index=False)


@dsl.container_component
def notify_desk(site: str, month: str):
    return dsl.ContainerSpec(
        image="curlimages/curl:8.8.0",
        command=["sh", "-c"],
        args=[
            'curl -sf -X POST -H "Content-Type: application/json" '
            '-d "{\\"text\\": \\"tidal forecast retrain for $0 ($1) finished\\"}" "$GRID_DESK_WEBHOOK"',
            site, month,
        ],
    )


@dsl.pipeline(name="tidal-stream-forecast")
def tidal_stream_forecast(
    site: str = "pentland-meygen",
    month: str = "2025-11",
    adcp_root: str = "s3://tidewatch-raw/adcp",
    bathy_uri: str = "s3://tidewatch-ref/bathymetry/meygen_2m.tif",
    harmonics_pvc: str = "tidewatch-harmonics",
    model_family: str = "tft",
    max_mape: float = 0.12,
):
    notify = notify_desk(site=site, month=month)
    kubernetes.use_secret_as_env(notify, secret_name="grid-desk", secret_key_to_env={"webhook": "GRID_DESK_WEBHOOK"})

    with dsl.ExitHandler(notify, name="retrain"):
        bathy = dsl.importer(artifact_uri=bathy_uri, artifact_class=dsl.Dataset, reimport=True)

        adcp = pull_adcp(adcp_root=adcp_root, site=site, month=month)
        adcp.set_caching_options(False)
        kubernetes.use_config_map_as_env(adcp, config_map_name="tidewatch-s3",
                                         config_map_key_to_env={"endpoint": "AWS_ENDPOINT_URL_S3"})
        kubernetes.use_secret_as_env(adcp, secret_name="tidewatch-aws",
                                     secret_key_to_env={"access_key_id": "AWS_ACCESS_KEY_ID",
                                                        "secret_access_key": "AWS_SECRET_ACCESS_KEY"})
        met = pull_met(month=month)

        feats = build_features(adcp=adcp.outputs["adcp"], met=met.outputs["met"], bathymetry=bathy.output, site=site)
        kubernetes.mount_pvc(feats, pvc_name=harmonics_pvc, mount_path="/harmonics")

        with dsl.If(model_family == "tft"):
            tft = train_tft(features=feats.outputs["features"])
            tft.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(1)
            tft.set_memory_limit("64G")
            kubernetes.add_node_selector(tft, label_key="tidewatch.energy/pool", label_value="gpu-a10g")
            kubernetes.add_toleration(tft, key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")
        with dsl.Else():
            gbm = train_gbm(features=feats.outputs["features"], site=site)
            gbm.set_cpu_limit("16")

        bt = backtest(model=dsl.OneOf(tft.outputs["model"], gbm.outputs["model"]),
                      features=feats.outputs["features"], site=site, month=month)
        bt.set_caching_options(False)
        kubernetes.use_config_map_as_env(bt, config_map_name="tidewatch-s3",
                                         config_map_key_to_env={"endpoint": "AWS_ENDPOINT_URL_S3"})

        with dsl.If(bt.outputs["Output"] < max_mape):
            pub = publish_forecast(forecast=bt.outputs["forecast"], site=site, month=month)
            pub.set_env_variable("AWS_REGION", "eu-west-2")


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    compiler.Compiler().compile(tidal_stream_forecast, os.path.join(here, "kfp2_r34_tidal_stream_forecast.yaml"))
