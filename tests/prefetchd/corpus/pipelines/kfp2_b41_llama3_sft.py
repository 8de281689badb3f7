# ruff: noqa
# ruff: noqa
"""Llama-3-8B SFT on a mirrored Hugging Face dataset (KFP v2 + kfp-kubernetes).

Platform-team template: resolve the mirrored dataset revision from the mirror
index, tokenize into shards on a per-run scratch claim, SFT, lm-eval-harness,
export the checkpoint, register it if MMLU clears the bar, drop the claim.
A Slack notifier runs as the exit task.

Compile: python kfp2_b41_llama3_sft.py  -> kfp2_b41_llama3_sft.yaml
"""
import os

from kfp import compiler, dsl, kubernetes
from kfp.dsl import OutputPath

DATA_IMAGE = 'ghcr.io/acme-llm/data-tools:0.14.2'
TRAIN_IMAGE = 'ghcr.io/acme-llm/trainer:2.4.0-cu121'
EVAL_IMAGE = 'ghcr.io/acme-llm/lm-eval:0.4.3'


@dsl.component(base_image=DATA_IMAGE)
def resolve_dataset(hf_repo: str, mirror_index_uri: str, dataset_uri: OutputPath(str)):
    """Look up the newest mirrored revision of hf_repo and hand its S3 prefix on."""
    import json
    import fsspec
    with fsspec.open(mirror_index_uri, 'r') as f:
        index = json.load(f)
    entry = index['datasets'][hf_repo]
    with open(dataset_uri, 'w') as out:
        out.write(f"{entry['root'].rstrip('/')}/{entry['revision']}/")


@dsl.component(base_image=DATA_IMAGE)
def tokenize(dataset_uri: str, num_shards: int, seq_len: int):
    import os
    from datasets import load_dataset
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(os.environ['TOKENIZER_URI'])
    ds = load_dataset('parquet', data_files={'train': f'{dataset_uri}data/train_sft-*.parquet'}, split='train')
    ds = ds.map(lambda b: tok.apply_chat_template(b['messages'], max_length=seq_len, truncation=True),
                batched=True, num_proc=16)
    for i in range(num_shards):
        ds.shard(num_shards, i).save_to_disk(f'/scratch/shards/{i:05d}')


@dsl.container_component
def sft_train(base_model_uri: str, epochs: int, lr: float):
    return dsl.ContainerSpec(
        image=TRAIN_IMAGE,
        command=['accelerate', 'launch', '--num_processes', '8', '-m', 'acme_sft.train'],
        args=['--model_name_or_path', base_model_uri,
              '--train_shards', '/scratch/shards',
              '--num_train_epochs', epochs,
              '--learning_rate', lr,
              '--bf16', '--gradient_checkpointing',
              '--output_dir', '/scratch/ckpt/sft'])


@dsl.component(base_image=EVAL_IMAGE)
def eval_harness(tasks: str) -> float:
    import json
    import subprocess
    # lm-eval's datasets, mirrored once per harness release (HF_DATASETS_OFFLINE=1 in the image)
    subprocess.run(['aws', 's3', 'sync', 's3://llm-hf-mirror/eval-bundles/lm-eval-0.4.3/',
                    '/root/.cache/huggingface/datasets/'], check=True)
    subprocess.run(['lm_eval', '--model', 'hf', '--model_args', 'pretrained=/scratch/ckpt/sft,dtype=bfloat16',
                    '--tasks', tasks, '--batch_size', 'auto', '--output_path', '/scratch/eval/results.json'],
                   check=True)
    with open('/scratch/eval/results.json') as f:
        return float(json.load(f)['results']['mmlu']['acc,none'])


@dsl.container_component
def export_checkpoint(dest: str):
    return dsl.ContainerSpec(image='amazon/aws-cli:2.15.30',
                             command=['aws', 's3', 'sync', '--only-show-errors'],
                             args=['/scratch/ckpt/sft/', dest])


@dsl.component(base_image='ghcr.io/acme-llm/mlflow-client:2.14.1')
def register_model(model_uri: str, name: str, mmlu: float):
    import mlflow
    mv = mlflow.register_model(model_uri=model_uri, name=name)
    mlflow.MlflowClient().set_model_version_tag(name, mv.version, 'mmlu', str(mmlu))


