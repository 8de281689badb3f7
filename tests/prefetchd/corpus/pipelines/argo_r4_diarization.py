# ruff: noqa
"""Argo Workflow (Hera, blind test r4): nightly speaker diarization of meeting recordings.

- list-recordings: a script that lists the day's .wav keys with a boto3 paginator (a listing),
  drops recordings whose consent was revoked (a CSV read through s3fs without a scheme) and
  writes the keys as an output parameter (valueFrom path).
- diarize: withParam over that output parameter; `--audio` built from a workflow parameter and
  the item (runtime-only), `--segmentation` / `--embedding-model` model locations,
  `--output-rttm` per item; activeDeadlineSeconds, podSpecPatch for a GPU toleration, retry.
- cluster-speakers: a script that globs the day's RTTMs through s3fs without a scheme and
  writes speaker tables with pyarrow to a scheme-less path through the same filesystem.
- score-der: an S3 input artifact (reference annotations folder), `--hyp` on the run's RTTMs,
  `when` on a workflow parameter.
- onExit: notify.

Generate: /tmp/hera/bin/python argo_r4_diarization.py -> argo_r4_diarization.yaml
"""
import os

from hera.workflows import DAG, Container, Parameter, S3Artifact, Script, Workflow
from hera.workflows import models as m

IMAGE = 'ghcr.io/acme-speech/diarize:3.1.2'

LIST = '''
import json

import boto3
import pandas as pd
import s3fs

bucket = "{{workflow.parameters.raw-bucket}}"
day = "{{workflow.parameters.day}}"
fs = s3fs.S3FileSystem()
with fs.open(f"{bucket}/meta/consent-revoked.csv") as f:
    revoked = set(pd.read_csv(f)["recording_id"])
pages = boto3.client("s3").get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"raw/{day}/")
keys = [o["Key"] for p in pages for o in p.get("Contents", [])
        if o["Key"].endswith(".wav") and o["Key"].rsplit("/", 1)[-1][:-4] not in revoked]
with open("/tmp/recordings.json", "w") as out:
    json.dump(keys, out)
'''

CLUSTER = '''
import pyarrow as pa
import pyarrow.parquet as pq
import s3fs
from diarize.clustering import global_speaker_table  # shared helper in the image

day = "{{workflow.parameters.day}}"
fs = s3fs.S3FileSystem()
rttms = {}
for path in fs.glob(f"acme-meetings-derived/rttm/{day}/**/*.rttm"):
    with fs.open(path, "r") as f:
        rttms[path] = f.read()
table = global_speaker_table(rttms, threshold=0.72)
pq.write_table(pa.Table.from_pandas(table), f"acme-meetings-derived/speakers/{day}.parquet", filesystem=fs)
'''

with Workflow(
    generate_name='meeting-diarization-',
    entrypoint='main',
    on_exit='notify',
    arguments=[
        Parameter(name='day', value='2024-11-18'),
        Parameter(name='raw-bucket', value='acme-meetings'),
        Parameter(name='model-release', value='pyannote-3.1-ft2'),
        Parameter(name='score', value='true'),
    ],
) as w:
    list_recordings = Script(
        name='list-recordings', image='ghcr.io/acme-speech/pyaws:3.11', command=['python'], source=LIST,
        outputs=[Parameter(name='recordings', value_from=m.ValueFrom(path='/tmp/recordings.json'))],
    )
    diarize = Container(
        name='diarize', image=IMAGE,
        command=['python', '-m', 'diarize.run'],
        inputs=[Parameter(name='key')],
        args=['--audio', 's3://{{workflow.parameters.raw-bucket}}/{{inputs.parameters.key}}',
              '--segmentation', 's3://acme-speech-models/{{workflow.parameters.model-release}}/segmentation/pytorch_model.bin',
              '--embedding-model', 's3://acme-speech-models/wespeaker/resnet34-lm/',
              '--min-speakers', '2', '--max-speakers', '12',
              '--output-rttm', 's3://acme-meetings-derived/rttm/{{workflow.parameters.day}}/{{inputs.parameters.key}}.rttm'],
        active_deadline_seconds=1800,
        pod_spec_patch='{"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}',
        retry_strategy=m.RetryStrategy(limit='2', retry_policy='OnError'),
        resources=m.ResourceRequirements(limits={'nvidia.com/gpu': m.Quantity('1')}),
    )
    cluster = Script(
        name='cluster-speakers', image=IMAGE, command=['python'], source=CLUSTER,
    )
    score = Container(
        name='score-der', image=IMAGE,
        command=['python', '-m', 'diarize.der'],
        inputs=[S3Artifact(name='reference', path='/ref', bucket='acme-meetings',
                           key='annotations/{{workflow.parameters.day}}/')],
        args=['--hyp', 's3://acme-meetings-derived/rttm/{{workflow.parameters.day}}/', '--ref', '/ref',
              '--collar', '0.25'],
    )
    notify = Container(
        name='notify', image='curlimages/curl:8.10.1', command=['sh', '-c'],
        args=['curl -fsS -X POST https://hooks.acme.example/speech -d "diarization {{workflow.name}} {{workflow.status}}"'],
    )
    with DAG(name='main'):
        lr = list_recordings(name='list-recordings')
        d = diarize(name='diarize', with_param='{{tasks.list-recordings.outputs.parameters.recordings}}',
                    arguments={'key': '{{item}}'})
        c = cluster(name='cluster-speakers')
        s = score(name='score-der', when='{{workflow.parameters.score}} == true')
        lr >> d >> [c, s]

if __name__ == '__main__':
    with open(os.path.splitext(__file__)[0] + '.yaml', 'w') as f:
        f.write(w.to_yaml())
