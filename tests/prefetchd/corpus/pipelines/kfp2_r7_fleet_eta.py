# ruff: noqa
"""Truck-fleet ETA regression (KFP v2): CreatePVC with a suffix, s5cmd glob copy with global
options, polars component reading a depot table built from a bucket parameter, LightGBM CLI
with --init-model and --output-model, DeletePVC after training."""
from kfp import compiler, dsl, kubernetes
from kfp.dsl import Dataset, Input, Output


@dsl.container_component
def pull_telemetry(telemetry_glob: str):
    return dsl.ContainerSpec(
        image="peakcom/s5cmd:v2.2.2",
        command=["/s5cmd", "--numworkers", "16", "cp"],
        args=[telemetry_glob, "/work/raw/"])


@dsl.component(base_image="python:3.11-slim", packages_to_install=["polars==1.6.0", "s3fs"])
def build_features(ref_bucket: str, features: Output[Dataset]):
    import polars as pl
    trips = pl.scan_parquet("/work/raw/*.parquet").collect()
    depots = pl.read_parquet(f"s3://{ref_bucket}/depots/depots.parquet")
    out = trips.join(depots, on="depot_id", how="left")
    out.write_parquet(features.path)


@dsl.container_component
def train_eta(features: Input[Dataset], warm_start: str, candidate_uri: str):
    return dsl.ContainerSpec(
        image="ghcr.io/acme-fleet/eta-gbm:3.0.2",
        command=["python", "-m", "eta.train"],
        args=["--features", features.path,
              "--init-model", warm_start,
              "--output-model", candidate_uri,
              "--num-leaves", "255"])


@dsl.pipeline(name="fleet-eta-weekly")
def pipeline(telemetry_glob: str = "s3://acme-fleet/telemetry/2025/03/*.parquet",
             ref_bucket: str = "acme-fleet-ref",
             warm_start: str = "s3://acme-fleet-models/eta/prod/model.txt",
             candidate_uri: str = "s3://acme-fleet-models/eta/candidates/2025-03/model.txt"):
    pvc = kubernetes.CreatePVC(pvc_name_suffix="-telem", access_modes=["ReadWriteOnce"],
                               size="50Gi", storage_class_name="gp3")
    if True:
        pull = pull_telemetry(telemetry_glob=telemetry_glob)
        kubernetes.mount_pvc(pull, pvc_name=pvc.outputs["name"], mount_path="/work")
        feats = build_features(ref_bucket=ref_bucket).after(pull)
        kubernetes.mount_pvc(feats, pvc_name=pvc.outputs["name"], mount_path="/work")
        tr = train_eta(features=feats.outputs["features"], warm_start=warm_start,
                       candidate_uri=candidate_uri)
    kubernetes.DeletePVC(pvc_name=pvc.outputs["name"]).after(tr)


if __name__ == "__main__":
    import os
    compiler.Compiler().compile(pipeline, os.path.splitext(__file__)[0] + ".yaml")
