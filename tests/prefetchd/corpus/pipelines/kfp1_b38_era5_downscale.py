# ruff: noqa
"""ERA5 -> 0.05 degree statistical downscaling with a U-Net (KFP v1 SDK -> Argo), climate team.

Raw ERA5 reanalysis files are staged on the team's existing 'climate-scratch'
PVC (add_volume / add_volume_mount with a sub_path); checkpoints go to a
second existing claim attached with add_pvolumes; AWS credentials come from a
Secret via V1EnvVar(value_from=...), the node name from the downward API and
the CDS API key from a ConfigMap. Training asks for a GPU with set_gpu_limit.

Compile (kfp 1.8.x): python kfp1_b38_era5_downscale.py  -> kfp1_b38_era5_downscale.yaml
"""
import os

import kfp
from kfp import dsl
from kubernetes import client as k8s

IMAGE = 'ghcr.io/example/climate-downscale:1.7.0'


def aws_env(op):
    for var, key in (('AWS_ACCESS_KEY_ID', 'access_key'), ('AWS_SECRET_ACCESS_KEY', 'secret_key')):
        op.container.add_env_variable(k8s.V1EnvVar(
            name=var, value_from=k8s.V1EnvVarSource(
                secret_key_ref=k8s.V1SecretKeySelector(name='climate-s3-creds', key=key))))
    return op


def scratch(op, read_only=False):
    op.add_volume(k8s.V1Volume(name='scratch', persistent_volume_claim=k8s.V1PersistentVolumeClaimVolumeSource(
        claim_name='climate-scratch')))
    op.container.add_volume_mount(k8s.V1VolumeMount(name='scratch', mount_path='/scratch',
                                                    sub_path='era5-downscale', read_only=read_only))
    return op


@dsl.pipeline(name='era5-downscale-unet', description='ERA5 0.25deg -> 0.05deg downscaling')
def downscale_pipeline(era5_uri: str = 's3://example-climate/era5/single-levels/t2m/2015-2022/',
                       target_uri: str = 's3://example-climate/cerra-land/t2m/2015-2022/',
                       epochs: int = 40):
    fetch_era5 = aws_env(scratch(dsl.ContainerOp(
        name='fetch-era5', image='amazon/aws-cli:2.15.30',
        command=['aws', 's3', 'sync', '--only-show-errors'],
        arguments=[era5_uri, '/scratch/era5'])))
    fetch_target = aws_env(scratch(dsl.ContainerOp(
        name='fetch-target', image='amazon/aws-cli:2.15.30',
        command=['aws', 's3', 'sync', '--only-show-errors'],
        arguments=[target_uri, '/scratch/cerra'])))
    fetch_topo = aws_env(scratch(dsl.ContainerOp(
        name='fetch-topography', image='amazon/aws-cli:2.15.30',
        command=['aws', 's3', 'cp'],
        arguments=['s3://example-climate/static/gmted2010-0.05deg.nc', '/scratch/static/topo.nc'])))
    regrid = scratch(dsl.ContainerOp(
        name='regrid', image=IMAGE, command=['python', '-m', 'downscale.regrid'],
        arguments=['--era5', '/scratch/era5', '--target', '/scratch/cerra', '--topo', '/scratch/static/topo.nc',
                   '--out', '/scratch/pairs']))
    regrid.after(fetch_era5, fetch_target, fetch_topo)
    regrid.container.add_env_variable(k8s.V1EnvVar(
        name='NODE_NAME', value_from=k8s.V1EnvVarSource(field_ref=k8s.V1ObjectFieldSelector(field_path='spec.nodeName'))))
    train = scratch(dsl.ContainerOp(
        name='train-unet', image=IMAGE, command=['python', '-m', 'downscale.train'],
        arguments=['--pairs', '/scratch/pairs', '--epochs', epochs, '--ckpt', '/ckpt/unet-t2m'],
        file_outputs={'best': '/tmp/best_ckpt.txt'}), read_only=True)
    train.after(regrid)
    train.set_gpu_limit(1)
    train.add_pvolumes({'/ckpt': dsl.PipelineVolume(pvc='downscale-checkpoints')})
    evaluate = scratch(dsl.ContainerOp(
        name='evaluate', image=IMAGE, command=['python', '-m', 'downscale.evaluate'],
        arguments=['--ckpt', train.outputs['best'], '--pairs', '/scratch/pairs']), read_only=True)
    evaluate.add_pvolumes({'/ckpt': dsl.PipelineVolume(pvc='downscale-checkpoints')})
    evaluate.container.add_env_variable(k8s.V1EnvVar(
        name='CDS_API_KEY', value_from=k8s.V1EnvVarSource(
            config_map_key_ref=k8s.V1ConfigMapKeySelector(name='cds-api', key='key'))))
    publish = aws_env(dsl.ContainerOp(
        name='publish', image='amazon/aws-cli:2.15.30', command=['aws', 's3', 'cp', '--recursive'],
        arguments=['/ckpt/unet-t2m', 's3://example-climate/models/downscale-unet-t2m/']))
    publish.add_pvolumes({'/ckpt': dsl.PipelineVolume(pvc='downscale-checkpoints')})
    publish.after(evaluate)


if __name__ == '__main__':
    kfp.compiler.Compiler().compile(downscale_pipeline, os.path.splitext(__file__)[0] + '.yaml')
