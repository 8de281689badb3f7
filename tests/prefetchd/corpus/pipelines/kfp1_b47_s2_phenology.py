# ruff: noqa
"""Crop phenology from Sentinel-2 NDVI time series (KFP v1 SDK -> Argo).

A VolumeOp creates a shared RWX work volume. Tile/year stacks come from a
static ParallelFor over dicts whose tile/year fields form the S3 prefix in the
container command; NDVI is computed per tile/year onto the volume. Scene-level
cloud masks are fetched in a ParallelFor over the output of a STAC query step
(withParam). ERA5-Land temperature for the growing season is fetched with a
`seq -f %02g` shell loop. A fitting step runs after both loops, then the phenology
metrics are exported to S3.

Compile (kfp 1.8.x): python kfp1_b47_s2_phenology.py  -> kfp1_b47_s2_phenology.yaml
"""
import os

import kfp
from kfp import dsl
from kfp.components import create_component_from_func

EO_IMAGE = 'ghcr.io/agri-eo/s2-timeseries:2.3.0'
AWS_IMAGE = 'amazon/aws-cli:2.15.30'

TILE_YEARS = [
    {'tile': '31UFS', 'year': '2022'},
    {'tile': '31UFS', 'year': '2023'},
    {'tile': '32ULE', 'year': '2023'},
]


def list_scenes(aoi: str, start: str, end: str, max_cloud: int) -> list:
    import requests
    r = requests.post('https://earth-search.aws.element84.com/v1/search', json={
        'collections': ['sentinel-2-l2a'], 'intersects': {'type': 'Feature', 'id': aoi},
        'datetime': f'{start}/{end}', 'query': {'eo:cloud_cover': {'lt': max_cloud}}, 'limit': 200})
    return [f['id'] for f in r.json()['features']]


def cloud_mask(scene_id: str) -> float:
    import rasterio
    import numpy as np
    with rasterio.open(f's3://sentinel-cogs/sentinel-s2-l2a-cogs/{scene_id}/SCL.tif') as src:
        scl = src.read(1)
    bad = np.isin(scl, [3, 8, 9, 10])
    np.save(f'/work/masks/{scene_id}.npy', bad)
    return float(bad.mean())


def compute_ndvi(tile: str, year: str):
    import glob
    import rioxarray
    import xarray as xr
    red = sorted(glob.glob(f'/work/stacks/{tile}/{year}/*_B04.tif'))
    nir = sorted(glob.glob(f'/work/stacks/{tile}/{year}/*_B08.tif'))
    r = xr.concat([rioxarray.open_rasterio(p) for p in red], 'time')
    n = xr.concat([rioxarray.open_rasterio(p) for p in nir], 'time')
    ((n - r) / (n + r)).to_dataset(name='ndvi').to_zarr(f'/work/ndvi/{tile}_{year}.zarr', mode='w')


list_scenes_op = create_component_from_func(list_scenes, base_image='python:3.11-slim',
                                            packages_to_install=['requests'])
cloud_mask_op = create_component_from_func(cloud_mask, base_image=EO_IMAGE)
ndvi_op = create_component_from_func(compute_ndvi, base_image=EO_IMAGE)


@dsl.pipeline(name='s2-crop-phenology')
def phenology(aoi: str = 'beauce-parcels', season_start: str = '2023-03-01', season_end: str = '2023-10-31',
              export_root: str = 's3://agri-eo-products/phenology/2023'):
    vop = dsl.VolumeOp(name='ts-work', resource_name='ts-work', size='500Gi', modes=dsl.VOLUME_MODE_RWM)

    with dsl.ParallelFor(TILE_YEARS) as ty:
        fetch = dsl.ContainerOp(
            name='fetch-tile-stack', image=AWS_IMAGE, command=['sh', '-c'],
            arguments=[f'aws s3 sync s3://agri-eo-archive/s2-l2a/{ty.tile}/{ty.year}/ /work/stacks/{ty.tile}/{ty.year}/ '
                       '--exclude "*" --include "*_B04.tif" --include "*_B08.tif" --only-show-errors'],
            pvolumes={'/work': vop.volume})
        ndvi = ndvi_op(tile=ty.tile, year=ty.year).add_pvolumes({'/work': vop.volume}).after(fetch)

    scenes = list_scenes_op(aoi=aoi, start=season_start, end=season_end, max_cloud=60)
    with dsl.ParallelFor(scenes.output) as scene:
        cm = cloud_mask_op(scene_id=scene).add_pvolumes({'/work': vop.volume})

    climate = dsl.ContainerOp(
        name='fetch-era5', image=AWS_IMAGE, command=['bash', '-c'],
        arguments=['mkdir -p /work/era5 && for m in $(seq -f %02g 4 9); do '
                   'aws s3 cp "s3://agri-eo-climate/era5-land/2023/$m/t2m_daily.nc" "/work/era5/2023-$m.nc" --only-show-errors; '
                   'done'],
        pvolumes={'/work': vop.volume})

    fit = dsl.ContainerOp(
        name='fit-phenology', image=EO_IMAGE, command=['python', '-m', 's2ts.phenology'],
        arguments=['--ndvi', '/work/ndvi', '--masks', '/work/masks', '--era5', '/work/era5',
                   '--parcels', 's3://agri-eo-ref/parcels/lpis-fr-2023.gpkg', '--out', '/work/phenology.parquet'],
        pvolumes={'/work': vop.volume}).after(ndvi, cm, climate)

    dsl.ContainerOp(
        name='export-phenology', image=AWS_IMAGE, command=['aws', 's3', 'cp'],
        arguments=['/work/phenology.parquet', f'{export_root}/{aoi}/phenology.parquet'],
        pvolumes={'/work': fit.pvolume})


if __name__ == '__main__':
    kfp.compiler.Compiler().compile(phenology, os.path.splitext(__file__)[0] + '.yaml')
