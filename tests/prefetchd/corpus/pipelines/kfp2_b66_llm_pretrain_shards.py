# ruff: noqa
"""Decoder-only LLM pretraining on WebDataset token shards (KFP v2 + kfp-kubernetes).

A boto3 paginator counts the train shards under bucket + prefix (two pipeline
parameters); a tokenizer file is checked with smart_open; training streams
WebDataset shards through `pipe:aws s3 cp ... -` with brace ranges (the train
pattern is an f-string over the two parameters, the validation pattern a
constant); checkpoints go to a per-run PVC; a ParallelFor over a list parameter
runs zero-shot evals that read zstd JSONL through fsspec (URL built inside the
component from the loop item) plus a `filecache::` chained prompt file; the
checkpoint is uploaded only if the tokenizer check passed.

Compile: python kfp2_b66_llm_pretrain_shards.py  -> kfp2_b66_llm_pretrain_shards.yaml
"""
import os

from kfp import compiler, dsl, kubernetes
from kfp.dsl import Metrics, Output

TRAIN_IMAGE = 'ghcr.io/example/llm-pretrain:2.4.0'


@dsl.component(base_image='python:3.11-slim', packages_to_install=['boto3==1.34.113'])
def count_shards(bucket: str, prefix: str) -> int:
    import boto3
    s3 = boto3.client('s3')
    n = 0
    for page in s3.get_paginator('list_objects_v2').paginate(Bucket=bucket, Prefix=prefix):
        n += sum(1 for o in page.get('Contents', []) if o['Key'].endswith('.tar'))
    print(f'{n} shards under s3://{bucket}/{prefix}; layout: https://docs.example.com/llm/shard-layout')
    return n


@dsl.component(base_image='python:3.11-slim', packages_to_install=['smart_open[s3]==7.0.4', 'transformers==4.41.2'])
def check_tokenizer(tokenizer_uri: str, vocab_size: int) -> str:
    import json
    from smart_open import open as sopen
    from transformers import AutoTokenizer
    with sopen(tokenizer_uri, 'r') as f:
        tok = json.load(f)
    n = len(tok['model']['vocab'])
    # the hub tokenizer is only a reference for the special tokens; it is not our data
    ref = AutoTokenizer.from_pretrained('EleutherAI/gpt-neox-20b')
    missing = [t for t in ref.all_special_tokens if t not in tok['model']['vocab']]
    return 'ok' if n == vocab_size and not missing else 'mismatch'


@dsl.container_component
def pretrain(train_shards: str, val_shards: str, num_shards: int, ckpt_dir: str):
    return dsl.ContainerSpec(
        image=TRAIN_IMAGE,
        command=['torchrun', '--nproc_per_node=8', '-m', 'llm.pretrain'],
        args=['--train-shards', train_shards, '--val-shards', val_shards, '--num-shards', num_shards,
              '--ckpt-dir', ckpt_dir, '--config', '/etc/llm/1b.yaml'])


@dsl.component(base_image=TRAIN_IMAGE)
def eval_task(task_name: str, ckpt_dir: str, metrics: Output[Metrics]):
    import json
    import fsspec
    from llm.eval import score_multiple_choice
    url = f's3://example-llm-evals/{task_name}/test.jsonl.zst'
    with fsspec.open(url, 'rt', compression='zstd') as f:
        rows = [json.loads(line) for line in f]
    with fsspec.open('filecache::s3://example-llm-evals/prompts/fewshot-v3.json', 'rt',
                     filecache={'cache_storage': '/tmp/fsspec-cache'}) as f:
        fewshot = json.load(f)
    acc = score_multiple_choice(ckpt_dir, rows, fewshot.get(task_name, []))
    metrics.log_metric(f'{task_name}_acc', acc)


@dsl.container_component
def upload_checkpoint(local_dir: str, dest: str):
    return dsl.ContainerSpec(image='amazon/aws-cli:2.15.30', command=['aws', 's3', 'sync', '--only-show-errors'],
                             args=[local_dir, dest])


@dsl.pipeline(name='llm-1b-pretrain-wds')
def llm_pretrain(corpus_bucket: str = 'example-llm-corpus',
                 corpus_prefix: str = 'pile-dedup/v2/tokenized/',
                 run_name: str = 'pile-1b-r3',
                 eval_tasks: list = ['hellaswag', 'arc_easy', 'piqa']):
    pvc = kubernetes.CreatePVC(pvc_name_suffix='-llm-ckpt', access_modes=['ReadWriteOnce'], size='500Gi',
                               storage_class_name='fast-ssd')
    cnt = count_shards(bucket=corpus_bucket, prefix=corpus_prefix)
    tok = check_tokenizer(tokenizer_uri='s3://example-llm-models/tokenizers/neox-50k/tokenizer.json',
                          vocab_size=50304)
    with dsl.If(tok.output == 'ok'):
        pt = pretrain(
            train_shards=f'pipe:aws s3 cp s3://{corpus_bucket}/{corpus_prefix}train-{{000000..000127}}.tar -',
            val_shards='pipe:aws s3 cp s3://example-llm-corpus/pile-dedup/v2/tokenized/val-{000000..000003}.tar -',
            num_shards=cnt.output,
            ckpt_dir='/ckpt/run')
        pt.set_accelerator_type('nvidia.com/gpu').set_accelerator_limit(8)
        kubernetes.mount_pvc(pt, pvc_name=pvc.outputs['name'], mount_path='/ckpt')

        up = upload_checkpoint(local_dir='/ckpt/run', dest=f's3://example-llm-models/runs/{run_name}/').after(pt)
        kubernetes.mount_pvc(up, pvc_name=pvc.outputs['name'], mount_path='/ckpt')

        with dsl.ParallelFor(eval_tasks, parallelism=2) as task_name:
            ev = eval_task(task_name=task_name, ckpt_dir='/ckpt/run').after(pt)
            kubernetes.mount_pvc(ev, pvc_name=pvc.outputs['name'], mount_path='/ckpt')


if __name__ == '__main__':
    compiler.Compiler().compile(llm_pretrain, os.path.splitext(__file__)[0] + '.yaml')
