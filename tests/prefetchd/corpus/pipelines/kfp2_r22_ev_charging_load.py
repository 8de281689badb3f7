# ruff: noqa
"""Site-level EV charging load forecasting from OCPP session logs (KFP v2 + kfp-kubernetes)."""
from typing import List
from kfp import compiler, dsl, kubernetes

PY = "ghcr.io/voltgrid/ev-ml:2025.07"


@dsl.component(base_image=PY)
def list_sites(network: str, min_sessions: int) -> List[str]:
    import boto3
    s3 = boto3.client("s3")
    paginator = s3.get_paginator("list_objects_v2")
    sites = []
    for page in paginator.paginate(Bucket="ev-sessions", Prefix=f"ocpp/{network}/", Delimiter="/"):
        for cp in page.get("CommonPrefixes", []):
            sites.append(cp["Prefix"].rstrip("/").rsplit("/", 1)[-1])
    return sorted(sites)


@dsl.component(base_image=PY)
def build_site_features(network: str, site: str, tariff_uri: str):
    import pathlib
    import polars as pl
    sessions = pl.scan_parquet(f"s3://ev-sessions/ocpp/{network}/{site}/sessions/*.parquet")
    tariffs = pl.read_csv(tariff_uri)
    hourly = (sessions.with_columns(pl.col("start_ts").dt.truncate("1h").alias("hour"))
              .group_by("hour").agg(pl.col("energy_kwh").sum()).collect()
              .join(tariffs, on="hour", how="left"))
    out = pathlib.Path("/features") / network / f"{site}.parquet"
    out.parent.mkdir(parents=True, exist_ok=True)
    hourly.write_parquet(str(out))


@dsl.component(base_image=PY)
def train_forecaster(network: str, horizon_h: int) -> float:
    import json
    import os
    import subprocess
    cmd = ["python", "-m", "evload.train",
           "--features", os.path.join("/features", network),
           "--weather", f"s3://ev-weather/era5-land/{network}/2024-2025.zarr",
           "--horizon", str(horizon_h),
           "--save-model", f"s3://ev-models/{network}/lgbm/",
           "--metrics-file", "/tmp/metrics.json"]
    subprocess.run(cmd, check=True)
    with open("/tmp/metrics.json") as f:
        return float(json.load(f)["mape"])


@dsl.container_component
def publish_forecaster(network: str):
    return dsl.ContainerSpec(
        image="amazon/aws-cli:2.17.0",
        command=["sh", "-c"],
        args=['aws s3 cp --recursive "s3://ev-models/$0/lgbm/" "s3://ev-serving/$0/current/" && '
              'echo "$(date -u +%FT%TZ) $0" | aws s3 cp - "s3://ev-serving/$0/PROMOTED"', network])


@dsl.container_component
def notify_ops(network: str):
    return dsl.ContainerSpec(
        image="curlimages/curl:8.8.0",
        command=["sh", "-c"],
        args=['curl -fsS -X POST -H "Content-Type: application/json" '
              '-d "{\\"text\\": \\"ev-load run for $0 finished\\"}" "$OPS_WEBHOOK"', network])


@dsl.pipeline(name="ev-charging-load")
def ev_load(network: str = "voltgrid-nl",
            min_sessions: int = 500,
            tariff_uri: str = "s3://ev-ref/tariffs/nl_dynamic_2025.csv",
            feature_pvc: str = "ev-feature-store",
            max_mape: float = 0.18):
    done = notify_ops(network=network)
    kubernetes.use_secret_as_env(done, secret_name="ev-ops-webhook", secret_key_to_env={"url": "OPS_WEBHOOK"})
    with dsl.ExitHandler(done):
        sites = list_sites(network=network, min_sessions=min_sessions)
        kubernetes.use_secret_as_env(sites, secret_name="ev-s3", secret_key_to_env={"id": "AWS_ACCESS_KEY_ID", "key": "AWS_SECRET_ACCESS_KEY"})
        with dsl.ParallelFor(sites.output, parallelism=4) as site:
            feat = build_site_features(network=network, site=site, tariff_uri=tariff_uri)
            kubernetes.mount_pvc(feat, pvc_name=feature_pvc, mount_path="/features")
            kubernetes.use_secret_as_env(feat, secret_name="ev-s3", secret_key_to_env={"id": "AWS_ACCESS_KEY_ID", "key": "AWS_SECRET_ACCESS_KEY"})
            feat.set_retry(num_retries=3)
        tr = train_forecaster(network=network, horizon_h=48).after(feat)
        kubernetes.mount_pvc(tr, pvc_name=feature_pvc, mount_path="/features")
        kubernetes.set_timeout(tr, 7200)
        with dsl.If(tr.output < max_mape, name="good-enough"):
            pub = publish_forecaster(network=network)
            kubernetes.add_pod_annotation(pub, "voltgrid.io/promotion", "auto")


if __name__ == "__main__":
    compiler.Compiler().compile(ev_load, __file__.replace(".py", ".yaml"))
