# ruff: noqa  (pipeline source in the SDK's own idiom: mutable defaults, typing.List)
"""KFP v2 with kfp-kubernetes: an existing PVC staged by `aws s3 sync`, read by a trainer,
results pushed with `gsutil cp` and `gcloud storage rsync`; an importer of a tokenizer;
the trainer asks for a GPU.

Compile (kfp 2.x + kfp-kubernetes): python kfp2_copy_pvc.py  -> kfp2_copy_pvc.yaml
"""
import os

from kfp import compiler, dsl, kubernetes

IMAGE = 'ghcr.io/example/asr-train:1.0.0'


@dsl.container_component
def stage(src: str):
    return dsl.ContainerSpec(image='amazon/aws-cli:2.15.30', command=['aws', 's3', 'sync'],
                             args=[src, '/mnt/data/commonvoice', '--no-progress'])


@dsl.container_component
def train(tokenizer: dsl.Input[dsl.Artifact]):
    return dsl.ContainerSpec(image=IMAGE, command=['python', '-m', 'asr.train'],
                             args=['--data', '/mnt/data/commonvoice', '--tokenizer', tokenizer.uri,
                                   '--ckpt', '/mnt/data/ckpt'])


@dsl.container_component
def push_gs():
    return dsl.ContainerSpec(image='google/cloud-sdk:475.0.0', command=['sh', '-c'],
                             args=['gsutil -m cp -r /mnt/data/ckpt gs://example-asr-models/cv/ && '
                                   'gcloud storage rsync -r gs://example-asr-models/cv/ gs://example-asr-models-dr/cv/'])


@dsl.pipeline(name='asr-commonvoice')
def asr(src: str = 's3://example-audio/commonvoice/en/v16/'):
    tok = dsl.importer(artifact_uri='s3://example-audio/tokenizers/sp-5k/', artifact_class=dsl.Artifact)
    s = stage(src=src)
    kubernetes.mount_pvc(s, pvc_name='asr-data', mount_path='/mnt/data')
    t = train(tokenizer=tok.output).after(s)
    t.set_accelerator_type('nvidia.com/gpu').set_accelerator_limit(1)
    kubernetes.mount_pvc(t, pvc_name='asr-data', mount_path='/mnt/data')
    p = push_gs().after(t)
    kubernetes.mount_pvc(p, pvc_name='asr-data', mount_path='/mnt/data')


if __name__ == '__main__':
    compiler.Compiler().compile(asr, os.path.splitext(__file__)[0] + '.yaml')
