# ruff: noqa
# ruff: noqa
"""CodeLlama-7B DPO on reward-scored preference shards (KFP v2 + kfp-kubernetes).

The SFT checkpoint comes from the model registry through an importer. The
preference catalog lists the shard prefixes for this run; each shard is scored
by the code reward model (cached on a shared claim), the scored pairs are merged
onto a per-run scratch claim, DPO runs against a frozen reference model, and
the policy is evaluated on three mirrored code benchmarks before it is staged
and (if it clears the gate) registered.

Compile: python kfp2_b41_codellama_dpo.py  -> kfp2_b41_codellama_dpo.yaml
"""
import os
from typing import List

from kfp import compiler, dsl, kubernetes
from kfp.dsl import Dataset, Input, Model, Output

RLHF_IMAGE = 'ghcr.io/acme-llm/rlhf:0.9.1-cu121'

BENCHMARKS = [
    {'bench': 'humaneval', 'uri': 's3://llm-hf-mirror/datasets/openai/openai_humaneval/7dce6050/'},
    {'bench': 'mbpp', 'uri': 's3://llm-hf-mirror/datasets/google-research-datasets/mbpp/4bb6404f/'},
    {'bench': 'ds1000', 'uri': 's3://llm-hf-mirror/datasets/xlangai/DS-1000/0c9a42d5/'},
]


@dsl.component(base_image='ghcr.io/acme-llm/data-tools:0.14.2')
def plan_shards(catalog_uri: str, max_shards: int) -> List[str]:
    import json
    import s3fs
    fs = s3fs.S3FileSystem()
    with fs.open(catalog_uri, 'r') as f:
        catalog = json.load(f)
    return [s['uri'] for s in catalog['shards'] if s['status'] == 'ready'][:max_shards]


@dsl.component(base_image=RLHF_IMAGE)
def score_pairs(shard_uri: str, scored: Output[Dataset]):
    import subprocess
    subprocess.run(['python', '-m', 'acme_rlhf.score_pairs',
                    '--pairs', shard_uri,
                    '--reward_model', '/rm',
                    '--out', scored.path], check=True)


@dsl.component(base_image=RLHF_IMAGE)
def merge_pairs(scored: Input[List[Dataset]], min_margin: float) -> int:
    import json
    n = 0
    with open('/work/pairs/train.jsonl', 'w') as out:
        for part in scored:
            with open(part.path) as f:
                for line in f:
                    row = json.loads(line)
                    if row['chosen_score'] - row['rejected_score'] >= min_margin:
                        out.write(line)
                        n += 1
    return n


@dsl.container_component
def dpo_train(policy: Input[Model], beta: float):
    return dsl.ContainerSpec(
        image=RLHF_IMAGE,
        command=['sh', '-c',
                 'exec accelerate launch -m acme_rlhf.dpo --ref_model_name_or_path "$REF_MODEL_URI" "$@"',
                 'dpo'],
        args=['--model_name_or_path', policy.path,
              '--train_file', '/work/pairs/train.jsonl',
              '--beta', beta,
              '--output_dir', '/work/ckpt/dpo'])


@dsl.component(base_image='ghcr.io/acme-llm/code-eval:1.3.0')
def eval_code(bench: str, data_uri: str) -> float:
    import json
    import subprocess
    subprocess.run(['bigcode-eval', '--task', bench, '--dataset_uri', data_uri,
                    '--model', '/work/ckpt/dpo', '--n_samples', '20',
                    '--metric_output_path', f'/tmp/{bench}.json'], check=True)
    with open(f'/tmp/{bench}.json') as f:
        return float(json.load(f)[bench]['pass@1'])


@dsl.component(base_image='python:3.11-slim')
def gate(scores: List[float], min_pass1: float) -> str:
    return 'promote' if sum(scores) / len(scores) >= min_pass1 else 'hold'


@dsl.container_component
def push_checkpoint(dest: str):
    return dsl.ContainerSpec(image='amazon/aws-cli:2.15.30',
                             command=['aws', 's3', 'sync', '/work/ckpt/dpo/'], args=[dest])


@dsl.component(base_image='ghcr.io/acme-llm/data-tools:0.14.2')
def register_model(model_uri: str, registry_index: str):
    import json
    import boto3
    bucket, key = registry_index[len('s3://'):].split('/', 1)
    boto3.client('s3').put_object(Bucket=bucket, Key=key,
                                  Body=json.dumps({'latest': model_uri}).encode())


@dsl.pipeline(name='codellama-7b-dpo')
def dpo_pipeline(sft_ckpt_uri: str = 's3://llm-registry/codellama-7b-sft/v12/',
                 catalog_uri: str = 's3://llm-data-registry/preferences/code-pref-v3/manifest.json',
                 registry_root: str = 's3://llm-registry/codellama-7b-dpo/',
                 max_shards: int = 16,
                 beta: float = 0.1,
                 min_pass1: float = 0.45):
    sft = dsl.importer(artifact_uri=sft_ckpt_uri, artifact_class=Model, reimport=False)
    sft.set_display_name('import-sft-ckpt')

    work = kubernetes.CreatePVC(pvc_name_suffix='-dpo-work', access_modes=['ReadWriteMany'],
                                size='300Gi', storage_class_name='efs-sc')

    plan = plan_shards(catalog_uri=catalog_uri, max_shards=max_shards)
    with dsl.ParallelFor(plan.output, parallelism=4) as shard:
        sc = score_pairs(shard_uri=shard)
        sc.set_accelerator_type('nvidia.com/gpu').set_accelerator_limit(1)
        kubernetes.mount_pvc(sc, pvc_name='llm-model-cache', mount_path='/rm', sub_path='reward/code-rm-7b-v2')

    merged = merge_pairs(scored=dsl.Collected(sc.outputs['scored']), min_margin=0.5)
    kubernetes.mount_pvc(merged, pvc_name=work.outputs['name'], mount_path='/work')

    train = dpo_train(policy=sft.output, beta=beta).after(merged)
    train.set_env_variable('REF_MODEL_URI', 's3://llm-models/codellama/CodeLlama-7b-Instruct-hf/')
    train.set_accelerator_type('nvidia.com/gpu').set_accelerator_limit(8)
    kubernetes.mount_pvc(train, pvc_name=work.outputs['name'], mount_path='/work')
    kubernetes.use_config_map_as_env(train, config_map_name='dpo-defaults',
                                     config_map_key_to_env={'max_length': 'DPO_MAX_LENGTH',
                                                            'deepspeed_stage': 'DS_STAGE'})

    with dsl.ParallelFor(BENCHMARKS) as b:
        ev = eval_code(bench=b.bench, data_uri=b.uri).after(train)
        ev.set_accelerator_type('nvidia.com/gpu').set_accelerator_limit(1)
        kubernetes.mount_pvc(ev, pvc_name=work.outputs['name'], mount_path='/work')

    g = gate(scores=dsl.Collected(ev.output), min_pass1=min_pass1)

    push = push_checkpoint(dest=f'{registry_root}staging/').after(g)
    kubernetes.mount_pvc(push, pvc_name=work.outputs['name'], mount_path='/work')

    kubernetes.DeletePVC(pvc_name=work.outputs['name']).after(push)

    with dsl.If(g.output == 'promote'):
        register_model(model_uri=f'{registry_root}staging/',
                       registry_index='s3://llm-registry/index/codellama-7b-dpo.json').after(push)


if __name__ == '__main__':
    compiler.Compiler().compile(dpo_pipeline, os.path.splitext(__file__)[0] + '.yaml')
