# ruff: noqa
"""Hail-damage triage for property claims after a convective storm (KFP v2 + kfp-kubernetes)."""
from typing import List
from kfp import compiler, dsl, kubernetes
from kfp.dsl import Dataset, Input, Output

PY = "registry.hailnet.example.com/ml/hail-py:2025.05"


@dsl.container_component
def stage_tiles(storm_id: str, imagery_root: str):
    script = r'''set -euo pipefail
STORM="$0"
ROOT="${1%/}"
fetch() {
  local layer="$1"
  mkdir -p "/tiles/${layer}"
  aws s3 sync "${ROOT}/${STORM}/${layer}/" "/tiles/${layer}/" --only-show-errors
}
for layer in rgb_7cm dsm_7cm; do
  fetch "$layer"
done
du -sh /tiles/*
'''
    return dsl.ContainerSpec(image="amazon/aws-cli:2.17.0", command=["bash", "-c"],
                             args=[script, storm_id, imagery_root])


@dsl.component(base_image=PY, packages_to_install=[])
def load_policies(policy_table: str, storm_id: str, policies: Output[Dataset]):
    import os
    import pandas as pd
    import geopandas as gpd
    swath = gpd.read_file(f"s3://hailnet-nws/swaths/{storm_id}/mesh_swath.geojson")
    pol = pd.read_parquet(policy_table, storage_options={"client_kwargs": {"endpoint_url": os.environ["AWS_ENDPOINT_URL"]}})
    pts = gpd.GeoDataFrame(pol, geometry=gpd.points_from_xy(pol.lon, pol.lat), crs="EPSG:4326")
    hit = gpd.sjoin(pts, swath, predicate="within")
    hit.drop(columns="geometry").to_parquet(policies.path)


@dsl.container_component
def detect_damage(tier: str, storm_id: str, policies: Input[Dataset]):
    return dsl.ContainerSpec(
        image="registry.hailnet.example.com/ml/roofseg:4.2.0-cu121",
        command=["python", "-m", "hailnet.detect"],
        args=["--tiles", "/tiles", "--tier", tier, "--policies", policies.path,
              "--weights", "s3://hailnet-models/roofseg/v4.2/model.pt",
              "--out-dir", dsl.ConcatPlaceholder(["s3://hailnet-detections/", storm_id, "/", tier, "/"])])


@dsl.component(base_image=PY)
def estimate_losses(storm_id: str, tiers: List[str]) -> float:
    import pandas as pd
    import s3fs
    fs = s3fs.S3FileSystem()
    frames = []
    for path in fs.glob(f"hailnet-detections/{storm_id}/*/damage.parquet"):
        frames.append(pd.read_parquet(f"s3://{path}"))
    df = pd.concat(frames)
    cost = pd.read_csv("s3://hailnet-ref/xactimate/roof_unit_costs_tx_2025.csv")
    df = df.merge(cost, on="roof_material")
    df["loss"] = df.damaged_sqft * df.unit_cost
    df.to_csv(f"s3://hailnet-reports/{storm_id}/loss_estimate.csv", index=False)
    return float(df.loss.sum())


@dsl.pipeline(name="hail-claims-triage")
def hail_claims(storm_id: str = "2025-05-28-tx-dfw",
                imagery_root: str = "s3://hailnet-aerial/nearmap/",
                policy_table: str = "s3://hailnet-claims/policies/tx_2025q2.parquet",
                tiers: List[str] = ["residential", "commercial"]):
    pvc = kubernetes.CreatePVC(pvc_name_suffix="-hail-tiles", access_modes=["ReadWriteMany"], size="800Gi",
                               storage_class_name="cephfs")
    st = stage_tiles(storm_id=storm_id, imagery_root=imagery_root).after(pvc)
    kubernetes.mount_pvc(st, pvc_name=pvc.outputs["name"], mount_path="/tiles")
    kubernetes.set_image_pull_policy(st, "IfNotPresent")

    pol = load_policies(policy_table=policy_table, storm_id=storm_id)
    kubernetes.use_config_map_as_env(pol, config_map_name="hailnet-ceph", config_map_key_to_env={"endpoint": "AWS_ENDPOINT_URL"})
    kubernetes.set_image_pull_policy(pol, "Always")

    with dsl.ParallelFor(tiers, parallelism=2) as tier:
        det = detect_damage(tier=tier, storm_id=storm_id, policies=pol.outputs["policies"]).after(st)
        kubernetes.mount_pvc(det, pvc_name=pvc.outputs["name"], mount_path="/tiles")
        kubernetes.add_node_selector(det, "nvidia.com/gpu.product", "NVIDIA-L40S")
        kubernetes.add_toleration(det, key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")
        det.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(1)

    est = estimate_losses(storm_id=storm_id, tiers=tiers).after(det)
    rm = kubernetes.DeletePVC(pvc_name=pvc.outputs["name"]).after(est)


if __name__ == "__main__":
    compiler.Compiler().compile(hail_claims, __file__.replace(".py", ".yaml"))
