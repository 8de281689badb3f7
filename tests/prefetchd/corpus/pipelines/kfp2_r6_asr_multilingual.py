# ruff: noqa
"""Multilingual Whisper fine-tune: stage Common Voice per language with aws s3 sync
onto a shared claim, fine-tune per language (static loop over dicts), evaluate with
Collected fan-in, register the best model."""
import os
from typing import List

from kfp import compiler, dsl, kubernetes

IMG = 'ghcr.io/acme-speech/whisper-ft:0.9.1-cu121'
LANGS = [
    {'code': 'sw', 'cv': 's3://acme-speech/common-voice/17.0/sw'},
    {'code': 'yo', 'cv': 's3://acme-speech/common-voice/17.0/yo'},
    {'code': 'ta', 'cv': 's3://acme-speech/common-voice/17.0/ta'},
]


@dsl.container_component
def stage_corpus(cv_prefix: str, lang: str):
    return dsl.ContainerSpec(
        image='amazon/aws-cli:2.17.0',
        command=['sh', '-c'],
        args=['set -eu\n'
              'mkdir -p /corpora/$1\n'
              'aws s3 sync "$0/clips/" /corpora/$1/clips/ --only-show-errors\n'
              'aws s3 cp "$0/validated.tsv" /corpora/$1/validated.tsv\n',
              cv_prefix, lang])


@dsl.component(base_image=IMG, packages_to_install=['s3fs==2024.6.1'])
def finetune(lang: str, base_model: str, noise_bank: str, out_root: str, epochs: int = 3) -> str:
    import subprocess
    import s3fs
    fs = s3fs.S3FileSystem()
    fs.get(noise_bank.replace('s3://', ''), '/tmp/noise', recursive=True)
    out = f"{out_root}/{lang}"
    subprocess.check_call([
        'python', '-m', 'asr.train',
        '--model_name_or_path', base_model,
        '--train-tsv', f'/corpora/{lang}/validated.tsv',
        '--noise-dir', '/tmp/noise',
        '--epochs', str(epochs),
        '--output_dir', '/tmp/ckpt'])
    fs.put('/tmp/ckpt', out.replace('s3://', ''), recursive=True)
    return out


@dsl.component(base_image=IMG, packages_to_install=['pandas', 's3fs', 'jiwer'])
def evaluate(models: List[str], fleurs_test: str) -> str:
    import json
    import pandas as pd
    df = pd.read_parquet(fleurs_test)
    scores = {m: float(len(df) % 7) for m in models}
    return max(scores, key=scores.get)


@dsl.component(base_image='python:3.11-slim', packages_to_install=['boto3'])
def register_model(best: str, registry_bucket: str):
    import boto3, json
    boto3.client('s3').put_object(Bucket=registry_bucket, Key='whisper-ml/latest.json',
                                  Body=json.dumps({'uri': best}).encode())


@dsl.pipeline(name='whisper-multilingual-ft')
def asr_pipeline(base_model: str = 'openai/whisper-small',
                 noise_bank: str = 's3://acme-speech/musan/noise',
                 out_root: str = 's3://acme-speech-models/whisper-small-ft',
                 fleurs_test: str = 's3://acme-speech/fleurs/test.parquet',
                 corpus_claim: str = 'asr-corpora'):
    with dsl.ParallelFor(items=LANGS, parallelism=2) as lang:
        st = stage_corpus(cv_prefix=lang.cv, lang=lang.code)
        kubernetes.mount_pvc(st, pvc_name=corpus_claim, mount_path='/corpora')
        ft = finetune(lang=lang.code, base_model=base_model, noise_bank=noise_bank, out_root=out_root)
        ft.after(st)
        ft.set_accelerator_type('nvidia.com/gpu').set_accelerator_limit(1)
        kubernetes.mount_pvc(ft, pvc_name=corpus_claim, mount_path='/corpora')
    ev = evaluate(models=dsl.Collected(ft.output), fleurs_test=fleurs_test)
    register_model(best=ev.output, registry_bucket='acme-speech-registry')


if __name__ == '__main__':
    compiler.Compiler().compile(asr_pipeline, os.path.splitext(__file__)[0] + '.yaml')
