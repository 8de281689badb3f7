# ruff: noqa
"""Keyword-spotting (DS-CNN) on Speech Commands v2 with a model-size sweep (KFP v1 SDK -> Argo).

The dataset and background-noise locations are pipeline parameters with
defaults; the room-impulse-response set is a constant passed as an
environment variable; features and checkpoints live on an
existing team PVC (sub-path kws) shared by the feature, training and
selection steps; the quantised model is published only when test accuracy
clears the gate; a notify step runs on exit.

Compile (kfp 1.8.x): python kfp1_b61_speech_kws.py  -> kfp1_b61_speech_kws.yaml
"""
import os

import kfp
from kfp import dsl
from kfp.components import InputPath, OutputPath, create_component_from_func
from kubernetes.client.models import V1EnvVar, V1PersistentVolumeClaimVolumeSource, V1Volume, V1VolumeMount

IMAGE = 'ghcr.io/acme/kws-train:0.9.3'
RIR_URI = 's3://acme-speech/rir/openslr-28/'
TEST_LIST_URI = 's3://acme-speech/speech-commands/v0.02/testing_list.txt'
KWS_PVC = 'speech-team-scratch'
MODEL_SIZES = ['ds-cnn-s', 'ds-cnn-m', 'ds-cnn-l']


def check_dataset(dataset_uri: str, keywords: str) -> int:
    import subprocess
    out = subprocess.run(['python', '-m', 'kws.check', '--data', dataset_uri, '--keywords', keywords],
                         check=True, capture_output=True, text=True)
    return int(out.stdout.strip())


def select_and_quantize(models_dir: str, best_model_path: OutputPath('TFLiteModel')):
    import subprocess
    subprocess.run(['python', '-m', 'kws.select', '--models', models_dir, '--metric', 'val_accuracy',
                    '--quantize', 'int8', '--out', best_model_path], check=True)


def evaluate(model_path: InputPath('TFLiteModel'), dataset_uri: str, test_list_uri: str) -> float:
    import subprocess
    out = subprocess.run(['python', '-m', 'kws.evaluate', '--model', model_path, '--data', dataset_uri,
                          '--test-list', test_list_uri], check=True, capture_output=True, text=True)
    return float(out.stdout.strip())


def notify(message: str):
    print(message)


select_op = create_component_from_func(select_and_quantize, base_image=IMAGE)
check_op = create_component_from_func(check_dataset, base_image=IMAGE)
evaluate_op = create_component_from_func(evaluate, base_image=IMAGE)
notify_op = create_component_from_func(notify, base_image='python:3.11-slim')


def scratch(op, read_only=False):
    op.add_volume(V1Volume(name='kws-scratch',
                           persistent_volume_claim=V1PersistentVolumeClaimVolumeSource(claim_name=KWS_PVC)))
    op.container.add_volume_mount(V1VolumeMount(name='kws-scratch', mount_path='/scratch', sub_path='kws',
                                                read_only=read_only))
    return op


@dsl.pipeline(name='kws-ds-cnn-speech-commands')
def kws_pipeline(dataset_uri: str = 's3://acme-speech/speech-commands/v0.02/',
                 noise_uri: str = 's3://acme-speech/speech-commands/v0.02/_background_noise_/',
                 keywords: str = 'yes,no,up,down,left,right,on,off,stop,go',
                 min_accuracy: float = 0.93):
    bye = notify_op(message='kws-ds-cnn-speech-commands finished')
    with dsl.ExitHandler(bye):
        chk = check_op(dataset_uri=dataset_uri, keywords=keywords)

        feats = dsl.ContainerOp(
            name='make-features', image=IMAGE, command=['python', '-m', 'kws.features'],
            arguments=['--data', dataset_uri, '--noise', noise_uri, '--keywords', keywords,
                       '--mfcc', '40', '--out', '/scratch/features'])
        feats.container.add_env_variable(V1EnvVar(name='RIR_URI', value=RIR_URI))
        scratch(feats).after(chk)

        with dsl.ParallelFor(MODEL_SIZES) as size:
            tr = dsl.ContainerOp(
                name='train', image=IMAGE, command=['python', '-m', 'kws.train'],
                arguments=['--features', '/scratch/features', '--model', size, '--epochs', '60',
                           '--out', '/scratch/models'])
            tr.set_gpu_limit(1)
            scratch(tr).after(feats)

        sel = select_op(models_dir='/scratch/models')
        scratch(sel, read_only=True).after(tr)

        ev = evaluate_op(model=sel.outputs['best_model'], dataset_uri=dataset_uri, test_list_uri=TEST_LIST_URI)

        with dsl.Condition(ev.output >= min_accuracy):
            dsl.ContainerOp(
                name='publish', image='amazon/aws-cli:2.15.30', command=['aws', 's3', 'cp'],
                arguments=[dsl.InputArgumentPath(sel.outputs['best_model'], path='/in/model.tflite'),
                           's3://acme-models/kws/ds-cnn/model.tflite'])


if __name__ == '__main__':
    kfp.compiler.Compiler().compile(kws_pipeline, os.path.splitext(__file__)[0] + '.yaml')