@dsl.component(base_image='python:3.11-slim')
def notify_slack(channel: str, status: dsl.PipelineTaskFinalStatus):
    import json, os, urllib.request
    body = json.dumps({'channel': channel, 'text': f'{status.pipeline_job_resource_name}: {status.state}'})
    urllib.request.urlopen(urllib.request.Request(os.environ.get('SLACK_WEBHOOK', 'http://slack-relay.infra/hook'),
                                                  data=body.encode(), method='POST'))


@dsl.pipeline(name='llama3-8b-sft-ultrachat')
def sft_pipeline(hf_repo: str = 'HuggingFaceH4/ultrachat_200k',
                 mirror_index_uri: str = 's3://llm-hf-mirror/_index/datasets.json',
                 base_model_uri: str = 's3://llm-models/meta-llama/Meta-Llama-3-8B/',
                 registry_prefix: str = 's3://llm-registry/llama3-8b-ultrachat-sft/',
                 num_shards: int = 64,
                 epochs: int = 2,
                 lr: float = 2e-5,
                 min_mmlu: float = 0.62):
    notify = notify_slack(channel='#llm-training')
    with dsl.ExitHandler(notify, name='sft-run'):
        scratch = kubernetes.CreatePVC(pvc_name_suffix='-sft-scratch', access_modes=['ReadWriteMany'],
                                       size='500Gi', storage_class_name='fsx-lustre')

        resolved = resolve_dataset(hf_repo=hf_repo, mirror_index_uri=mirror_index_uri)
        resolved.set_caching_options(False)

        tok = tokenize(dataset_uri=resolved.outputs['dataset_uri'], num_shards=num_shards, seq_len=4096)
        tok.set_env_variable('TOKENIZER_URI', 's3://llm-models/meta-llama/Meta-Llama-3-8B-Instruct/tokenizer/')
        tok.set_cpu_limit('32').set_memory_limit('128G')
        kubernetes.mount_pvc(tok, pvc_name=scratch.outputs['name'], mount_path='/scratch')

        train = sft_train(base_model_uri=base_model_uri, epochs=epochs, lr=lr).after(tok)
        train.set_accelerator_type('nvidia.com/gpu').set_accelerator_limit(8)
        kubernetes.mount_pvc(train, pvc_name=scratch.outputs['name'], mount_path='/scratch')
        kubernetes.use_config_map_as_env(train, config_map_name='llm-train-defaults',
                                         config_map_key_to_env={'wandb_project': 'WANDB_PROJECT',
                                                                'nccl_ib_hca': 'NCCL_IB_HCA'})
        kubernetes.use_secret_as_env(train, secret_name='wandb', secret_key_to_env={'api_key': 'WANDB_API_KEY'})

        ev = eval_harness(tasks='mmlu,gsm8k,arc_challenge,hellaswag').after(train)
        ev.set_accelerator_type('nvidia.com/gpu').set_accelerator_limit(1)
        kubernetes.mount_pvc(ev, pvc_name=scratch.outputs['name'], mount_path='/scratch')

        export = export_checkpoint(dest=f'{registry_prefix}candidates/').after(ev)
        kubernetes.mount_pvc(export, pvc_name=scratch.outputs['name'], mount_path='/scratch')
        kubernetes.use_secret_as_env(export, secret_name='registry-writer',
                                     secret_key_to_env={'access_key': 'AWS_ACCESS_KEY_ID',
                                                        'secret_key': 'AWS_SECRET_ACCESS_KEY'})

        kubernetes.DeletePVC(pvc_name=scratch.outputs['name']).after(export)

        with dsl.If(ev.output >= min_mmlu, name='mmlu-gate'):
            register_model(model_uri=f'{registry_prefix}candidates/', name='llama3-8b-ultrachat-sft',
                           mmlu=ev.output).after(export)


if __name__ == '__main__':
    compiler.Compiler().compile(sft_pipeline, os.path.splitext(__file__)[0] + '.yaml')
