# ruff: noqa
"""Kelp canopy mapping (Hera -> Argo Workflow): AOI, per-tile seasonal composites, U-Net training, canopy maps."""
from hera.workflows import DAG, Container, Parameter, S3Artifact, Workflow, script, models as m

SCRATCH = m.Volume(name="scratch", persistent_volume_claim=m.PersistentVolumeClaimVolumeSource(claim_name="kelp-scratch"))


@script(image="ghcr.io/kelpml/geo:2025.06")
def tile_composite(tile: str, year: str):
    import itertools
    import fsspec
    import numpy as np
    import xarray as xr

    stacks = []
    for sensor, quarter in itertools.product(["landsat8", "landsat9"], ["Q2", "Q3"]):
        uri = f"s3://kelp-imagery/{sensor}/{tile}/{year}{quarter}/sr.tif"
        with fsspec.open(uri, "rb") as f:
            stacks.append(np.frombuffer(f.read(), dtype=np.uint8)[:16])
    comp = xr.Dataset({"sr": (("band",), np.median(np.stack(stacks), axis=0))})
    comp.to_zarr(fsspec.get_mapper(f"s3://kelp-features/{tile}/{year}/composite.zarr"), mode="w")


@script(image="ghcr.io/kelpml/unet:0.9.2-cu121")
def score_region(region: str, year: str):
    import json
    import fsspec
    import torch
    import yaml

    cfg = yaml.safe_load("""
normalization: s3://kelp-ref/norm/sr_stats_v2.json
threshold: 0.42
""")
    with fsspec.open(cfg["normalization"], "r") as f:
        stats = json.load(f)
    with fsspec.open(f"s3://kelp-models/unet/{region}/best.pt", "rb") as f:
        model = torch.load(f, map_location="cpu")
    with fsspec.open(f"s3://kelp-maps/{region}/{year}/canopy.json", "w") as f:
        json.dump({"threshold": cfg["threshold"], "bands": len(stats)}, f)


with Workflow(
    generate_name="kelp-canopy-",
    entrypoint="main",
    on_exit="notify",
    arguments=[Parameter(name="region", value="monterey"),
               Parameter(name="year", value="2024"),
               Parameter(name="score", value="true")],
    volumes=[SCRATCH],
    service_account_name="kelp-ml",
) as w:
    aoi = Container(
        name="fetch-aoi",
        image="amazon/aws-cli:2.17.0",
        command=["bash", "-c"],
        args=['''set -euo pipefail
AOI="s3://${AOI_BUCKET:-kelp-ref}/aoi/{{workflow.parameters.region}}.geojson"
aws s3 cp "$AOI" /scratch/aoi.geojson
aws s3 cp s3://kelp-ref/tiles/wrs2_sentinel_grid.gpkg /scratch/grid.gpkg
'''],
        volume_mounts=[m.VolumeMount(name="scratch", mount_path="/scratch")],
    )

    train = Container(
        name="train-unet",
        image="ghcr.io/kelpml/unet:0.9.2-cu121",
        inputs=[S3Artifact(name="encoder", path="/models/encoder.pt", bucket="kelp-models",
                           key="encoders/resnet34_ssl4eo_s2.pt")],
        command=["bash", "-c"],
        args=['''set -euo pipefail
torchrun --nnodes 1 --nproc_per_node 2 /opt/kelp/train.py -- \\
  --data-root "s3://kelp-features/" \\
  --label-csv "$LABELS_URI" \\
  --aoi /scratch/aoi.geojson \\
  --encoder /models/encoder.pt \\
  --save-dir /scratch/ckpt/{{workflow.parameters.region}}
aws s3 cp /scratch/ckpt/{{workflow.parameters.region}}/best.pt "s3://kelp-models/unet/{{workflow.parameters.region}}/best.pt"
'''],
        env=[m.EnvVar(name="LABELS_URI", value="s3://kelp-ref/labels/kelpwatch_2024.csv"),
             m.EnvVar(name="WANDB_PROJECT", value_from=m.EnvVarSource(
                 config_map_key_ref=m.ConfigMapKeySelector(name="kelp-train", key="wandb_project")))],
        volume_mounts=[m.VolumeMount(name="scratch", mount_path="/scratch")],
        resources=m.ResourceRequirements(limits={"nvidia.com/gpu": "2", "memory": "96Gi"}),
        node_selector={"karpenter.k8s.aws/instance-family": "g6e"},
        tolerations=[m.Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")],
    )

    notify = Container(
        name="notify",
        image="curlimages/curl:8.8.0",
        command=["sh", "-c"],
        args=['curl -s -X POST "$HOOK" -d "kelp-canopy {{workflow.name}} {{workflow.status}}"'],
        env=[m.EnvVar(name="HOOK", value_from=m.EnvVarSource(
            secret_key_ref=m.SecretKeySelector(name="kelp-alerts", key="webhook")))],
    )

    with DAG(name="main"):
        a = aoi(name="fetch-aoi")
        comp = tile_composite(name="composite",
                              arguments={"tile": "{{item}}", "year": "{{workflow.parameters.year}}"},
                              with_items=["10SEG", "10SFF"])
        t = train(name="train")
        s = score_region(name="score",
                         arguments={"region": "{{workflow.parameters.region}}", "year": "{{workflow.parameters.year}}"},
                         when="{{workflow.parameters.score}} == true")
        [a, comp] >> t >> s

open(__file__.replace(".py", ".yaml"), "w").write(w.to_yaml())
