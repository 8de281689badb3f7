"""Keyword spotting + speaker enrollment on a VolumeOp work volume and an existing PVC (KFP v1 SDK -> Argo).

How the datasets are named here:
- download-commands gets bucket, prefix (no trailing slash) and a MinIO endpoint as three
  parameters and lists/downloads with boto3 (endpoint_url) into the work volume.
- fetch-keywords downloads a keyword list from raw.githubusercontent.com (a web server, not an
  object store).
- enroll-speakers reads an existing PVC at a path joined from two parameters (the session has a
  space) and copies a roster object whose key has a space from MinIO (AWS_ENDPOINT_URL env).
- train-kws streams background-noise WebDataset shards named with a brace range on AWS S3.
- eval-kws loops over static dicts carrying bucket and key separately and joins them in code
  (one key has a space, one has no trailing slash).
- export-onnx uploads the model; delete-volume removes the work volume.

Compile (kfp 1.8.x): python kfp1_b64_kws_speaker.py  -> kfp1_b64_kws_speaker.yaml
"""
# ruff: noqa
import os

import kfp
from kfp import dsl, onprem
from kfp.components import create_component_from_func
from kubernetes.client.models import V1EnvVar

IMAGE = 'ghcr.io/example/kws:3.2.0'
MINIO = 'http://minio.minio.svc:9000'

EVAL_SETS = [
    {'bucket': 'speech-eval', 'key': 'kws/clean/'},
    {'bucket': 'speech-eval', 'key': 'kws/snr 5db/'},
    {'bucket': 'speech-eval', 'key': 'kws/far-field'},
]


def download_commands(data_bucket: str, commands_prefix: str, s3_endpoint: str):
    import os
    import boto3
    s3 = boto3.client('s3', endpoint_url=s3_endpoint)
    for page in s3.get_paginator('list_objects_v2').paginate(Bucket=data_bucket, Prefix=commands_prefix):
        for obj in page.get('Contents', []):
            rel = obj['Key'][len(commands_prefix):].lstrip('/')
            dst = os.path.join('/work/commands', rel)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            s3.download_file(data_bucket, obj['Key'], dst)


def eval_kws(bucket: str, key: str) -> float:
    import subprocess
    uri = f"s3://{bucket}/{key}"
    out = subprocess.run(['python', '-m', 'kws.eval', '--model', '/work/model', '--data', uri],
                         check=True, capture_output=True, text=True)
    return float(out.stdout.strip().splitlines()[-1])


download_op = create_component_from_func(download_commands, base_image=IMAGE)
eval_op = create_component_from_func(eval_kws, base_image=IMAGE)


@dsl.pipeline(name='kws-speaker-enrollment')
def kws_pipeline(data_bucket: str = 'speech-data',
                 commands_prefix: str = 'speech_commands/v0.02',
                 s3_endpoint: str = MINIO,
                 site: str = 'plant-a',
                 session: str = '2024 Q1'):
    vop = dsl.VolumeOp(name='create-volume', resource_name='kws-work', size='40Gi',
                       modes=dsl.VOLUME_MODE_RWO)
    dl = download_op(data_bucket=data_bucket, commands_prefix=commands_prefix, s3_endpoint=s3_endpoint)
    dl.add_pvolumes({'/work': vop.volume})
    kw = dsl.ContainerOp(name='fetch-keywords', image='curlimages/curl:8.8.0',
                         command=['curl', '-fsSL', '-o', '/tmp/keywords.txt'],
                         arguments=['https://raw.githubusercontent.com/example-org/kws-lists/main/keywords_en.txt'],
                         file_outputs={'keywords': '/tmp/keywords.txt'})
    fx = dsl.ContainerOp(name='extract-features', image=IMAGE, command=['python', '-m', 'kws.features'],
                         arguments=['--audio', '/work/commands', '--keywords', kw.outputs['keywords'],
                                    '--out', '/work/features'],
                         pvolumes={'/work': dl.pvolume})
    en = dsl.ContainerOp(name='enroll-speakers', image=IMAGE, command=['sh', '-c'],
                         arguments=['aws s3 cp "s3://speech-data/enrollment/Plant A/roster.csv" /tmp/roster.csv && '
                                    f'python -m kws.enroll --audio "/enroll/{site}/{session}" '
                                    '--roster /tmp/roster.csv --out /work/speakers'],
                         pvolumes={'/work': vop.volume})
    en.container.add_env_variable(V1EnvVar(name='AWS_ENDPOINT_URL', value=MINIO))
    en.apply(onprem.mount_pvc(pvc_name='speaker-enrollment', volume_name='enroll', volume_mount_path='/enroll'))
    tr = dsl.ContainerOp(name='train-kws', image=IMAGE, command=['python', '-m', 'kws.train'],
                         arguments=['--features', '/work/features', '--speakers', '/work/speakers',
                                    '--noise-shards', 's3://speech-shards/noise/bg-{0000..0063}.tar',
                                    '--out', '/work/model'],
                         pvolumes={'/work': fx.pvolume})
    tr.after(en)
    with dsl.ParallelFor(EVAL_SETS) as es:
        ev = eval_op(bucket=es.bucket, key=es.key)
        ev.add_pvolumes({'/work': tr.pvolume})
    ex = dsl.ContainerOp(name='export-onnx', image=IMAGE, command=['sh', '-c'],
                         arguments=['python -m kws.export --model /work/model --out /tmp/kws.onnx && '
                                    'aws s3 cp /tmp/kws.onnx s3://speech-models/kws/v7/kws.onnx'],
                         pvolumes={'/work': tr.pvolume})
    ex.after(ev)
    vop.delete().after(ex)


if __name__ == '__main__':
    kfp.compiler.Compiler().compile(kws_pipeline, os.path.splitext(__file__)[0] + '.yaml')
