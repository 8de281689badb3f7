# ruff: noqa
# ruff: noqa
"""StarCoder2-7B SFT on the latest deduplicated Stack v2 snapshot (KFP v1 SDK -> Argo).

resolve-corpus reads the snapshot pointer for the language and writes the
snapshot's S3 prefix to a small file (file_outputs -> output parameter); the
tokenizer pulls that prefix onto a per-run RWX scratch volume, SFT trains from
the shards, MultiPL-E is evaluated per language, and the model is pushed when
the aggregate clears the bar. The scratch volume is deleted afterwards; a
notifier runs on exit.

Compile (kfp 1.8.x): python kfp1_b41_starcoder2_sft.py  -> kfp1_b41_starcoder2_sft.yaml
"""
import os

import kfp
from kfp import dsl
from kfp.components import create_component_from_func
from kubernetes.client.models import V1EnvVar

DATA_IMAGE = 'ghcr.io/acme-code/datatools:1.9.0'
TRAIN_IMAGE = 'ghcr.io/acme-code/trainer:2.3.1-cu121'


def aggregate_scores(results_dir: str, min_pass1: float) -> str:
    import glob, json
    scores = [json.load(open(p))['pass@1'] for p in glob.glob(f'{results_dir}/*.json')]
    return 'pass' if scores and sum(scores) / len(scores) >= min_pass1 else 'fail'


def notify(webhook: str, run_name: str):
    import json, urllib.request
    urllib.request.urlopen(urllib.request.Request(webhook, data=json.dumps({'text': f'{run_name} finished'}).encode(),
                                                  method='POST'))


aggregate_op = create_component_from_func(aggregate_scores, base_image='python:3.11-slim')
notify_op = create_component_from_func(notify, base_image='python:3.11-slim')


@dsl.pipeline(name='starcoder2-7b-sft-stack-v2')
def starcoder_sft(language: str = 'python',
                  base_model_uri: str = 's3://llm-models/bigcode/starcoder2-7b/',
                  eval_langs: list = ['js', 'java', 'rs'],
                  min_pass1: float = 0.35,
                  registry_uri: str = 's3://llm-registry/starcoder2-7b-sft/'):
    bye = notify_op(webhook='http://slack-relay.infra/hook/llm-training', run_name='{{workflow.name}}')
    with dsl.ExitHandler(bye):
        scratch = dsl.VolumeOp(name='create-scratch', resource_name='sft-scratch', size='400Gi',
                               modes=dsl.VOLUME_MODE_RWM, storage_class='fsx-lustre')

        resolve = dsl.ContainerOp(
            name='resolve-corpus',
            image='amazon/aws-cli:2.15.30',
            command=['sh', '-c'],
            arguments=['mkdir -p /tmp/outputs && '
                       'aws s3 cp "s3://code-data-registry/the-stack-v2-dedup/$0/LATEST" - | tr -d "\\n" '
                       '> /tmp/outputs/corpus_uri', language],
            file_outputs={'corpus_uri': '/tmp/outputs/corpus_uri'})

        tokenize = dsl.ContainerOp(
            name='dedup-tokenize',
            image=DATA_IMAGE,
            command=['python', '-m', 'acme_code.tokenize'],
            arguments=['--corpus', resolve.outputs['corpus_uri'],
                       '--near-dedup', 'minhash', '--num-shards', 128,
                       '--out', '/scratch/shards'],
            pvolumes={'/scratch': scratch.volume})
        tokenize.container.add_env_variable(
            V1EnvVar(name='TOKENIZER_URI', value='s3://llm-models/bigcode/starcoder2-7b/tokenizer.json'))
        tokenize.set_cpu_limit('32').set_memory_limit('128G')

        train = dsl.ContainerOp(
            name='sft-train',
            image=TRAIN_IMAGE,
            command=['torchrun', '--nproc_per_node', '8', '-m', 'acme_code.sft'],
            arguments=['--model_name_or_path', base_model_uri,
                       '--train_shards', '/scratch/shards',
                       '--output_dir', '/scratch/ckpt',
                       '--fim_rate', '0.5'],
            pvolumes={'/scratch': tokenize.pvolume})
        train.set_gpu_limit(8)
        train.set_retry(2)
        train.container.add_env_variable(V1EnvVar(name='WANDB_PROJECT', value='starcoder2-sft'))

        with dsl.ParallelFor(eval_langs) as lang:
            ev = dsl.ContainerOp(
                name='eval-multipl-e',
                image='ghcr.io/acme-code/code-eval:1.3.0',
                command=['bigcode-eval'],
                arguments=['--task', f'multiple-{lang}',
                           '--dataset_uri', f's3://llm-hf-mirror/datasets/nuprl/MultiPL-E/d23b094/humaneval-{lang}/',
                           '--model', '/scratch/ckpt',
                           '--metric_output_path', f'/scratch/eval/{lang}.json'],
                pvolumes={'/scratch': train.pvolume})
            ev.set_gpu_limit(1)

        agg = aggregate_op(results_dir='/scratch/eval', min_pass1=min_pass1).after(ev)
        agg.add_pvolumes({'/scratch': train.pvolume})

        with dsl.Condition(agg.output == 'pass'):
            push = dsl.ContainerOp(
                name='push-model',
                image='amazon/aws-cli:2.15.30',
                command=['aws', 's3', 'sync', '/scratch/ckpt/'],
                arguments=[registry_uri],
                pvolumes={'/scratch': train.pvolume})

        scratch.delete().after(push)


if __name__ == '__main__':
    kfp.compiler.Compiler().compile(starcoder_sft, os.path.splitext(__file__)[0] + '.yaml')
