# ruff: noqa
"""Speaker diarization benchmark on the AMI meeting corpus (KFP v1 SDK -> Argo), speech team.

Audio is cached on the existing 'speech-cache' PVC (add_volume /
add_volume_mount with a sub_path); the pyannote model cache on a second
existing claim via add_pvolumes; the Hugging Face token and S3 credentials
come from Secrets through V1EnvVar(value_from=...); the reference RTTM
location is a literal env var; embedding extraction needs a GPU. Scoring
runs only when the DER is computed for the full set (dsl.Condition).

Compile (kfp 1.8.x): python kfp1_b38_speaker_diarization.py  -> kfp1_b38_speaker_diarization.yaml
"""
import os

import kfp
from kfp import dsl
from kubernetes import client as k8s

IMAGE = 'ghcr.io/example/diarize:0.6.3'


def secret_env(op, name, secret, key):
    op.container.add_env_variable(k8s.V1EnvVar(
        name=name, value_from=k8s.V1EnvVarSource(secret_key_ref=k8s.V1SecretKeySelector(name=secret, key=key))))
    return op


def cache(op, sub_path='ami/wav', read_only=False):
    op.add_volume(k8s.V1Volume(name='speech-cache', persistent_volume_claim=k8s.V1PersistentVolumeClaimVolumeSource(
        claim_name='speech-cache')))
    op.container.add_volume_mount(k8s.V1VolumeMount(name='speech-cache', mount_path='/audio',
                                                    sub_path=sub_path, read_only=read_only))
    return op


@dsl.pipeline(name='ami-speaker-diarization')
def diarization_pipeline(audio_uri: str = 's3://example-speech/ami/headset-mix/',
                         subset: str = 'test'):
    sync = cache(dsl.ContainerOp(
        name='sync-audio', image='amazon/aws-cli:2.15.30', command=['aws', 's3', 'sync'],
        arguments=[audio_uri, '/audio', '--exclude', '*', '--include', '*.Mix-Headset.wav']))
    secret_env(sync, 'AWS_ACCESS_KEY_ID', 'speech-s3-creds', 'access_key')
    secret_env(sync, 'AWS_SECRET_ACCESS_KEY', 'speech-s3-creds', 'secret_key')
    vad = cache(dsl.ContainerOp(
        name='voice-activity', image=IMAGE, command=['python', '-m', 'diarize.vad'],
        arguments=['--audio', '/audio', '--subset', subset, '--out', '/work/vad'],
        pvolumes={'/work': dsl.PipelineVolume(pvc='diarize-work')}), read_only=True)
    vad.after(sync)
    emb = cache(dsl.ContainerOp(
        name='speaker-embeddings', image=IMAGE, command=['python', '-m', 'diarize.embed'],
        arguments=['--audio', '/audio', '--vad', '/work/vad', '--out', '/work/emb'],
        pvolumes={'/work': vad.pvolume}), read_only=True)
    emb.set_gpu_limit(1)
    emb.add_pvolumes({'/models': dsl.PipelineVolume(pvc='hf-model-cache')})
    secret_env(emb, 'HF_TOKEN', 'hf-token', 'token')
    clus = dsl.ContainerOp(
        name='cluster-speakers', image=IMAGE, command=['python', '-m', 'diarize.cluster'],
        arguments=['--emb', '/work/emb', '--out', '/work/rttm'],
        pvolumes={'/work': emb.pvolumes['/work']},
        file_outputs={'files': '/tmp/n_files.txt'})
    with dsl.Condition(clus.outputs['files'] != '0'):
        score = dsl.ContainerOp(
            name='score-der', image=IMAGE, command=['sh', '-c'],
            arguments=['python -m diarize.score --hyp /work/rttm --ref "$REF_RTTM_URI" > /work/der.json'],
            pvolumes={'/work': clus.pvolume})
        score.container.add_env_variable(k8s.V1EnvVar(name='REF_RTTM_URI',
                                                      value='s3://example-speech/ami/rttm/only_words/test/'))
        score.container.add_env_variable(k8s.V1EnvVar(
            name='POD_IP', value_from=k8s.V1EnvVarSource(field_ref=k8s.V1ObjectFieldSelector(field_path='status.podIP'))))
        secret_env(score, 'AWS_ACCESS_KEY_ID', 'speech-s3-creds', 'access_key')
        secret_env(score, 'AWS_SECRET_ACCESS_KEY', 'speech-s3-creds', 'secret_key')
        upload = dsl.ContainerOp(
            name='upload-results', image='amazon/aws-cli:2.15.30', command=['aws', 's3', 'cp', '--recursive'],
            arguments=['/work/rttm', 's3://example-speech-results/diarization/ami-{}/'.format(subset)],
            pvolumes={'/work': score.pvolume})
        secret_env(upload, 'AWS_ACCESS_KEY_ID', 'speech-s3-creds', 'access_key')
        secret_env(upload, 'AWS_SECRET_ACCESS_KEY', 'speech-s3-creds', 'secret_key')


if __name__ == '__main__':
    kfp.compiler.Compiler().compile(diarization_pipeline, os.path.splitext(__file__)[0] + '.yaml')
