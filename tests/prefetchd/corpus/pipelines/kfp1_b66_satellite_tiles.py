# ruff: noqa
"""Sentinel-2 land-cover U-Net on a VolumeOp work volume (KFP v1 SDK -> Argo).

s5cmd copies 10 m band tiles selected by a glob whose bucket, prefix and year
are pipeline parameters; labels come from a shapefile-style GeoPackage inside a
zip on S3 (fsspec `zip://member::s3://archive.zip`); training globs gzipped
TFRecords with tf.io.gfile under a prefix that is only a component default
(the pipeline does not pass it) and reads a DEM from an existing PVC; if the
validation IoU is good enough, a static ParallelFor predicts per region with
Ray Data (URL built from the loop item in code) and smart_open (AOI URI as a
loop-item field) and writes predictions.

Compile (kfp 1.8.x): python kfp1_b66_satellite_tiles.py  -> kfp1_b66_satellite_tiles.yaml
"""
import os

import kfp
from kfp import dsl, onprem
from kfp.components import create_component_from_func

GEO_IMAGE = 'ghcr.io/example/eo-geo:0.9.2'
TF_IMAGE = 'ghcr.io/example/eo-unet-tf:2.15.0'

REGIONS = [
    {'region': 'alps', 'aoi': 's3://example-eo-aoi/regions/alps.geojson'},
    {'region': 'po-valley', 'aoi': 's3://example-eo-aoi/regions/po-valley.geojson'},
    {'region': 'rhine', 'aoi': 's3://example-eo-aoi/regions/rhine.geojson'},
]


def load_labels(labels_uri: str, out_path: str) -> int:
    import fsspec
    import geopandas as gpd
    with fsspec.open(f'zip://worldcover/landcover.gpkg::{labels_uri}') as f:
        gdf = gpd.read_file(f)
    gdf.to_parquet(out_path)
    return len(gdf)


def train_unet(tiles_dir: str, labels_path: str, dem_dir: str, epochs: int,
               val_prefix: str = 's3://example-eo-archive/sentinel2/val-tfrecords') -> float:
    import tensorflow as tf
    from eo_unet import build_model, make_train_ds, mean_iou
    val_files = tf.io.gfile.glob(f'{val_prefix}/val-*.tfrecord.gz')
    val_ds = tf.data.TFRecordDataset(val_files, compression_type='GZIP')
    model = build_model()
    model.fit(make_train_ds(tiles_dir, labels_path, dem_dir), validation_data=val_ds, epochs=epochs)
    model.save('/work/model.keras')
    return float(mean_iou(model, val_ds))


def predict_region(region: str, aoi_uri: str, year: str, model_path: str):
    import json
    import ray
    from smart_open import open as sopen
    from eo_unet import load_model, predict_batch
    with sopen(aoi_uri) as f:
        aoi = json.load(f)
    chips = ray.data.read_images(f's3://example-eo-archive/sentinel2/l2a/chips/{region}/', include_paths=True)
    model = load_model(model_path)
    preds = chips.map_batches(lambda b: predict_batch(model, b, aoi), batch_size=64)
    preds.write_parquet(f's3://example-eo-predictions/landcover/{year}/{region}/')


load_labels_op = create_component_from_func(load_labels, base_image=GEO_IMAGE)
train_op = create_component_from_func(train_unet, base_image=TF_IMAGE)
predict_op = create_component_from_func(predict_region, base_image=GEO_IMAGE)


@dsl.pipeline(name='s2-landcover-unet')
def s2_pipeline(scene_bucket: str = 'example-eo-archive', tile_prefix: str = 'sentinel2/l2a/tiles',
                year: str = '2023', epochs: int = 40):
    vop = dsl.VolumeOp(name='create-work-volume', resource_name='s2-work', size='200Gi',
                       modes=dsl.VOLUME_MODE_RWO)
    sync = dsl.ContainerOp(
        name='sync-tiles', image='peakcom/s5cmd:v2.2.2', command=['/s5cmd'],
        arguments=['--numworkers', '64', 'cp', f's3://{scene_bucket}/{tile_prefix}/T32U*/{year}/*_10m.tif',
                   '/work/tiles/'],
        pvolumes={'/work': vop.volume})
    labels = load_labels_op(labels_uri='s3://example-eo-labels/landcover/esa-worldcover-2021.zip',
                            out_path='/work/labels.parquet').add_pvolumes({'/work': vop.volume})
    train = train_op(tiles_dir='/work/tiles', labels_path='/work/labels.parquet', dem_dir='/dem/copernicus-30m',
                     epochs=epochs).add_pvolumes({'/work': sync.pvolume}).after(labels)
    train.apply(onprem.mount_pvc(pvc_name='eo-dem-cache', volume_name='dem', volume_mount_path='/dem'))
    train.set_gpu_limit(2)
    with dsl.Condition(train.output >= 0.6):
        with dsl.ParallelFor(REGIONS) as r:
            predict_op(region=r.region, aoi_uri=r.aoi, year=year,
                       model_path='/work/model.keras').add_pvolumes({'/work': train.pvolume})


if __name__ == '__main__':
    kfp.compiler.Compiler().compile(s2_pipeline, os.path.splitext(__file__)[0] + '.yaml')
