# ruff: noqa
"""Sentinel-2 crop-type segmentation for one AOI and season (TerraVue).

Tiles are synced onto a per-run volume, labels (USDA CDL raster) are cut to
the tiles, a U-Net is trained per band set, and the crop mask is exported as a
Cloud-Optimised GeoTIFF when the holdout mIoU clears the bar.
"""
import kfp
from kfp import dsl
from kfp.components import func_to_container_op
from kfp.onprem import mount_pvc
from kubernetes.client.models import V1EnvVar

GEO_IMAGE = "ghcr.io/terravue/geo-ml:1.9.0"
TILES = ["15TUG", "15TVG", "15TWG", "15TXG"]
BAND_SETS = [
    {"band_set": "rgbnir", "bands": "B02,B03,B04,B08"},
    {"band_set": "swir", "bands": "B8A,B11,B12"},
]


def fetch_labels(label_uri: str, aoi: str) -> str:
    """Copy the CDL raster and clip it to the AOI footprint."""
    from urllib.parse import urlparse

    import boto3
    import rasterio
    from rasterio.mask import mask
    import geopandas as gpd

    u = urlparse(label_uri)
    boto3.client("s3").download_file(u.netloc, u.path.lstrip("/"), "/mnt/labels/cdl_full.tif")
    aoi_shape = gpd.read_file(f"s3://terravue-aoi/{aoi}/footprint.geojson")
    with rasterio.open("/mnt/labels/cdl_full.tif") as src:
        clipped, transform = mask(src, aoi_shape.geometry, crop=True)
    return "/mnt/labels/cdl_full.tif"


fetch_labels_op = func_to_container_op(fetch_labels, base_image=GEO_IMAGE)


@dsl.pipeline(name="s2-cropseg", description="Sentinel-2 crop segmentation per AOI/season")
def cropseg(
    tiles_bucket: str = "terravue-s2-l2a",
    aoi: str = "iowa-corn-belt",
    season: str = "2024",
    label_uri: str = "s3://terravue-labels/cdl/2024/iowa_cdl_30m.tif",
    min_miou: float = 0.62,
):
    vop = dsl.VolumeOp(
        name="create-scratch",
        resource_name="s2-scratch",
        size="500Gi",
        modes=dsl.VOLUME_MODE_RWO,
        storage_class="gp3",
    )

    notify = dsl.ContainerOp(
        name="notify",
        image="curlimages/curl:8.8.0",
        command=["sh", "-c"],
        arguments=[
            "curl -sf -X POST -H 'Content-Type: application/json' "
            "-d '{\"text\": \"s2-cropseg {{workflow.name}} finished: {{workflow.status}}\"}' "
            "https://hooks.slack.com/services/T000/B000/terravue-ml"
        ],
    )

    with dsl.ExitHandler(notify):
        sync_cmds = [
            f"aws s3 sync s3://{tiles_bucket}/tiles/{tile}/{season}/ /mnt/tiles/{tile}/ --exclude '*' --include '*.jp2'"
            for tile in TILES
        ]
        tiles = dsl.ContainerOp(
            name="fetch-tiles",
            image="amazon/aws-cli:2.17.0",
            command=["bash", "-c"],
            arguments=["set -euo pipefail\n" + "\n".join(sync_cmds) + "\nfind /mnt/tiles -name '*.jp2' | wc -l"],
            pvolumes={"/mnt": vop.volume},
        )

        labels = fetch_labels_op(label_uri=label_uri, aoi=aoi)
        labels.add_pvolumes({"/mnt": vop.volume})

        with dsl.ParallelFor(BAND_SETS) as bs:
            train = dsl.ContainerOp(
                name="train-unet",
                image=GEO_IMAGE,
                command=["python", "-m", "terravue.train"],
                arguments=[
                    "--tiles-dir", "/mnt/tiles",
                    "--labels", labels.output,
                    "--bands", bs.bands,
                    "--dem-dir", "/dem/copernicus-30m",
                    "--init-checkpoint", "s3://terravue-models/backbones/prithvi-100m/Prithvi_100M.pt",
                    "--output-dir", f"s3://terravue-models/cropseg/{aoi}/{season}/{bs.band_set}/",
                    "--epochs", "40",
                ],
                pvolumes={"/mnt": tiles.pvolume},
            )
            train.apply(mount_pvc("terravue-dem-cache", "dem", "/dem"))
            train.set_gpu_limit(1)
            train.add_env_variable(V1EnvVar(name="AWS_DEFAULT_REGION", value="us-east-2"))

        evaluate = dsl.ContainerOp(
            name="evaluate",
            image=GEO_IMAGE,
            command=["python", "-m", "terravue.evaluate"],
            arguments=[
                "--models", f"s3://terravue-models/cropseg/{aoi}/{season}/",
                "--holdout", f"s3://terravue-labels/holdout/{aoi}/{season}/",
                "--metrics-out", "/tmp/miou.txt",
            ],
            file_outputs={"miou": "/tmp/miou.txt"},
        ).after(train)

        with dsl.Condition(evaluate.outputs["miou"] > min_miou):
            dsl.ContainerOp(
                name="export-cog",
                image=GEO_IMAGE,
                command=["bash", "-c"],
                arguments=[
                    "set -e\n"
                    f"python -m terravue.predict --models s3://terravue-models/cropseg/{aoi}/{season}/ "
                    "--tiles-dir /mnt/tiles --out /mnt/cropmask.tif\n"
                    "rio cogeo create /mnt/cropmask.tif /mnt/cropmask_cog.tif\n"
                    f"aws s3 cp /mnt/cropmask_cog.tif s3://terravue-deliverables/{aoi}/{season}/cropmask.tif"
                ],
                pvolumes={"/mnt": vop.volume},
            ).after(evaluate)


if __name__ == "__main__":
    kfp.compiler.Compiler().compile(cropseg, __file__.replace(".py", ".yaml"))
