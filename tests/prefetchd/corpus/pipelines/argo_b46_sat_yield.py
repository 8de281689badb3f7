# ruff: noqa
"""County crop-yield model from satellite composites on MinIO + public clouds (Hera -> Argo Workflow).

Compile: python argo_b46_sat_yield.py -> argo_b46_sat_yield.yaml
"""
import os

from hera.workflows import (DAG, Container, Env, HTTPArtifact, Parameter, S3Artifact, Script, Workflow,
                            models as m)

MINIO_EP = 'minio.minio.svc:9000'
IMG = 'ghcr.io/agritech/yield:0.14.0'
CREDS = dict(access_key_secret=m.SecretKeySelector(name='minio-creds', key='accesskey'),
             secret_key_secret=m.SecretKeySelector(name='minio-creds', key='secretkey'))
WORK = m.VolumeMount(name='work', mount_path='/work')

with Workflow(
    generate_name='crop-yield-',
    entrypoint='main',
    arguments=[Parameter(name='season', value='2024')],
    volume_claim_templates=[m.PersistentVolumeClaim(
        metadata=m.ObjectMeta(name='work'),
        spec=m.PersistentVolumeClaimSpec(access_modes=['ReadWriteOnce'],
                                         resources=m.VolumeResourceRequirements(requests={'storage': '40Gi'})))],
) as w:
    labels = Container(
        name='fetch-labels', image='busybox:1.36',
        command=['sh', '-c', 'cp "/in/yield labels.csv" /work/labels.csv'],
        inputs=[S3Artifact(name='labels', path='/in/yield labels.csv', endpoint=MINIO_EP, insecure=True,
                           bucket='crop-labels', key='usda/2024/yield labels.csv', **CREDS)],
        volume_mounts=[WORK])
    dem = Container(
        name='fetch-dem', image='busybox:1.36',
        command=['sh', '-c', 'tar -xzf /in/dem.tar.gz -C /work/dem'],
        inputs=[HTTPArtifact(name='dem', path='/in/dem.tar.gz',
                             url='https://s3.eu-central-1.amazonaws.com/agri-dem/copernicus%2Fdem30%2Ftiles.tar.gz'
                                 '?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Expires=86400&X-Amz-Signature=0badc0de')],
        volume_mounts=[WORK])
    landsat = Container(
        name='fetch-landsat', image='google/cloud-sdk:470.0.0-slim',
        command=['gsutil', '-m', 'rsync', '-r', 'gs://gcp-public-data-landsat/LC08/01/027/031/', '/work/landsat/'],
        volume_mounts=[WORK])
    composite = Script(
        name='composite', image=IMG,
        inputs=[Parameter(name='region')],
        env=[Env(name='S3_ENDPOINT', value='http://minio.minio.svc:9000')],
        volume_mounts=[WORK],
        command=['python'],
        source='''import os, xarray as xr
region = "{{inputs.parameters.region}}"
ds = xr.open_zarr(f"s3://agri-eo/composites/{region}/ndvi.zarr/",
                  storage_options={"client_kwargs": {"endpoint_url": os.environ["S3_ENDPOINT"]}})
ds.to_netcdf(f"/work/{region}.nc")
''')
    train = Container(
        name='train-yield', image=IMG,
        command=['python', '-m', 'yieldmodel.train', '--data', '/work', '--season', '{{workflow.parameters.season}}'],
        env=[Env(name='MLFLOW_TRACKING_URI', value='http://mlflow.mlflow.svc:5000'),
             Env(name='MLFLOW_S3_ENDPOINT_URL', value='http://minio.minio.svc:9000')],
        volume_mounts=[WORK],
        outputs=[Parameter(name='rmse', value_from=m.ValueFrom(path='/work/rmse.txt')),
                 S3Artifact(name='model', path='/work/model', endpoint=MINIO_EP, insecure=True, bucket='crop-models',
                            key='yield/{{workflow.parameters.season}}/model.tgz', **CREDS)])
    backtest = Container(
        name='backtest', image=IMG,
        command=['python', '-m', 'yieldmodel.backtest', '--model', '/work/model',
                 '--holdout', 'az://agri-holdout/county-yield/2023.parquet'],
        env=[Env(name='AZURE_STORAGE_ACCOUNT_NAME', value='agriholdout')],
        volume_mounts=[WORK])
    with DAG(name='main'):
        l = labels(name='fetch-labels')
        d = dem(name='fetch-dem')
        ls = landsat(name='fetch-landsat')
        c = composite(name='composite', arguments={'region': '{{item}}'}, with_items=['iowa', 'nebraska', 'kansas'])
        t = train(name='train-yield')
        b = backtest(name='backtest', when='{{tasks.train-yield.outputs.parameters.rmse}} < 12')
        [l, d, ls, c] >> t >> b

w.to_file(os.path.dirname(os.path.abspath(__file__)), name='argo_b46_sat_yield')
