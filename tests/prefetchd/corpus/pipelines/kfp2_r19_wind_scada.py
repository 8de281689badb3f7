# ruff: noqa
"""Wind-farm gearbox anomaly scoring from SCADA (nested pipeline, loop over task output)."""
from typing import List

from kfp import compiler, dsl, kubernetes
from kfp.dsl import Dataset, Input, Output

PY = "registry.windco.energy/ml/scada-py:2025.07"


@dsl.component(base_image=PY)
def pull_scada(site: str, scada_root: str, year: int, raw: Output[Dataset]):
    import polars as pl

    lf = pl.scan_parquet(f"{scada_root}/site={site}/year={year}/*.parquet")
    lf.filter(pl.col("status") == 1).sink_parquet(raw.path)


@dsl.component(base_image=PY)
def resample_channels(raw: Input[Dataset], features: Output[Dataset]):
    import json

    import boto3
    import polars as pl

    obj = boto3.client("s3").get_object(Bucket="windco-config", Key="scada/channels_v3.json")
    channels = json.loads(obj["Body"].read())["gearbox"]
    df = pl.read_parquet(raw.path).select(["turbine_id", "ts"] + channels)
    df.group_by_dynamic("ts", every="10m", group_by="turbine_id").agg(pl.all().mean()).write_parquet(features.path)


@dsl.pipeline(name="scada-ingest")
def scada_ingest(site: str, scada_root: str, year: int) -> Dataset:
    pulled = pull_scada(site=site, scada_root=scada_root, year=year)
    res = resample_channels(raw=pulled.outputs["raw"])
    return res.outputs["features"]


@dsl.component(base_image=PY)
def list_turbines(site: str) -> List[str]:
    import duckdb

    rows = duckdb.sql(
        f"SELECT turbine_id FROM read_csv_auto('s3://windco-assets/registry/{site}/turbines.csv') WHERE commissioned"
    ).fetchall()
    return [r[0] for r in rows]


@dsl.container_component
def score_turbine(features: Input[Dataset], turbine: str, model_root: str, scores: Output[Dataset],
                  baseline_uri: str = None):
    return dsl.ContainerSpec(
        image="registry.windco.energy/ml/gearbox-ae:4.1.0",
        command=["python", "-m", "gearbox_ae.score"],
        args=[
            "--features", features.path,
            "--turbine", turbine,
            dsl.ConcatPlaceholder(["--weights=", model_root, "/encoder.onnx"]),
            "--spectra-dir", dsl.ConcatPlaceholder(["/spectra/", turbine]),
            dsl.IfPresentPlaceholder(input_name="baseline_uri", then=["--baseline", baseline_uri],
                                     else_=["--no-baseline"]),
            "--scores-out", scores.path,
        ],
    )


@dsl.component(base_image=PY)
def publish_alerts(scores: List[Dataset], alerts_root: str, site: str, run_date: str, threshold: float):
    import pandas as pd

    df = pd.concat([pd.read_parquet(s.path) for s in scores])
    df[df["anomaly"] > threshold].to_parquet(f"{alerts_root}/{site}/{run_date}/alerts.parquet")


@dsl.pipeline(name="gearbox-anomaly-daily")
def gearbox_anomaly(site: str = "north-sea-hornsea2", scada_root: str = "s3://windco-scada/curated",
                    year: int = 2025, model_root: str = "s3://windco-models/gearbox-ae/v4",
                    run_date: str = "2025-07-11", alerts_root: str = "s3://windco-alerts/gearbox",
                    spectra_pvc: str = "windco-vibration-cache", threshold: float = 0.92):
    ingest = scada_ingest(site=site, scada_root=scada_root, year=year)
    turbines = list_turbines(site=site)
    with dsl.ParallelFor(turbines.output, parallelism=6) as t:
        sc = score_turbine(features=ingest.output, turbine=t, model_root=model_root,
                           baseline_uri="s3://windco-models/gearbox-ae/baselines/2025q2.parquet")
        sc.set_caching_options(False)
        kubernetes.mount_pvc(sc, pvc_name=spectra_pvc, mount_path="/spectra", sub_path="hf-vibration")
    publish_alerts(scores=dsl.Collected(sc.outputs["scores"]), alerts_root=alerts_root, site=site,
                   run_date=run_date, threshold=threshold)


if __name__ == "__main__":
    compiler.Compiler().compile(gearbox_anomaly, __file__.replace(".py", ".yaml"))
