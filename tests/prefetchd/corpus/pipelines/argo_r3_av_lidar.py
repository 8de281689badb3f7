# ruff: noqa
"""Argo (Hera, blind test r3): autonomous-driving lidar auto-labelling and detector training.

Idioms: withParam over a workflow parameter holding a JSON list of dicts (vehicle, drive);
an MCAP log location built from a workflow parameter and two input parameters; S3 output
artifacts with explicit keys; retryStrategy with backoff; a semaphore from a ConfigMap; a
Python script listing a prefix with a boto3 paginator and downloading every key, with an
S3 input artifact keyed by a parameter; an output parameter read from a file; `when` on
that output; a workflow-level existing PVC mounted read-only; onExit.

Generate: /tmp/hera/bin/python argo_r3_av_lidar.py -> argo_r3_av_lidar.yaml
"""
import os

from hera.workflows import DAG, Container, Parameter, S3Artifact, Script, Workflow
from hera.workflows import models as m

AUTOLABEL_SRC = '''
import json
import os
import subprocess

import boto3

s3 = boto3.client("s3")
pages = s3.get_paginator("list_objects_v2").paginate(Bucket="acme-av-derived", Prefix="derived/lidar/")
os.makedirs("/data/points", exist_ok=True)
for page in pages:
    for obj in page.get("Contents", []):
        local = os.path.join("/data/points", obj["Key"].replace("/", "_"))
        s3.download_file("acme-av-derived", obj["Key"], local)
subprocess.run(["python", "-m", "autolabel.run", "--points", "/data/points",
                "--weights", "/models", "--out", "/data/labels"], check=True)
n = 0
for name in os.listdir("/data/labels"):
    s3.upload_file(os.path.join("/data/labels", name), "acme-av-derived", "labels/" + name)
    n += sum(1 for _ in open(os.path.join("/data/labels", name)))
open("/tmp/n_boxes", "w").write(str(n))
'''

with Workflow(
    generate_name='av-lidar-autolabel-',
    entrypoint='main',
    on_exit='report',
    service_account_name='av-pipelines',
    arguments=[
        Parameter(name='drives', value='[{"vehicle": "av-017", "drive": "2024-09-12T08-15-02"}, '
                                       '{"vehicle": "av-023", "drive": "2024-09-12T14-40-51"}]'),
        Parameter(name='log-bucket', value='acme-av-logs'),
        Parameter(name='detector', value='centerpoint-v5'),
    ],
    volumes=[m.Volume(name='hdmaps', persistent_volume_claim=m.PersistentVolumeClaimVolumeSource(
        claim_name='av-hdmaps', read_only=True))],
) as w:
    extract = Container(
        name='extract-lidar', image='ghcr.io/acme-av/mcap-tools:0.11.2',
        inputs=[Parameter(name='vehicle'), Parameter(name='drive')],
        command=['mcap-extract'],
        args=['--bag', 's3://{{workflow.parameters.log-bucket}}/raw/{{inputs.parameters.vehicle}}/'
                       '{{inputs.parameters.drive}}/sensors.mcap',
              '--topics', '/lidar/top,/lidar/front_left,/lidar/front_right', '--out', '/out/points'],
        outputs=[S3Artifact(name='points', path='/out/points', bucket='acme-av-derived',
                            key='derived/lidar/{{inputs.parameters.vehicle}}/{{inputs.parameters.drive}}/points.tgz')],
        retry_strategy=m.RetryStrategy(limit='3', retry_policy='OnError',
                                       backoff=m.Backoff(duration='30s', factor='2', max_duration='10m')),
        synchronization=m.Synchronization(semaphores=[m.SemaphoreRef(
            config_map_key_ref=m.ConfigMapKeySelector(name="av-limits", key="mcap-extract"))]),
    )
    autolabel = Script(
        name='auto-label', image='ghcr.io/acme-av/autolabel:3.4.0', command=['python'],
        source=AUTOLABEL_SRC,
        inputs=[Parameter(name='detector'),
                S3Artifact(name='weights', path='/models', bucket='acme-av-models',
                           key='detectors/{{inputs.parameters.detector}}/')],
        outputs=[Parameter(name='n-boxes', value_from=m.ValueFrom(path='/tmp/n_boxes'))],
        resources=m.ResourceRequirements(limits={'nvidia.com/gpu': m.Quantity('1')}),
    )
    train = Container(
        name='train-detector', image='ghcr.io/acme-av/det3d-train:2.1.0',
        command=['python', 'tools/train.py', 'configs/centerpoint_pillar_av.py'],
        args=['--labels', 's3://acme-av-derived/labels/',
              '--points', 's3://acme-av-derived/derived/lidar/',
              '--hd-maps', '/maps/us-west/v7',
              '--pretrained', 's3://acme-av-models/detectors/{{workflow.parameters.detector}}/',
              '--work-dir', 's3://acme-av-models/runs/{{workflow.name}}/'],
        volume_mounts=[m.VolumeMount(name='hdmaps', mount_path='/maps', read_only=True)],
        retry_strategy=m.RetryStrategy(limit='1', retry_policy='OnFailure'),
        resources=m.ResourceRequirements(limits={'nvidia.com/gpu': m.Quantity('8')}),
    )
    Container(name='report', image='curlimages/curl:8.8.0',
              command=['sh', '-c', 'curl -s -X POST -d "{{workflow.name}} {{workflow.status}}" https://chat.acme.example/av'])
    with DAG(name='main'):
        ex = extract(name='extract-lidar', with_param='{{workflow.parameters.drives}}',
                     arguments={'vehicle': '{{item.vehicle}}', 'drive': '{{item.drive}}'})
        al = autolabel(name='auto-label', arguments={'detector': '{{workflow.parameters.detector}}'})
        tr = train(name='train-detector', when='{{tasks.auto-label.outputs.parameters.n-boxes}} > 100000')
        ex >> al >> tr

if __name__ == '__main__':
    with open(os.path.splitext(__file__)[0] + '.yaml', 'w') as fh:
        fh.write(w.to_yaml())
