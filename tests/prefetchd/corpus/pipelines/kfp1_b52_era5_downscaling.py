# ruff: noqa
"""Statistical downscaling of CMIP6 daily temperature over the Alps (KFP v1 SDK -> Argo).

ERA5 subset from a public Zarr store (xarray.open_zarr -> to_zarr), CMIP6
models regridded onto it in a static ParallelFor over dicts, GHCN-Daily
station observations filtered in PySpark (s3a://, partitionBy write),
TFRecords written next to them, a tf.data trainer that finds its shards
with tf.io.gfile.glob and checkpoints to a VolumeOp claim, the same loop
again to apply the model, skill scored against MeteoSwiss CSVs found with
fsspec.open_files, a gated catalog write and an exit task that clears the
TFRecords.

Compile (kfp 1.8.x): python kfp1_b52_era5_downscaling.py  -> kfp1_b52_era5_downscaling.yaml
"""
import os

import kfp
from kfp import dsl
from kfp.components import create_component_from_func

IMAGE = 'ghcr.io/climate-ml/downscale:0.9.4'
SPARK_IMAGE = 'ghcr.io/climate-ml/pyspark-s3a:3.5.1'

GCMS = [
    {'gcm': 'CESM2', 'store': 's3://cmip6-pds/CMIP6/ScenarioMIP/NCAR/CESM2/ssp585/r4i1p1f1/day/tas/gn/v20200528/'},
    {'gcm': 'MPI-ESM1-2-HR', 'store': 's3://cmip6-pds/CMIP6/ScenarioMIP/DKRZ/MPI-ESM1-2-HR/ssp585/r1i1p1f1/day/tas/gn/v20190710/'},
    {'gcm': 'EC-Earth3', 'store': 's3://cmip6-pds/CMIP6/ScenarioMIP/EC-Earth-Consortium/EC-Earth3/ssp585/r1i1p1f1/day/tas/gr/v20200310/'},
]


def subset_era5(era5_store: str, work_root: str):
    import xarray as xr
    ds = xr.open_zarr(era5_store, storage_options={"anon": True}, consolidated=True)
    alps = ds[["t2m", "z", "msl"]].sel(latitude=slice(49, 43), longitude=slice(4, 17), time=slice("1980", "2014"))
    alps.chunk({"time": 365}).to_zarr(work_root + "/era5_subset.zarr", mode="w")


def regrid_cmip6(gcm: str, store: str, work_root: str):
    import xarray as xr
    import xesmf as xe
    target = xr.open_zarr(work_root + "/era5_subset.zarr")
    src = xr.open_zarr(store, storage_options={"anon": True})
    out = xe.Regridder(src, target, "bilinear")(src[["tas"]])
    out.to_zarr(f"{work_root}/cmip6/{gcm}.zarr", mode="w")


def station_obs(ghcn_root: str, out_root: str, first_year: int):
    from pyspark.sql import SparkSession, functions as F
    spark = (SparkSession.builder.appName("ghcnd-alps")
             .config("spark.hadoop.fs.s3a.aws.credentials.provider",
                     "com.amazonaws.auth.DefaultAWSCredentialsProviderChain").getOrCreate())
    obs = spark.read.parquet(ghcn_root)
    alps = (obs.where((F.col("ELEMENT") == "TMAX") & (F.col("YEAR") >= first_year))
               .where(F.col("ID").substr(1, 2).isin("SZ", "AU", "IT", "FR", "GM"))
               .withColumnRenamed("YEAR", "year"))
    alps.repartition("year").write.mode("overwrite").partitionBy("year").parquet(out_root)


def make_tfrecords(work_root: str, stations_root: str, n_shards: int):
    import pandas as pd
    import tensorflow as tf
    import xarray as xr
    era5 = xr.open_zarr(work_root + "/era5_subset.zarr")
    obs = pd.read_parquet(stations_root.replace("s3a://", "s3://"), filters=[("year", ">=", 1990)])
    from downscale.pairs import make_pairs
    pairs = make_pairs(era5, obs)
    for i in range(n_shards):
        path = f"{work_root}/tfrecords/train-{i:05d}-of-{n_shards:05d}.tfrecord"
        with tf.io.TFRecordWriter(path) as w:
            for ex in pairs[i::n_shards]:
                w.write(ex.SerializeToString())


def train_unet_sr(work_root: str, epochs: int) -> str:
    import tensorflow as tf
    from downscale.model import build_unet, parse_example
    files = tf.io.gfile.glob(work_root + "/tfrecords/train-*.tfrecord")
    ds = (tf.data.TFRecordDataset(files, num_parallel_reads=tf.data.AUTOTUNE)
          .map(parse_example).shuffle(4096).batch(64).prefetch(tf.data.AUTOTUNE))
    model = build_unet()
    model.fit(ds, epochs=epochs, callbacks=[tf.keras.callbacks.ModelCheckpoint("/ckpt/unet-sr-{epoch:03d}.keras")])
    model.save("/ckpt/final.keras")
    return "/ckpt/final.keras"


