# ruff: noqa
"""ERA5 -> 2 km downscaling U-Net for the weather team (KFP v1 SDK -> Argo Workflow).

A VolumeOp makes a fusecache-backed work claim; one sync task per ERA5
variable copies the reanalysis from S3 into it; regridding also mounts a
terrain-elevation claim named by a parameter (sub-path, read-only); station
observations are read from S3 through an env var; the model is published
only when validation passes; a notification runs on exit.

Compile (kfp 1.8.x): python kfp1_b57_era5_downscale.py  -> kfp1_b57_era5_downscale.yaml
"""
import os

import kfp
from kfp import dsl
from kubernetes import client as k8s

IMAGE = 'ghcr.io/contoso-wx/downscale:0.9.2'
VARS = [
    {'var': 't2m', 'uri': 's3://contoso-era5/reanalysis/t2m/1990-2023/'},
    {'var': 'tp', 'uri': 's3://contoso-era5/reanalysis/tp/1990-2023/'},
    {'var': 'u10', 'uri': 's3://contoso-era5/reanalysis/u10/1990-2023/'},
]


@dsl.pipeline(name='era5-downscale-unet')
def era5_pipeline(dem_pvc: str = 'terrain-dem', region: str = 'alps',
                  stations_uri: str = 's3://contoso-obs/stations/alps/hourly.parquet'):
    notify = dsl.ContainerOp(name='notify', image='curlimages/curl:8.8.0', command=['sh', '-c'],
                             arguments=['curl -s -X POST https://hooks.contoso.io/wx -d done'])
    with dsl.ExitHandler(notify):
        vop = dsl.VolumeOp(name='create-work', resource_name='era5-work', size='800Gi',
                           storage_class='fusecache-s3', modes=dsl.VOLUME_MODE_RWM)
        with dsl.ParallelFor(VARS) as item:
            sync = dsl.ContainerOp(name='sync-var', image='amazon/aws-cli:2.15.30',
                            command=['aws', 's3', 'sync', '--no-progress'],
                            arguments=[item.uri, '/era5/raw/{}'.format(item.var)],
                            pvolumes={'/era5': vop.volume})
        regrid = dsl.ContainerOp(name='regrid', image=IMAGE, command=['python', '-m', 'downscale.regrid'],
                                 arguments=['--raw', '/era5/raw', '--dem', '/dem/srtm30.tif', '--region', region,
                                            '--out', '/era5/regridded'],
                                 pvolumes={'/era5': vop.volume})
        regrid.after(sync)
        regrid.add_volume(k8s.V1Volume(name='dem', persistent_volume_claim=k8s.V1PersistentVolumeClaimVolumeSource(
            claim_name=dem_pvc, read_only=True)))
        regrid.container.add_volume_mount(k8s.V1VolumeMount(name='dem', mount_path='/dem', sub_path=region, read_only=True))

        train = dsl.ContainerOp(name='train-unet', image=IMAGE, command=['python', '-m', 'downscale.train'],
                                arguments=['--data', '/era5/regridded', '--epochs', '40', '--ckpt', '/era5/ckpt'],
                                pvolumes={'/era5': regrid.pvolume})
        train.set_gpu_limit(4)
        val = dsl.ContainerOp(name='validate', image=IMAGE, command=['python', '-m', 'downscale.validate'],
                              arguments=['--ckpt', '/era5/ckpt/best.pt', '--stations', '$(STATIONS_URI)',
                                         '--score-file', '/tmp/crps.txt'],
                              pvolumes={'/era5': train.pvolume},
                              file_outputs={'crps': '/tmp/crps.txt'})
        val.container.add_env_variable(k8s.V1EnvVar(name='STATIONS_URI', value=stations_uri))
        with dsl.Condition(val.outputs['crps'] < 0.35):
            dsl.ContainerOp(name='publish', image='amazon/aws-cli:2.15.30', command=['aws', 's3', 'cp'],
                            arguments=['/era5/ckpt/best.pt', 's3://contoso-wx-models/downscale/alps/unet-latest.pt'],
                            pvolumes={'/era5': val.pvolume})


if __name__ == '__main__':
    kfp.compiler.Compiler().compile(era5_pipeline, os.path.splitext(__file__)[0] + '.yaml')
