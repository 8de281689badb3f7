# ruff: noqa
"""Engine health scoring for an A320neo fleet (aviation maintenance / MRO).

A nested pipeline builds per-engine flight-data features from decoded QAR
(quick access recorder) data and the MRO system's work-order export; the outer
pipeline asks the fleet config which engines (ESNs) are due, scores each
engine's latest borescope inspection images (on a shared PVC) in a loop over
that list, and rolls the risks into a fleet report for maintenance planning.
"""
import os
from typing import List, Optional

from kfp import compiler, dsl, kubernetes
from kfp.dsl import Dataset, Input, Output

PY = "registry.skytech.aero/ml/engine-health-py:2025.06"


@dsl.component(base_image=PY)
def decode_qar_window(fleet: str, snapshot: str, qar_root: str, window: Output[Dataset]):
    import polars as pl

    pattern = f"{qar_root}/fleet={fleet}/snapshot={snapshot}/*.parquet"
    lf = pl.scan_parquet(pattern)
    agg = (
        lf.filter(pl.col("flight_phase").is_in(["TAKEOFF", "CLIMB", "CRUISE"]))
        .group_by(["esn", "flight_phase"])
        .agg([pl.col("egt_margin").mean(), pl.col("n2_vib").quantile(0.95), pl.len().alias("n")])
        .collect()
    )
    agg.write_parquet(window.path)


@dsl.component(base_image=PY)
def join_maintenance_log(fleet: str, window: Input[Dataset], features: Output[Dataset]):
    import pandas as pd

    qar = pd.read_parquet(window.path)
    wo = pd.read_csv(
        f"s3://skytech-mro/amos-export/{fleet}/work_orders.csv.gz",
        usecols=["esn", "ata_chapter", "closed_at", "finding_code"],
    )
    wo = wo[wo["ata_chapter"].isin([72, 73, 75])]
    last = wo.sort_values("closed_at").groupby("esn").tail(1)
    qar.merge(last, on="esn", how="left").to_parquet(features.path)


@dsl.pipeline(name="prepare-fleet-features")
def prepare_fleet_features(fleet: str, snapshot: str, qar_root: str) -> Dataset:
    dec = decode_qar_window(fleet=fleet, snapshot=snapshot, qar_root=qar_root)
    dec.set_caching_options(False)
    jn = join_maintenance_log(fleet=fleet, window=dec.outputs["window"])
    return jn.outputs["features"]


@dsl.component(base_image=PY)
def list_engines(fleet: str, snapshot: str) -> List[str]:
    import json

    import boto3

    body = boto3.client("s3").get_object(
        Bucket="skytech-mro", Key=f"fleet-config/{fleet}/engines_{snapshot}.json"
    )["Body"].read()
    cfg = json.loads(body)
    return [e["esn"] for e in cfg["engines"] if e.get("borescope_due")]


@dsl.container_component
def borescope_score(
    esn: str,
    features: Input[Dataset],
    risk: dsl.OutputPath(float),
    calibration_uri: Optional[str] = None,
):
    return dsl.ContainerSpec(
        image="registry.skytech.aero/ml/borescope-vit:7.2.0-cu121",
        command=["python", "-m", "borescope.score"],
        args=[
            "--images", dsl.ConcatPlaceholder(["/images/", esn, "/"]),
            "--weights", "s3://skytech-ml-registry/engine-health/borescope-vit/v7/model.safetensors",
            "--features", features.path,
            dsl.IfPresentPlaceholder(
                input_name="calibration_uri",
                then=["--lens-calibration", calibration_uri],
                else_=["--no-lens-calibration"],
            ),
            "--risk-file", risk,
        ],
    )


@dsl.component(base_image=PY, packages_to_install=["s3fs==2024.6.1", "pyyaml"])
def fleet_report(risks: List[float], fleet: str, snapshot: str, registry: str) -> int:
    import fsspec
    import pandas as pd
    import yaml

    with fsspec.open("s3://skytech-ml-config/engine-health/alert_thresholds.yaml", "r") as f:
        thr = yaml.safe_load(f)
    df = pd.DataFrame({"risk": risks})
    df["alert"] = df["risk"] >= thr["borescope"]["alert"]
    df.to_parquet(f"{registry}/reports/{fleet}/{snapshot}/risk_summary.parquet")
    return int(df["alert"].sum())


@dsl.component(base_image="python:3.11-slim", packages_to_install=["requests"])
def notify_planning(fleet: str, alerts: int):
    import os

    import requests

    requests.post(
        os.environ["PLANNING_WEBHOOK"],
        json={"text": f"{fleet}: {alerts} engines above borescope alert threshold"},
        timeout=10,
    )


@dsl.pipeline(name="engine-borescope-health")
def engine_borescope_health(
    fleet: str = "a320neo",
    snapshot: str = "2025-07-01",
    qar_root: str = "s3://skytech-qar/decoded",
    images_pvc: str = "borescope-images",
    model_registry: str = "s3://skytech-ml-registry/engine-health",
):
    prep = prepare_fleet_features(fleet=fleet, snapshot=snapshot, qar_root=qar_root)
    engines = list_engines(fleet=fleet, snapshot=snapshot)
    engines.set_caching_options(False)

    with dsl.ParallelFor(engines.output, parallelism=4) as esn:
        score = borescope_score(
            esn=esn,
            features=prep.output,
            calibration_uri="s3://skytech-mro/borescope/calibration/lens_2025q2.json",
        )
        score.set_caching_options(False)
        score.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(1)
        kubernetes.mount_pvc(score, pvc_name=images_pvc, mount_path="/images", sub_path="hpt-stage1")
        kubernetes.add_node_selector(score, label_key="node.kubernetes.io/instance-type", label_value="g5.2xlarge")

    report = fleet_report(
        risks=dsl.Collected(score.outputs["risk"]),
        fleet=fleet,
        snapshot=snapshot,
        registry=model_registry,
    )
    note = notify_planning(fleet=fleet, alerts=report.output)
    kubernetes.use_secret_as_env(note, secret_name="mro-planning-webhook", secret_key_to_env={"url": "PLANNING_WEBHOOK"})


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    compiler.Compiler().compile(
        engine_borescope_health, os.path.join(here, "kfp2_r18_engine_borescope.yaml")
    )
