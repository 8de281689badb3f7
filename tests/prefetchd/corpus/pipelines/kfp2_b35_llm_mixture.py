# ruff: noqa
# ruff: noqa
"""SFT data-mixture pipeline for an 8B model (KFP v2).

The mixture manifest decides which corpus dominates this run; the matching
tokenizer job runs in a dsl.If / dsl.Elif / dsl.Else chain and dsl.OneOf
hands whichever token shards were built to the fine-tuning step. Tokenizers,
evaluation and publishing are container components (f-string and
ConcatPlaceholder args). Fine-tuning gets its base checkpoint through an env
var, its HF token from a Secret and its W&B project from a ConfigMap.

Compile: python kfp2_b35_llm_mixture.py  -> kfp2_b35_llm_mixture.yaml
"""
import os

from kfp import compiler, dsl, kubernetes
from kfp.dsl import Artifact, Dataset, Input, Model, Output

TOK_IMAGE = 'ghcr.io/acme-llm/tokenizer:0.9.1'


@dsl.component(base_image='ghcr.io/acme-llm/mixer:2.3.0')
def profile_mixture(manifest_uri: str) -> str:
    import json
    import fsspec
    with fsspec.open(manifest_uri) as f:
        weights = json.load(f)['weights']
    return max(weights, key=weights.get)  # 'code' | 'math' | 'web'


@dsl.container_component
def tokenize_code(corpus_root: str, languages: str, tokens: Output[Dataset]):
    return dsl.ContainerSpec(
        image=TOK_IMAGE,
        command=['python', '-m', 'tok.build'],
        args=['--source', f'{corpus_root}/the-stack-v2/dedup/', '--languages', languages,
              '--out', tokens.path])


@dsl.container_component
def tokenize_math(corpus_root: str, tokens: Output[Dataset]):
    return dsl.ContainerSpec(
        image=TOK_IMAGE,
        command=['python', '-m', 'tok.build'],
        args=['--source', dsl.ConcatPlaceholder([corpus_root, '/open-web-math/v1.2/']),
              '--out', tokens.path])


@dsl.container_component
def tokenize_web(corpus_root: str, snapshot: str, tokens: Output[Dataset]):
    return dsl.ContainerSpec(
        image=TOK_IMAGE,
        command=['python', '-m', 'tok.build'],
        args=['--source', f'{corpus_root}/fineweb-edu/{snapshot}/', '--min-score', '3',
              '--out', tokens.path])


@dsl.component(base_image='ghcr.io/acme-llm/trainer:2.3.0')
def finetune(tokens: Input[Dataset], learning_rate: float, model: Output[Model]):
    import os
    import subprocess
    subprocess.run(['torchrun', '--nproc-per-node', '8', '-m', 'trainer.sft',
                    '--base', os.environ['BASE_MODEL_URI'], '--data', tokens.path,
                    '--lr', str(learning_rate), '--out', model.path,
                    '--wandb-project', os.environ['WANDB_PROJECT']], check=True)


@dsl.container_component
def eval_harness(model: Input[Model], eval_root: str, suite: str, report: Output[Artifact]):
    return dsl.ContainerSpec(
        image='ghcr.io/acme-llm/lm-eval:0.4.3',
        command=['lm_eval', '--model', 'hf'],
        args=['--model_args', dsl.ConcatPlaceholder(['pretrained=', model.path]),
              '--tasks', suite,
              '--data_dir', dsl.ConcatPlaceholder([eval_root, '/', suite, '/']),
              '--output_path', report.path])


@dsl.container_component
def publish_model(model: Input[Model], registry_root: str, run_name: str):
    return dsl.ContainerSpec(
        image='amazon/aws-cli:2.15.30',
        command=['aws', 's3', 'sync'],
        args=[model.path, f'{registry_root}/sft/{run_name}/'])


@dsl.pipeline(name='sft-mixture-llama8b')
def sft_mixture(
    mixture_manifest: str = 's3://acme-llm-data/mixtures/v7/manifest.json',
    corpus_root: str = 's3://acme-llm-data/raw',
    web_snapshot: str = 'CC-MAIN-2024-10',
    eval_root: str = 's3://acme-llm-data/eval',
    eval_suite: str = 'mmlu',
    registry_root: str = 's3://acme-llm-models',
    run_name: str = 'llama8b-mix-v7',
    learning_rate: float = 2e-5,
):
    prof = profile_mixture(manifest_uri=mixture_manifest)
    with dsl.If(prof.output == 'code'):
        code = tokenize_code(corpus_root=corpus_root, languages='python,go,rust')
    with dsl.Elif(prof.output == 'math'):
        math = tokenize_math(corpus_root=corpus_root)
    with dsl.Else():
        web = tokenize_web(corpus_root=corpus_root, snapshot=web_snapshot)

    tokens = dsl.OneOf(code.outputs['tokens'], math.outputs['tokens'], web.outputs['tokens'])
    ft = finetune(tokens=tokens, learning_rate=learning_rate)
    ft.set_env_variable('BASE_MODEL_URI', 's3://acme-llm-models/base/llama-3.1-8b/')
    kubernetes.use_secret_as_env(ft, secret_name='hf-credentials', secret_key_to_env={'token': 'HF_TOKEN'})
    kubernetes.use_config_map_as_env(ft, config_map_name='wandb-settings',
                                     config_map_key_to_env={'project': 'WANDB_PROJECT'})
    ft.set_accelerator_type('nvidia.com/gpu').set_accelerator_limit(8)

    ev = eval_harness(model=ft.outputs['model'], eval_root=eval_root, suite=eval_suite)
    pub = publish_model(model=ft.outputs['model'], registry_root=registry_root, run_name=run_name)
    pub.after(ev)
    kubernetes.use_secret_as_env(pub, secret_name='registry-writer',
                                 secret_key_to_env={'access_key': 'AWS_ACCESS_KEY_ID',
                                                    'secret_key': 'AWS_SECRET_ACCESS_KEY'})


if __name__ == '__main__':
    compiler.Compiler().compile(sft_mixture, os.path.splitext(__file__)[0] + '.yaml')
