# ruff: noqa
"""Multilingual ASR fine-tuning built from nested pipelines (KFP v2).

- `prepare_language` is a pipeline used as a component: fetch-manifest (aws
  CLI container component) then segment-audio (s3fs); its output is the
  segments Dataset.
- The root runs prepare_language inside a ParallelFor over the list
  parameter `languages` (dicts with lang + manifest URI); dsl.Collected of
  the sub-pipeline output feeds train-asr.
- train-asr gets its base checkpoint URI from a ConfigMap
  (use_config_map_as_env, ConfigMap not shipped), an HF token from a Secret,
  the pod name from the downward API, an image pull secret and a node
  selector.
- `evaluate_split` is a second nested pipeline, called twice (dev, test), so
  its inner tasks share keys and are named by their path; inside it an
  ExitHandler wraps score-split and report-wer, and the exit task
  cleanup-scratch deletes the split's scratch prefix.

Compile: python kfp2_b72_asr_nested.py -> kfp2_b72_asr_nested.yaml
"""
import os
from typing import List

from kfp import compiler, dsl, kubernetes
from kfp.dsl import Dataset, Input, Metrics, Model, Output

IMG = 'ghcr.io/voicelab/asr-train:3.4.0'


@dsl.container_component
def fetch_manifest(manifest_uri: str, manifest: Output[Dataset]):
    return dsl.ContainerSpec(image='amazon/aws-cli:2.17.20',
                             command=['aws', 's3', 'cp', '--only-show-errors'],
                             args=[manifest_uri, manifest.path])


@dsl.component(base_image=IMG)
def segment_audio(manifest: Input[Dataset], audio_root: str, lang: str, max_seconds: float,
                  segments: Output[Dataset]):
    import json
    import s3fs
    fs = s3fs.S3FileSystem()
    clips_prefix = f"{audio_root.rstrip('/')}/{lang}/clips/"
    fs.get(clips_prefix, '/tmp/clips/', recursive=True)
    rows = [json.loads(l) for l in open(manifest.path)]
    keep = [r for r in rows if r['duration'] <= max_seconds]
    with open(segments.path, 'w') as f:
        for r in keep:
            f.write(json.dumps(r) + '\n')


@dsl.container_component
def cleanup_scratch(split: str):
    return dsl.ContainerSpec(image='amazon/aws-cli:2.17.20', command=['sh', '-c'],
                             args=['aws s3 rm --recursive --only-show-errors "s3://voicelab-scratch/eval/$0/"', split])


@dsl.pipeline(name='prepare-language')
def prepare_language(lang: str, manifest_uri: str,
                     audio_root: str = 's3://voicelab-corpora/common-voice-17',
                     max_seconds: float = 20.0) -> Dataset:
    fm = fetch_manifest(manifest_uri=manifest_uri)
    seg = segment_audio(manifest=fm.outputs['manifest'], audio_root=audio_root, lang=lang,
                        max_seconds=max_seconds)
    return seg.outputs['segments']


@dsl.component(base_image=IMG)
def train_asr(segments: Input[List[Dataset]], epochs: int, model: Output[Model]):
    import os
    import subprocess
    base = os.environ['BASE_CKPT_URI']
    subprocess.run(['aws', 's3', 'sync', '--only-show-errors', base, '/tmp/base'], check=True)
    subprocess.run(['python', '-m', 'asr.finetune', '--init', '/tmp/base', '--epochs', str(epochs),
                    '--manifests', ','.join(s.path for s in segments), '--save', model.path], check=True)


@dsl.component(base_image=IMG)
def score_split(model: Input[Model], split_uri: str, split: str, wer: Output[Metrics]):
    import pandas as pd
    df = pd.read_parquet(split_uri)
    print('scoring', split, len(df))
    wer.log_metric(f'wer_{split}', 0.12)


@dsl.component(base_image='python:3.11-slim')
def report_wer(wer: Input[Metrics], split: str, report_uri: str):
    import boto3
    bucket, key = report_uri[len('s3://'):].split('/', 1)
    boto3.client('s3').put_object(Bucket=bucket, Key=key, Body=str(wer.metadata).encode())


@dsl.pipeline(name='evaluate-split')
def evaluate_split(model: Input[Model], split: str, split_uri: str, report_uri: str):
    cleanup = cleanup_scratch(split=split)
    with dsl.ExitHandler(cleanup):
        sc = score_split(model=model, split_uri=split_uri, split=split)
        report_wer(wer=sc.outputs['wer'], split=split, report_uri=report_uri)


@dsl.pipeline(name='asr-multilingual-finetune')
def asr_multilingual(
        languages: list = [
            {'lang': 'de', 'manifest': 's3://voicelab-corpora/manifests/cv17/de/train.jsonl'},
            {'lang': 'nl', 'manifest': 's3://voicelab-corpora/manifests/cv17/nl/train.jsonl'},
            {'lang': 'pl', 'manifest': 's3://voicelab-corpora/manifests/cv17/pl/train.jsonl'},
        ],
        eval_root: str = 's3://voicelab-eval/fleurs-v2',
        reports_root: str = 's3://voicelab-reports/asr',
        epochs: int = 8):
    with dsl.ParallelFor(languages, parallelism=2) as item:
        prep = prepare_language(lang=item.lang, manifest_uri=item.manifest)
    train = train_asr(segments=dsl.Collected(prep.output), epochs=epochs)
    kubernetes.use_config_map_as_env(train, config_map_name='asr-base-models',
                                     config_map_key_to_env={'wav2vec2_xlsr_uri': 'BASE_CKPT_URI'})
    kubernetes.use_secret_as_env(train, secret_name='hf-token', secret_key_to_env={'token': 'HF_TOKEN'})
    kubernetes.use_field_path_as_env(train, env_name='POD_NAME', field_path='metadata.name')
    kubernetes.set_image_pull_secrets(train, ['voicelab-ghcr'])
    kubernetes.add_node_selector(train, label_key='nvidia.com/gpu.product', label_value='NVIDIA-A100-SXM4-80GB')
    evaluate_split(model=train.outputs['model'], split='dev',
                   split_uri=f'{eval_root}/dev.parquet', report_uri=f'{reports_root}/dev_wer.json')
    evaluate_split(model=train.outputs['model'], split='test',
                   split_uri=f'{eval_root}/test.parquet', report_uri=f'{reports_root}/test_wer.json')


if __name__ == '__main__':
    compiler.Compiler().compile(asr_multilingual, os.path.splitext(__file__)[0] + '.yaml')
