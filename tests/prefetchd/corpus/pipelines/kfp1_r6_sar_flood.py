# ruff: noqa
"""Sentinel-1 SAR flood mapping (KFP v1): VolumeOp scratch, gsutil -m cp of a scene
glob onto it, per-scene (static loop) rasterio reads of calibrated GeoTIFFs on S3,
a U-Net segmentation CLI, a condition and an exit handler."""
import kfp
from kfp import dsl
from kfp.components import create_component_from_func

SCENES = ['S1A_IW_GRDH_1SDV_20240914T051422', 'S1A_IW_GRDH_1SDV_20240914T051447']


def calibrate(scene: str, bucket: str, aoi_geojson: str) -> str:
    import json
    import fsspec
    import rasterio
    with fsspec.open(aoi_geojson, 'r') as f:
        aoi = json.load(f)
    vv = f"s3://{bucket}/grd/{scene}/measurement/vv.tif"
    with rasterio.open(vv) as src:
        arr = src.read(1)
    out = f"s3://{bucket}/sigma0/{scene}.tif"
    with fsspec.open(out, 'wb') as g:
        g.write(arr.tobytes())
    return out


calibrate_op = create_component_from_func(
    calibrate, base_image='ghcr.io/acme-geo/sar-tools:2.4.0',
    packages_to_install=['rasterio==1.3.10', 's3fs'])


def stage_dem_op(dem_glob: str):
    return dsl.ContainerOp(
        name='stage-dem',
        image='gcr.io/google.com/cloudsdktool/google-cloud-cli:489.0.0-slim',
        command=['sh', '-c'],
        arguments=['set -e\nmkdir -p /scratch/dem\n'
                   'gsutil -m cp "$0" /scratch/dem/\nls -la /scratch/dem | head', dem_glob])


def segment_op(unet_weights: str, scene: str):
    return dsl.ContainerOp(
        name='segment-water',
        image='ghcr.io/acme-geo/flood-unet:1.1.0-cu118',
        command=['python', 'segment.py'],
        arguments=['--weights', unet_weights,
                   '--dem-dir', '/scratch/dem',
                   '--scene-id', scene,
                   '--out-mask', '/scratch/masks/%s.tif' % scene])


def publish_op(dest: str):
    return dsl.ContainerOp(
        name='publish-flood-extent',
        image='amazon/aws-cli:2.17.0',
        command=['aws', 's3', 'sync', '/scratch/masks/', dest])


@dsl.pipeline(name='sar-flood-mapping')
def sar_flood(bucket: str = 'acme-sentinel1',
              aoi_geojson: str = 's3://acme-geo-ref/aoi/valencia-2024.geojson',
              dem_glob: str = 'gs://acme-dem/copernicus-glo30/N39W00*.tif',
              unet_weights: str = 's3://acme-geo-models/flood-unet/sen1floods11-v3.pt',
              dest: str = 's3://acme-geo-products/floods/valencia-2024/',
              publish: str = 'yes'):
    vol = dsl.VolumeOp(name='scratch', resource_name='sar-scratch', size='200Gi',
                       modes=dsl.VOLUME_MODE_RWO)
    dem = stage_dem_op(dem_glob).add_pvolumes({'/scratch': vol.volume})
    with dsl.ParallelFor(SCENES) as scene:
        cal = calibrate_op(scene=scene, bucket=bucket, aoi_geojson=aoi_geojson)
        seg = segment_op(unet_weights, scene).add_pvolumes({'/scratch': dem.pvolume}).after(cal)
    with dsl.Condition(publish == 'yes'):
        publish_op(dest).add_pvolumes({'/scratch': vol.volume}).after(seg)


if __name__ == '__main__':
    import os
    kfp.compiler.Compiler().compile(sar_flood, os.path.splitext(__file__)[0] + '.yaml')
