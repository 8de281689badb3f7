# ruff: noqa
"""Vineyard downy-mildew detection: drone orthomosaics staged to a run PVC, per block x band detectors."""
from kfp import dsl, compiler, kubernetes


@dsl.container_component
def stage_imagery(imagery_root: str, season: str):
    return dsl.ContainerSpec(
        image="amazon/aws-cli:2.17.0",
        command=["bash", "-c"],
        args=[
            'set -euo pipefail\n'
            'ROOT="${0%/}"; SEASON="$1"\n'
            'SRCS=("${ROOT}/${SEASON}/ortho/" "${ROOT}/${SEASON}/ndvi/")\n'
            'for src in "${SRCS[@]}"; do\n'
            '  aws --endpoint-url "$S3_ENDPOINT" s3 sync "$src" "/stage/$(basename "$src")/" --only-show-errors\n'
            'done\n'
            'du -sh /stage/*\n',
            imagery_root, season,
        ],
    )


@dsl.component(base_image="ghcr.io/vitis-ml/mildew:1.4.0", packages_to_install=[])
def train_block(block: str, variety: str, band: str, season: str) -> float:
    import boto3, json, os, subprocess
    s3 = boto3.client("s3", endpoint_url=os.environ["S3_ENDPOINT"])
    label_key = f"{variety}/{season}/{block}_{band}.geojson"
    s3.download_file("vine-labels", label_key, "/tmp/labels.geojson")
    out = subprocess.run(
        ["python", "-m", "mildew.train", "--tiles", f"/stage/ortho/{block}", "--labels", "/tmp/labels.geojson",
         "--band", band, "--out-dir", "/tmp/model"], check=True, capture_output=True, text=True)
    s3.upload_file("/tmp/model/best.pt", "vine-models", f"mildew/{season}/{block}/{band}/best.pt")
    return json.loads(out.stdout.splitlines()[-1])["f1"]


@dsl.component(base_image="ghcr.io/vitis-ml/mildew:1.4.0")
def evaluate_season(season: str, minio: str) -> str:
    import fsspec, json, pandas as pd
    opts = {"client_kwargs": {"endpoint_url": minio}}
    gdd = pd.read_parquet("s3://vine-ref/weather/napa_gdd_daily.parquet", storage_options=opts)
    scouting = pd.read_csv(f"s3://vine-ref/scouting/{season}/field_notes.csv", storage_options=opts)
    summary = {"gdd_days": len(gdd), "scouted": len(scouting)}
    with fsspec.open(f"s3://vine-reports/mildew/{season}/summary.json", "w", **opts) as f:
        json.dump(summary, f)
    return "ok"


@dsl.pipeline(name="vineyard-mildew")
def vineyard_mildew(
    imagery_root: str = "s3://vine-imagery/napa/",
    season: str = "2025",
    blocks: list = [{"block": "b07", "variety": "cabernet"}, {"block": "b12", "variety": "merlot"}],
):
    pvc = kubernetes.CreatePVC(pvc_name_suffix="-vine-stage", access_modes=["ReadWriteMany"], size="800Gi",
                               storage_class_name="cephfs")
    stage = stage_imagery(imagery_root=imagery_root, season=season).after(pvc)
    kubernetes.mount_pvc(stage, pvc_name=pvc.outputs["name"], mount_path="/stage")
    kubernetes.use_secret_as_env(stage, secret_name="vine-minio", secret_key_to_env={"endpoint": "S3_ENDPOINT"})
    with dsl.ParallelFor(blocks, parallelism=2) as blk:
        with dsl.ParallelFor(["rgb", "nir"]) as band:
            t = train_block(block=blk.block, variety=blk.variety, band=band, season=season).after(stage)
            kubernetes.mount_pvc(t, pvc_name=pvc.outputs["name"], mount_path="/stage")
            kubernetes.use_secret_as_env(t, secret_name="vine-minio", secret_key_to_env={"endpoint": "S3_ENDPOINT"})
            kubernetes.add_toleration(t, key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")
            t.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(1)
    ev = evaluate_season(season=season, minio="http://minio.vineyard.svc:9000").after(t)
    delete = kubernetes.DeletePVC(pvc_name=pvc.outputs["name"]).after(ev)


if __name__ == "__main__":
    compiler.Compiler().compile(vineyard_mildew, __file__.replace(".py", ".yaml"))
