# ruff: noqa
"""Regional landslide susceptibility mapping (geological survey, quarterly).

The region's area of interest is cut into 1-degree DEM tiles; per tile, terrain derivatives (slope,
curvature, TWI) are computed from the Copernicus GLO-30 DEM on a shared read-only claim and the
ERA5-Land extreme-rainfall statistics are cut out; the landslide inventory is sampled against those
features, a U-Net is trained on a GPU, and when its AUC clears the bar the susceptibility map is
rendered to a COG and its STAC item published.
"""
import kfp
from kfp import dsl
from kfp.aws import use_aws_secret
from kfp.components import create_component_from_func

GEO = "ghcr.io/geohazard-survey/susceptibility:3.0.2"
GEO_GPU = "ghcr.io/geohazard-survey/susceptibility:3.0.2-cu121"


def plan_tiles(region: str) -> list:
    import math

    import geopandas as gpd

    aoi = gpd.read_file(f"s3://geohazard-ref/aoi/{region}.geojson").to_crs(4326)
    minx, miny, maxx, maxy = aoi.total_bounds
    tiles = []
    for lat in range(math.floor(miny), math.ceil(maxy)):
        for lon in range(math.floor(minx), math.ceil(maxx)):
            tiles.append(f"N{lat:02d}_00_E{lon:03d}_00")
    return tiles


def rainfall_stats(tile: str, region: str):
    import xarray as xr

    from geohazard.rain import tile_bounds, rx1day_return_levels

    era5 = xr.open_zarr("s3://geohazard-climate/era5-land/total_precipitation_1990_2024.zarr")
    lat0, lat1, lon0, lon1 = tile_bounds(tile)
    sub = era5.sel(latitude=slice(lat1, lat0), longitude=slice(lon0, lon1))
    levels = rx1day_return_levels(sub, periods=[10, 50, 100])
    levels.to_netcdf(f"/tmp/{tile}.nc")
    levels.to_zarr(f"s3://geohazard-features/rainfall/{region}/{tile}.zarr", mode="w")


def assemble_training(region: str, inventory_version: str):
    import pandas as pd

    from geohazard.samples import sample_points

    inv = pd.read_parquet(f"s3://geohazard-ref/inventory/{region}/landslides_{inventory_version}.parquet")
    terrain_root = f"s3://geohazard-features/terrain/{region}/"
    rain_root = f"s3://geohazard-features/rainfall/{region}/"
    samples = sample_points(inv, terrain_root, rain_root, negatives_per_positive=3)
    samples.to_parquet(f"s3://geohazard-features/training/{region}/samples_{inventory_version}.parquet", index=False)


def publish_stac(region: str, quarter: str):
    import json

    import boto3

    item = {
        "type": "Feature",
        "id": f"susceptibility-{region}-{quarter}",
        "assets": {"cog": {"href": f"s3://geohazard-maps/{region}/{quarter}/susceptibility.tif"}},
    }
    boto3.client("s3").put_object(
        Bucket="geohazard-public",
        Key=f"stac/susceptibility/{region}/{quarter}.json",
        Body=json.dumps(item).encode(),
    )


plan_op = create_component_from_func(plan_tiles, base_image=GEO)
rain_op = create_component_from_func(rainfall_stats, base_image=GEO)
assemble_op = create_component_from_func(assemble_training, base_image=GEO)
stac_op = create_component_from_func(publish_stac, base_image="python:3.11-slim", packages_to_install=["boto3"])


@dsl.pipeline(name="landslide-susceptibility", description="Quarterly susceptibility map per region")
def landslide_susceptibility(region: str = "alps-tirol", quarter: str = "2025-q4",
                             inventory_version: str = "v2025.09", min_auc: float = 0.86):
    aws = use_aws_secret("geohazard-aws", "access_key_id", "secret_access_key")
    dem = dsl.PipelineVolume(pvc="copernicus-glo30")

    tiles = plan_op(region=region).apply(aws)

    with dsl.ParallelFor(tiles.output, parallelism=4) as tile:
        terrain = dsl.ContainerOp(
            name="terrain-derivatives",
            image=GEO,
            command=["python", "-m", "geohazard.terrain"],
            arguments=[
                "--dem", f"/dem/Copernicus_DSM_COG_10_{tile}_DEM.tif",
                "--products", "slope,plan_curvature,profile_curvature,twi",
                "--out", f"s3://geohazard-features/terrain/{region}/{tile}/",
            ],
        ).add_pvolumes({"/dem": dem}).apply(aws)
        terrain.set_retry(2)
        rain = rain_op(tile=tile, region=region).apply(aws)
        rain.set_memory_limit("32G")

    assemble = assemble_op(region=region, inventory_version=inventory_version).after(terrain, rain).apply(aws)

    train = dsl.ContainerOp(
        name="train-susceptibility",
        image=GEO_GPU,
        command=["python", "-m", "geohazard.train_unet"],
        arguments=[
            "--samples", f"s3://geohazard-features/training/{region}/samples_{inventory_version}.parquet",
            "--lithology", "s3://geohazard-ref/lithology/egdi_1m_lithology.gpkg",
            "--epochs", "60",
            "--output", f"s3://geohazard-models/susceptibility/{region}/{quarter}/",
            "--auc-file", "/tmp/outputs/auc.txt",
        ],
        file_outputs={"auc": "/tmp/outputs/auc.txt"},
    ).after(assemble).apply(aws)
    train.set_gpu_limit(1)
    train.add_node_selector_constraint("cloud.google.com/gke-accelerator", "nvidia-l4")

    with dsl.Condition(train.outputs["auc"] >= min_auc):
        render = dsl.ContainerOp(
            name="render-map",
            image=GEO_GPU,
            command=["python", "-m", "geohazard.render"],
            arguments=[
                "--model", f"s3://geohazard-models/susceptibility/{region}/{quarter}/",
                "--dem-root", "/dem",
                "--aoi", f"s3://geohazard-ref/aoi/{region}.geojson",
                "--cog-out", f"s3://geohazard-maps/{region}/{quarter}/susceptibility.tif",
            ],
        ).add_pvolumes({"/dem": dem}).apply(aws)
        render.set_gpu_limit(1)
        stac_op(region=region, quarter=quarter).after(render).apply(aws)


if __name__ == "__main__":
    kfp.compiler.Compiler().compile(landslide_susceptibility, __file__.replace(".py", ".yaml"))
