# ruff: noqa
"""KFP v1 (blind test r3): ERA5 -> HRRR statistical downscaling (U-Net), one month.

Idioms: VolumeOp scratch + pvolumes, xarray.open_zarr of the public ARCO-ERA5 store on GCS,
s3fs.get of a scheme-less 'bucket/key' path (anonymous NOAA bucket) per static loop item,
a raw dsl.ContainerOp running an argparse script with --static-fields / --resume-from /
--output-dir (a {{workflow.uid}} path), os.path.join over an input, fsspec 'w' report,
ExitHandler, VolumeOp.delete(), set_retry.

Compile: /tmp/kfp1/bin/python kfp1_r3_era5_downscale.py
"""
import os

import kfp
from kfp import components, dsl

WX = 'ghcr.io/acme-weather/wx-ml:2024.09'


def subset_era5(era5_zarr: str, variables: str, start: str, end: str):
    import xarray as xr
    ds = xr.open_zarr(era5_zarr, storage_options={'token': 'anon'}, chunks=None)
    ds = ds[variables.split(',')].sel(time=slice(start, end), latitude=slice(53, 21), longitude=slice(234, 294))
    ds.to_zarr('/work/era5_subset.zarr', mode='w')


subset_op = components.create_component_from_func(subset_era5, base_image=WX)


def fetch_hrrr(hrrr_bucket: str, day: str):
    import s3fs
    fs = s3fs.S3FileSystem(anon=True)
    fs.get(f'{hrrr_bucket}/hrrr.{day}/conus/', f'/work/hrrr/{day}/', recursive=True)


fetch_op = components.create_component_from_func(fetch_hrrr, base_image=WX)


def evaluate_skill(obs_root: str, year: str, report_uri: str):
    import json
    import os

    import fsspec
    import pandas as pd
    from wxml.skill import crps_at_stations

    obs = pd.read_csv(os.path.join(obs_root, 'ghcnd', f'{year}.csv.gz'))
    skill = crps_at_stations('/work/model', '/work/era5_subset.zarr', obs)
    with fsspec.open(report_uri, 'w') as f:
        json.dump(skill, f)


eval_op = components.create_component_from_func(evaluate_skill, base_image=WX)


@dsl.pipeline(name='era5-hrrr-downscale')
def era5_downscale(era5_zarr: str = 'gs://gcp-public-data-arco-era5/ar/full_37-1h-0p25deg-chunk-1.zarr-v3',
                   variables: str = '2m_temperature,10m_u_component_of_wind,10m_v_component_of_wind',
                   start: str = '2023-07-15', end: str = '2023-07-17',
                   hrrr_bucket: str = 'noaa-hrrr-bdp-pds',
                   obs_root: str = 's3://acme-weather/obs', year: str = '2023',
                   epochs: int = 40):
    notify = dsl.ContainerOp(name='notify', image='curlimages/curl:8.8.0',
                             command=['curl', '-s', '-X', 'POST', 'https://chat.acme.example/hooks/wx'])
    with dsl.ExitHandler(notify):
        vop = dsl.VolumeOp(name='era5-work', resource_name='era5-work', size='1Ti',
                           modes=dsl.VOLUME_MODE_RWO, storage_class='gp3')
        sub = subset_op(era5_zarr=era5_zarr, variables=variables, start=start, end=end).add_pvolumes({'/work': vop.volume})
        sub.set_retry(2)
        with dsl.ParallelFor(['20230715', '20230716', '20230717']) as day:
            hr = fetch_op(hrrr_bucket=hrrr_bucket, day=day).add_pvolumes({'/work': vop.volume})
        train = dsl.ContainerOp(
            name='train-downscaler', image='ghcr.io/acme-weather/unet-downscale:1.6.0',
            command=['python', '/app/train.py'],
            arguments=['--era5', '/work/era5_subset.zarr', '--hrrr', '/work/hrrr',
                       '--static-fields', 's3://acme-weather/static/orography-3km.nc',
                       '--resume-from', 's3://acme-weather-models/unet-ds/2024-06/last.ckpt',
                       '--epochs', epochs, '--local-copy', '/work/model',
                       '--output-dir', 's3://acme-weather-models/unet-ds/{{workflow.uid}}/'],
            pvolumes={'/work': vop.volume},
        ).after(sub, hr)
        train.set_gpu_limit(4)
        ev = eval_op(obs_root=obs_root, year=year,
                     report_uri='s3://acme-weather-reports/downscale/2023-07.json').add_pvolumes({'/work': vop.volume}).after(train)
        vop.delete().after(ev)


if __name__ == '__main__':
    kfp.compiler.Compiler().compile(era5_downscale, os.path.splitext(__file__)[0] + '.yaml')
