# ruff: noqa
"""Conformer ASR training on LibriSpeech with a small learning-rate sweep (KFP v2 + kfp-kubernetes).

validate manifest -> download audio to a per-run PVC -> extract fbank features
(with MUSAN noise augmentation) -> ParallelFor sweep over learning rates ->
pick the best checkpoint -> evaluate WER on test-clean -> publish if WER is
below the gate. The PVC is deleted after the best model is picked; a notify
task runs as the exit handler.

Compile: python kfp2_b61_asr_conformer.py  -> kfp2_b61_asr_conformer.yaml
"""
import os
from typing import List

from kfp import compiler, dsl, kubernetes
from kfp.dsl import Input, Model, Output

IMAGE = 'ghcr.io/acme/asr-train:2.4.1'
NOISE_URI = 's3://acme-speech/noise/musan/'
TOKENIZER_URI = 's3://acme-speech/tokenizers/sp-unigram-1024/'
LEARNING_RATES = [0.0005, 0.001, 0.002]


@dsl.component(base_image=IMAGE)
def validate_manifest(manifest_uri: str) -> int:
    import json
    import boto3
    bucket, key = manifest_uri[len('s3://'):].split('/', 1)
    body = boto3.client('s3').get_object(Bucket=bucket, Key=key)['Body'].read().decode()
    rows = [json.loads(line) for line in body.splitlines() if line.strip()]
    bad = [r for r in rows if not r.get('audio_filepath') or r.get('duration', 0) <= 0]
    if bad:
        raise ValueError(f'{len(bad)} bad manifest rows')
    return len(rows)


@dsl.container_component
def download_audio(src: str, dst: str):
    return dsl.ContainerSpec(image='amazon/aws-cli:2.15.30', command=['aws', 's3', 'sync', '--only-show-errors'],
                             args=[src, dst])


@dsl.component(base_image=IMAGE)
def extract_features(audio_dir: str, noise_uri: str, out_dir: str):
    import subprocess
    subprocess.run(['python', '-m', 'asr.features', '--audio', audio_dir, '--noise', noise_uri,
                    '--n-mels', '80', '--out', out_dir], check=True)


@dsl.component(base_image=IMAGE)
def train_conformer(features_dir: str, tokenizer_uri: str, learning_rate: float, model: Output[Model]):
    import subprocess
    subprocess.run(['python', '-m', 'asr.train', '--features', features_dir, '--tokenizer', tokenizer_uri,
                    '--arch', 'conformer-s', '--lr', str(learning_rate), '--epochs', '40',
                    '--out', model.path], check=True)


@dsl.component(base_image=IMAGE)
def pick_best(models: Input[List[Model]], best: Output[Model]):
    import json
    import os
    import shutil
    scores = []
    for m in models:
        with open(os.path.join(m.path, 'valid_wer.json')) as f:
            scores.append((json.load(f)['wer'], m.path))
    shutil.copytree(min(scores)[1], best.path)


@dsl.component(base_image=IMAGE)
def evaluate_wer(model: Input[Model], test_uri: str) -> float:
    import subprocess
    out = subprocess.run(['python', '-m', 'asr.eval', '--model', model.path, '--test', test_uri],
                         check=True, capture_output=True, text=True)
    return float(out.stdout.strip().splitlines()[-1])


@dsl.container_component
def publish_model(model: Input[Model], dest: str):
    return dsl.ContainerSpec(image='amazon/aws-cli:2.15.30', command=['aws', 's3', 'cp', '--recursive'],
                             args=[model.path, dest])


@dsl.component(base_image='python:3.11-slim')
def notify(channel: str):
    print(f'asr-conformer pipeline finished; notifying {channel}')


@dsl.pipeline(name='asr-conformer-librispeech')
def asr_pipeline(audio_uri: str = 's3://acme-speech/librispeech/train-clean-100/',
                 test_uri: str = 's3://acme-speech/librispeech/test-clean/',
                 registry_uri: str = 's3://acme-models/asr/conformer-s/',
                 wer_threshold: float = 0.12):
    done = notify(channel='#asr-training')
    with dsl.ExitHandler(done):
        check = validate_manifest(manifest_uri=f'{audio_uri}manifest.jsonl')

        pvc = kubernetes.CreatePVC(pvc_name_suffix='-asr-work', access_modes=['ReadWriteMany'],
                                   size='200Gi', storage_class_name='efs-sc')

        dl = download_audio(src=audio_uri, dst='/work/audio').after(check)
        kubernetes.mount_pvc(dl, pvc_name=pvc.outputs['name'], mount_path='/work')

        feats = extract_features(audio_dir='/work/audio', noise_uri=NOISE_URI, out_dir='/work/fbank').after(dl)
        feats.set_cpu_limit('16')
        kubernetes.mount_pvc(feats, pvc_name=pvc.outputs['name'], mount_path='/work')

        with dsl.ParallelFor(LEARNING_RATES, parallelism=2) as lr:
            tr = train_conformer(features_dir='/work/fbank', tokenizer_uri=TOKENIZER_URI,
                                 learning_rate=lr).after(feats)
            tr.set_accelerator_type('nvidia.com/gpu').set_accelerator_limit(1)
            kubernetes.mount_pvc(tr, pvc_name=pvc.outputs['name'], mount_path='/work')

        best = pick_best(models=dsl.Collected(tr.outputs['model']))
        kubernetes.DeletePVC(pvc_name=pvc.outputs['name']).after(best)

        ev = evaluate_wer(model=best.outputs['best'], test_uri=test_uri)
        with dsl.If(ev.output < wer_threshold):
            publish_model(model=best.outputs['best'], dest=registry_uri)


if __name__ == '__main__':
    compiler.Compiler().compile(asr_pipeline, os.path.splitext(__file__)[0] + '.yaml')
