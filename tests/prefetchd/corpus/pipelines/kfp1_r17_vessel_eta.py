# ruff: noqa
"""Port arrival ETA model from AIS tracks (monthly retrain, one port).

AIS positions for the month are synced to a per-run volume, voyages are cut
against the port-call register and enriched with wave hindcasts, a gradient
boosted ETA regressor is trained and checked per shipping lane, and the model
is published when its R^2 clears the bar.
"""
import kfp
from kfp import dsl
from kubernetes.client.models import V1EnvVar
from kfp.components import InputPath, OutputPath, create_component_from_func

LANES = [
    {"lane": "north-sea", "holdout": "s3://oceanlane-ml/eta/holdout/north-sea_2025-04.parquet"},
    {"lane": "baltic", "holdout": "s3://oceanlane-ml/eta/holdout/baltic_2025-04.parquet"},
    {"lane": "channel", "holdout": "s3://oceanlane-ml/eta/holdout/channel_2025-04.parquet"},
]
ETA_IMAGE = "ghcr.io/oceanlane/eta-model:3.0.4"


def fetch_port_calls(port: str, month: str, port_calls_path: OutputPath("CSV")):
    import boto3

    boto3.client("s3").download_file(
        "oceanlane-port-data", f"calls/{port}/{month}.csv", port_calls_path
    )


def build_voyages(port_calls_path: InputPath("CSV"), month: str, ais_dir: str = "/data/ais"):
    import pandas as pd
    import polars as pl
    import xarray as xr

    calls = pl.from_pandas(pd.read_csv(port_calls_path, parse_dates=["ata", "atd"]))
    pings = pl.scan_parquet(f"{ais_dir}/*.parquet").filter(pl.col("sog") > 0.5).collect()
    voyages = pings.join_asof(calls.sort("ata"), left_on="ts", right_on="ata", by="mmsi", strategy="forward")

    waves = xr.open_zarr(f"gs://oceanlane-metocean/gfs-wave/{month}.zarr", consolidated=True)
    hs = waves["swh"].sel(
        latitude=xr.DataArray(voyages["lat"].to_numpy(), dims="p"),
        longitude=xr.DataArray(voyages["lon"].to_numpy(), dims="p"),
        time=xr.DataArray(voyages["ts"].to_numpy(), dims="p"),
        method="nearest",
    )
    voyages = voyages.with_columns(pl.Series("swh", hs.values))
    voyages.write_parquet("/data/voyages.parquet")


fetch_port_calls_op = create_component_from_func(fetch_port_calls, base_image="python:3.10-slim",
                                                 packages_to_install=["boto3==1.34.131"])
build_voyages_op = create_component_from_func(build_voyages, base_image=ETA_IMAGE)


@dsl.pipeline(name="port-arrival-eta", description="Monthly AIS-based ETA retrain for one port")
def vessel_eta_pipeline(
    ais_uri: str = "s3://oceanlane-ais/decoded/2025/05/",
    port: str = "NLRTM",
    month: str = "2025-05",
    min_r2: float = 0.8,
):
    notify = dsl.ContainerOp(
        name="notify-ops",
        image="curlimages/curl:8.8.0",
        command=["sh", "-c"],
        arguments=['curl -sf -X POST -d "port-arrival-eta {{workflow.name}} {{workflow.status}}" "$OPS_WEBHOOK"'],
    )
    notify.container.add_env_variable(V1EnvVar(name="OPS_WEBHOOK", value="https://hooks.oceanlane.io/ml-ops"))

    with dsl.ExitHandler(notify):
        vop = dsl.VolumeOp(
            name="ais-workspace",
            resource_name="ais-ws",
            size="80Gi",
            modes=dsl.VOLUME_MODE_RWO,
            storage_class="gp3",
        )

        sync = dsl.ContainerOp(
            name="sync-ais",
            image="amazon/aws-cli:2.17.0",
            command=["aws", "s3", "sync"],
            arguments=[ais_uri, "/data/ais/", "--exclude", "*", "--include", "*.parquet", "--only-show-errors"],
            pvolumes={"/data": vop.volume},
        )

        calls = fetch_port_calls_op(port=port, month=month)

        voyages = build_voyages_op(port_calls=calls.outputs["port_calls"], month=month)
        voyages.add_pvolumes({"/data": sync.pvolume})
        voyages.set_memory_limit("48G")

        train = dsl.ContainerOp(
            name="train-eta",
            image=ETA_IMAGE,
            command=["python", "-m", "eta.train"],
            arguments=[
                "--train-data", "/data/voyages.parquet",
                "--port", port,
                "--model-dir", "/data/model",
                "--metrics-file", "/tmp/r2.txt",
            ],
            pvolumes={"/data": voyages.pvolume},
            file_outputs={"r2": "/tmp/r2.txt"},
        )

        with dsl.ParallelFor(LANES) as lane:
            dsl.ContainerOp(
                name="evaluate-lane",
                image=ETA_IMAGE,
                command=["python", "-m", "eta.evaluate"],
                arguments=[
                    "--model-dir", "/data/model",
                    "--holdout", lane.holdout,
                    "--lane", lane.lane,
                ],
                pvolumes={"/data": train.pvolume},
            )

        with dsl.Condition(train.outputs["r2"] >= min_r2):
            dsl.ContainerOp(
                name="publish-model",
                image="amazon/aws-cli:2.17.0",
                command=["sh", "-c"],
                arguments=[
                    'aws s3 cp /data/model/ "s3://oceanlane-ml/eta/models/$0/$1/" --recursive',
                    port,
                    month,
                ],
                pvolumes={"/data": train.pvolume},
            )


if __name__ == "__main__":
    kfp.compiler.Compiler().compile(vessel_eta_pipeline, __file__.replace(".py", ".yaml"))