def apply_downscaling(gcm: str, work_root: str, products_root: str):
    import tensorflow as tf
    import xarray as xr
    from downscale.model import predict_dataset
    model = tf.keras.models.load_model("/ckpt/final.keras")
    coarse = xr.open_zarr(f"{work_root}/cmip6/{gcm}.zarr").sel(time=slice("2015", "2100"))
    predict_dataset(model, coarse).to_zarr(f"{products_root}/{gcm}/tas_2015_2100.zarr", mode="w")


def evaluate_skill(work_root: str, stations_glob: str) -> float:
    import fsspec
    import pandas as pd
    import tensorflow as tf
    import xarray as xr
    from downscale.model import rmse_at_stations
    model = tf.keras.models.load_model("/ckpt/final.keras")
    era5 = xr.open_zarr(work_root + "/era5_subset.zarr").sel(time=slice("2010", "2014"))
    frames = []
    for of in fsspec.open_files(stations_glob, mode="rt"):
        with of as f:
            frames.append(pd.read_csv(f, sep=";", parse_dates=["date"]))
    return rmse_at_stations(model, era5, pd.concat(frames))


def publish_catalog(products_root: str, rmse: float):
    import json
    import smart_open
    item = {"type": "Collection", "id": "alps-1km-tas", "summaries": {"rmse_k": rmse},
            "links": [{"rel": "item", "href": f"{products_root}/{g}/tas_2015_2100.zarr"}
                      for g in ("CESM2", "MPI-ESM1-2-HR", "EC-Earth3")]}
    with smart_open.open(f"{products_root}/catalog.json", "w") as f:
        json.dump(item, f, indent=2)


def clear_prefix(prefix: str):
    import s3fs
    s3fs.S3FileSystem().rm(prefix, recursive=True)


subset_op = create_component_from_func(subset_era5, base_image=IMAGE)
regrid_op = create_component_from_func(regrid_cmip6, base_image=IMAGE)
station_op = create_component_from_func(station_obs, base_image=SPARK_IMAGE)
tfrec_op = create_component_from_func(make_tfrecords, base_image=IMAGE)
train_op = create_component_from_func(train_unet_sr, base_image=IMAGE)
apply_op = create_component_from_func(apply_downscaling, base_image=IMAGE)
skill_op = create_component_from_func(evaluate_skill, base_image=IMAGE)
catalog_op = create_component_from_func(publish_catalog, base_image=IMAGE)
clear_op = create_component_from_func(clear_prefix, base_image=IMAGE)


@dsl.pipeline(name='alps-cmip6-downscaling')
def downscale_pipeline(
    era5_store: str = 's3://climate-reanalysis/era5/single-levels-1h.zarr',
    work_root: str = 's3://climate-work/downscale/alps',
    ghcn_root: str = 's3a://noaa-ghcn-pds/parquet/by_year/',
    products_root: str = 's3://climate-products/alps-1km',
    epochs: int = 60,
):
    cleanup = clear_op(prefix='s3://climate-work/downscale/alps/tfrecords/')
    with dsl.ExitHandler(cleanup):
        sub = subset_op(era5_store=era5_store, work_root=work_root)
        with dsl.ParallelFor(GCMS) as g:
            rg = regrid_op(gcm=g.gcm, store=g.store, work_root=work_root).after(sub)
        st = station_op(ghcn_root=ghcn_root, out_root='s3a://climate-work/downscale/alps/stations/', first_year=1980)
        tfr = tfrec_op(work_root=work_root, stations_root='s3a://climate-work/downscale/alps/stations/',
                       n_shards=16).after(sub, st)
        vol = dsl.VolumeOp(name='ckpt-volume', resource_name='sr-ckpt', size='20Gi',
                           modes=dsl.VOLUME_MODE_RWO)
        tr = train_op(work_root=work_root, epochs=epochs).add_pvolumes({'/ckpt': vol.volume}).after(tfr)
        tr.set_gpu_limit(1)
        with dsl.ParallelFor(GCMS) as g2:
            ap = apply_op(gcm=g2.gcm, work_root=work_root, products_root=products_root) \
                .add_pvolumes({'/ckpt': tr.pvolume}).after(rg)
        sk = skill_op(work_root=work_root,
                      stations_glob='s3://climate-stations/meteoswiss/homogenized/tmax_*.csv') \
            .add_pvolumes({'/ckpt': tr.pvolume})
        with dsl.Condition(sk.output < 1.5):
            catalog_op(products_root=products_root, rmse=sk.output).after(ap)


if __name__ == '__main__':
    kfp.compiler.Compiler().compile(downscale_pipeline, os.path.splitext(__file__)[0] + '.yaml')
