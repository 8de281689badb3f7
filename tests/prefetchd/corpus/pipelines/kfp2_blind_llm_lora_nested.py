# ruff: noqa
"""KFP v2 (blind test): LLM LoRA SFT. A @dsl.pipeline (sft-data-prep) used as a
component inside the outer pipeline; datasets.load_dataset over an s3 glob built
from a nested-pipeline input; s3fs get of a tokenizer; importer with metadata and
reimport; set_retry, caching off, secret as env, node selector, toleration,
existing PVC as HF cache plus an emptyDir /dev/shm; f-string output URI from a
pipeline parameter; evaluation reading a jsonl with pandas and writing results with fsspec.

Compile: /tmp/kfp2/bin/python kfp2_blind_llm_lora_nested.py
"""
import os

from kfp import compiler, dsl, kubernetes

TRAIN_IMAGE = 'ghcr.io/acme-ml/llm-train:2024.06'


@dsl.component(base_image='python:3.11-slim', packages_to_install=['datasets==2.19.1', 's3fs==2024.3.1'])
def build_sft_mix(corpus_uri: str, dolly_uri: str, mix: dsl.Output[dsl.Dataset]):
    from datasets import concatenate_datasets, load_dataset
    oasst = load_dataset('json', data_files=f'{corpus_uri}/oasst1/*.jsonl.gz', split='train')
    dolly = load_dataset('parquet', data_files={'train': dolly_uri}, split='train')
    dolly = dolly.rename_column('response', 'text')
    ds = concatenate_datasets([oasst.select_columns(['text']), dolly.select_columns(['text'])])
    ds.shuffle(seed=17).save_to_disk(mix.path)


@dsl.component(base_image='python:3.11-slim', packages_to_install=['transformers==4.41.2', 'datasets==2.19.1', 's3fs==2024.3.1'])
def tokenize(mix: dsl.Input[dsl.Dataset], tokenizer_uri: str, max_len: int, tokenized: dsl.Output[dsl.Dataset]):
    import s3fs
    from datasets import load_from_disk
    from transformers import AutoTokenizer
    fs = s3fs.S3FileSystem()
    fs.get(tokenizer_uri, '/tmp/tok/', recursive=True)
    tok = AutoTokenizer.from_pretrained('/tmp/tok/')
    ds = load_from_disk(mix.path)
    ds = ds.map(lambda b: tok(b['text'], truncation=True, max_length=max_len), batched=True, num_proc=8)
    ds.save_to_disk(tokenized.path)


@dsl.pipeline(name='sft-data-prep')
def sft_data_prep(corpus_uri: str,
                  tokenizer_uri: str,
                  dolly_uri: str = 's3://acme-llm-data/sft/dolly15k/train.parquet',
                  max_len: int = 2048) -> dsl.Dataset:
    mix = build_sft_mix(corpus_uri=corpus_uri, dolly_uri=dolly_uri)
    mix.set_cpu_limit('8').set_memory_limit('32G')
    tok = tokenize(mix=mix.outputs['mix'], tokenizer_uri=tokenizer_uri, max_len=max_len)
    return tok.outputs['tokenized']


@dsl.container_component
def lora_finetune(base_model: dsl.Input[dsl.Model], train_data: dsl.Input[dsl.Dataset], output_dir: str,
                  adapter: dsl.Output[dsl.Model]):
    return dsl.ContainerSpec(
        image=TRAIN_IMAGE,
        command=['accelerate', 'launch', '--num_processes', '8', '/app/train_lora.py'],
        args=['--model_name_or_path', base_model.path,
              '--dataset_dir', train_data.path,
              '--lora_r', '16', '--lora_alpha', '32',
              '--bf16', 'true',
              '--output_dir', output_dir,
              '--adapter_out', adapter.path])


@dsl.component(base_image='python:3.11-slim', packages_to_install=['pandas==2.2.2', 's3fs==2024.3.1', 'fsspec==2024.3.1'])
def evaluate(adapter: dsl.Input[dsl.Model], base_model: dsl.Input[dsl.Model], questions_uri: str, results_uri: str) -> float:
    import json

    import fsspec
    import pandas as pd
    questions = pd.read_json(questions_uri, lines=True)
    # (generation with base_model.path + adapter.path elided)
    scores = [min(10.0, len(q) / 50.0) for q in questions['turns'].astype(str)]
    mean = float(sum(scores) / max(1, len(scores)))
    with fsspec.open(results_uri + 'summary.json', 'w') as f:
        json.dump({'mt_bench_proxy': mean, 'n': len(scores)}, f)
    return mean


@dsl.pipeline(name='llama3-lora-sft')
def llama3_lora_sft(corpus_uri: str = 's3://acme-llm-data/sft',
                    base_model_uri: str = 's3://acme-llm-models/base/llama-3-8b/',
                    tokenizer_uri: str = 's3://acme-llm-models/base/llama-3-8b/tokenizer/',
                    run_name: str = 'sft-v7',
                    eval_questions: str = 's3://acme-llm-data/eval/mt-bench/questions.jsonl'):
    base = dsl.importer(artifact_uri=base_model_uri, artifact_class=dsl.Model, reimport=True,
                        metadata={'family': 'llama3', 'params': '8B', 'license': 'llama3'})
    data = sft_data_prep(corpus_uri=corpus_uri, tokenizer_uri=tokenizer_uri)
    ft = lora_finetune(base_model=base.output, train_data=data.output,
                       output_dir=f's3://acme-llm-models/adapters/{run_name}/')
    ft.set_accelerator_type('nvidia.com/gpu').set_accelerator_limit(8)
    ft.set_cpu_limit('64').set_memory_limit('600G')
    ft.set_retry(num_retries=2, backoff_duration='60s', backoff_factor=2.0)
    ft.set_caching_options(False)
    kubernetes.use_secret_as_env(ft, secret_name='hf-token', secret_key_to_env={'token': 'HF_TOKEN'})
    kubernetes.add_node_selector(ft, label_key='nvidia.com/gpu.product', label_value='NVIDIA-H100-80GB-HBM3')
    kubernetes.add_toleration(ft, key='nvidia.com/gpu', operator='Exists', effect='NoSchedule')
    kubernetes.mount_pvc(ft, pvc_name='hf-cache', mount_path='/root/.cache/huggingface')
    kubernetes.empty_dir_mount(ft, volume_name='dshm', mount_path='/dev/shm', medium='Memory')
    ev = evaluate(adapter=ft.outputs['adapter'], base_model=base.output, questions_uri=eval_questions,
                  results_uri=f's3://acme-llm-models/adapters/{run_name}/eval/')
    kubernetes.use_secret_as_env(ev, secret_name='aws-ml-readwrite',
                                 secret_key_to_env={'AWS_ACCESS_KEY_ID': 'AWS_ACCESS_KEY_ID',
                                                    'AWS_SECRET_ACCESS_KEY': 'AWS_SECRET_ACCESS_KEY'})


if __name__ == '__main__':
    compiler.Compiler().compile(llama3_lora_sft, os.path.splitext(__file__)[0] + '.yaml')
