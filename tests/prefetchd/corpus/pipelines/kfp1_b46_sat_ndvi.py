# ruff: noqa
"""Sentinel-2 NDVI per field for crop monitoring (KFP v1 SDK -> Argo).

Compile (kfp 1.8.x): python kfp1_b46_sat_ndvi.py -> kfp1_b46_sat_ndvi.yaml
"""
import os

import kfp
from kfp import dsl
from kfp.components import create_component_from_func
from kubernetes.client.models import V1EnvVar

IMG = 'ghcr.io/agritech/eo-tools:1.9.2'
MINIO = 'http://minio.agri.svc:9000'

FIELDS = [
    {'farm': 'nord', 'aoi': 's3://agri-fields/boundaries/nord/'},
    {'farm': 'süd', 'aoi': 's3://agri-fields/boundaries/s%C3%BCd/'},
]


def compute_ndvi(farm: str, aoi_uri: str, tile_date: str) -> float:
    import os, eo
    return eo.ndvi(aoi_uri, scenes='/work/scenes', date=tile_date, endpoint=os.environ['AWS_ENDPOINT_URL'])


ndvi_op = create_component_from_func(compute_ndvi, base_image=IMG)


@dsl.pipeline(name='s2-field-ndvi', description='NDVI per field from Sentinel-2 COGs')
def ndvi_pipeline(tile_date: str = '2024-06-15',
                  scenes_url: str = 'https://sentinel-cogs.s3.us-west-2.amazonaws.com/sentinel-s2-l2a-cogs/32/U/PU/2024/6/'):
    bye = dsl.ContainerOp(name='report', image='curlimages/curl:8.7.1',
                          command=['sh', '-c', 'echo done'])
    with dsl.ExitHandler(bye):
        vol = dsl.VolumeOp(name='scratch-volume', resource_name='ndvi-scratch', size='50Gi',
                           modes=dsl.VOLUME_MODE_RWO)
        scenes = dsl.ContainerOp(
            name='fetch-scenes', image='amazon/aws-cli:2.15.30',
            command=['sh', '-c'],
            arguments=['u="$0"; b=${u#https://}; b=${b%%.s3.*}; k=${u#*.amazonaws.com/}; '
                       'aws s3 sync --no-sign-request "s3://$b/$k" /work/scenes/', scenes_url],
            pvolumes={'/work': vol.volume})
        weather = dsl.ContainerOp(
            name='fetch-weather', image='busybox:1.36',
            command=['wget', '-q', '-O', '/work/era5.nc', 'http://minio.agri.svc:9000/agri-weather/era5/2024-06.nc'],
            pvolumes={'/work': vol.volume})
        weather.after(scenes)
        with dsl.ParallelFor(FIELDS) as f:
            nd = ndvi_op(farm=f.farm, aoi_uri=f.aoi, tile_date=tile_date)
            nd.add_pvolumes({'/work': vol.volume.after(weather)})
            nd.container.add_env_variable(V1EnvVar(name='AWS_ENDPOINT_URL', value=MINIO))
            with dsl.Condition(nd.output < 0.3):
                alert = dsl.ContainerOp(
                    name='drought-alert', image='amazon/aws-cli:2.15.30',
                    command=['sh', '-c'],
                    arguments=['echo "$0" | aws --endpoint-url http://minio.agri.svc:9000 s3 cp - s3://agri-alerts/drought/$1.txt',
                               nd.output, f.farm])
        cleanup = dsl.ResourceOp(
            name='delete-scratch', action='delete',
            k8s_resource={'apiVersion': 'v1', 'kind': 'PersistentVolumeClaim',
                          'metadata': {'name': '{{workflow.name}}-ndvi-scratch'}})
        cleanup.after(nd)


if __name__ == '__main__':
    kfp.compiler.Compiler().compile(ndvi_pipeline, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                                 'kfp1_b46_sat_ndvi.yaml'))
