# ruff: noqa
"""Retail returns-fraud model: daily retrain and scoring (Hera -> Argo Workflow, DAG).

The SKU master is public-read in the merchandising team's AWS bucket and is
pulled by its dual-stack HTTPS address as an HTTP artifact. Returns per region
sit on the shop's MinIO and are read with boto3 (bucket and key from
parameters and the loop item). Return-photo thumbnails are a tarball on the
same MinIO, fetched with curl. The model is put with `s3api put-object` and
read back by the scoring step.

Generate: python argo_b71_returns_fraud.py -> argo_b71_returns_fraud.yaml
"""
import os

from hera.workflows import DAG, Container, Env, HTTPArtifact, Parameter, Script, Workflow
from hera.workflows import models as m

IMG = 'ghcr.io/acme-retail/returns-ml:4.1.2'
MINIO = 'http://minio.data:9000'
WORK = m.VolumeMount(name='work', mount_path='/work')
MINIO_CREDS = [
    m.EnvVar(name='AWS_ACCESS_KEY_ID', value_from=m.EnvVarSource(secret_key_ref=m.SecretKeySelector(name='minio-retail', key='access'))),
    m.EnvVar(name='AWS_SECRET_ACCESS_KEY', value_from=m.EnvVarSource(secret_key_ref=m.SecretKeySelector(name='minio-retail', key='secret'))),
]

with Workflow(
    generate_name='returns-fraud-',
    entrypoint='main',
    arguments=[Parameter(name='day', value='2025-03-14'),
               Parameter(name='returns_bucket', value='retail-returns')],
    volume_claim_templates=[m.PersistentVolumeClaim(
        metadata=m.ObjectMeta(name='work'),
        spec=m.PersistentVolumeClaimSpec(access_modes=['ReadWriteOnce'],
                                         resources=m.VolumeResourceRequirements(requests={'storage': '30Gi'})))],
) as w:
    catalog = Container(
        name='fetch-catalog', image='busybox:1.36',
        command=['sh', '-c', 'cp /in/sku_master.parquet /work/sku_master.parquet'],
        inputs=[HTTPArtifact(name='sku-master', path='/in/sku_master.parquet',
                             url='https://retail-ref.s3.dualstack.us-east-1.amazonaws.com/catalog/sku_master_2025-03.parquet')],
        volume_mounts=[WORK])

    returns = Script(
        name='fetch-returns', image=IMG, command=['python'],
        inputs=[Parameter(name='region')],
        env=[Env(name='S3_ENDPOINT_URL', value=MINIO)] + MINIO_CREDS,
        volume_mounts=[WORK],
        source='''import os
import boto3

bucket = "{{workflow.parameters.returns_bucket}}"
region = "{{inputs.parameters.region}}"
day = "{{workflow.parameters.day}}"
s3 = boto3.client("s3", endpoint_url=os.environ["S3_ENDPOINT_URL"])
key = f"returns/region={region}/dt={day}/returns.csv.gz"
os.makedirs("/work/returns", exist_ok=True)
with open(f"/work/returns/{region}.csv.gz", "wb") as fh:
    s3.download_fileobj(Bucket=bucket, Key=key, Fileobj=fh)
''')

    thumbs = Container(
        name='fetch-thumbnails', image='curlimages/curl:8.7.1',
        command=['sh', '-c'],
        args=['curl -fsS -o /work/thumbs.tar http://minio.data:9000/retail-images/returns/thumbs-{{workflow.parameters.day}}.tar '
              '&& tar -xf /work/thumbs.tar -C /work/thumbs'],
        volume_mounts=[WORK])

    train = Script(
        name='train-model', image=IMG, command=['bash'],
        env=MINIO_CREDS,
        volume_mounts=[WORK],
        source='''set -euo pipefail
python -m returns_ml.train --returns /work/returns --catalog /work/sku_master.parquet \\
    --thumbs /work/thumbs --model-out /work/model.pkl
aws --endpoint-url http://minio.data:9000 s3api put-object --bucket retail-models \\
    --key returns-fraud/{{workflow.parameters.day}}/model.pkl --body /work/model.pkl
''')

    score = Script(
        name='score-open-returns', image=IMG, command=['python'],
        env=MINIO_CREDS,
        source='''import pandas as pd
import pickle
import s3fs

opts = {"client_kwargs": {"endpoint_url": "http://minio.data:9000"}}
fs = s3fs.S3FileSystem(**opts)
print("existing score days:", fs.ls("retail-scores/returns-fraud/"))
with fs.open("retail-models/returns-fraud/{{workflow.parameters.day}}/model.pkl", "rb") as f:
    model = pickle.load(f)
open_returns = pd.read_parquet("s3://retail-returns/open/dt={{workflow.parameters.day}}/", storage_options=opts)
open_returns["fraud_score"] = model.predict_proba(open_returns)[:, 1]
open_returns.to_parquet("s3://retail-scores/returns-fraud/dt={{workflow.parameters.day}}/scores.parquet",
                        storage_options=opts)
''')

    with DAG(name='main'):
        c = catalog(name='fetch-catalog')
        r = returns(name='fetch-returns', arguments={'region': '{{item}}'}, with_items=['eu', 'us'])
        t = thumbs(name='fetch-thumbnails')
        tr = train(name='train-model')
        s = score(name='score-open-returns')
        [c, r, t] >> tr >> s

w.to_file(os.path.dirname(os.path.abspath(__file__)), name='argo_b71_returns_fraud')
