# ruff: noqa
"""KFP v2 (blind test r4): RLHF reward-model training with a learning-rate sweep.

Idioms: HF load_dataset("parquet", data_files={split: glob}) with a dict of splits, an
importer for the SFT policy, a static ParallelFor over dicts feeding a container component
whose `--output_dir` is a ConcatPlaceholder of a constant and a loop-item field, an OutputPath
parameter collected with dsl.Collected, the winning tag (a task output) forming locations
downstream, tf.io.gfile over gs://, dsl.If on a boolean parameter, `aws s3 sync` in sh -c,
set_caching_options(False).

Compile: /tmp/kfp2/bin/python kfp2_r4_reward_model.py
"""
import os
from typing import List

from kfp import compiler, dsl

RLHF = 'ghcr.io/acme-align/rlhf-train:2024.10.1'


@dsl.component(base_image=RLHF)
def build_pairs(prefs_root: str, min_margin: float, pairs: dsl.Output[dsl.Dataset]):
    from datasets import load_dataset

    ds = load_dataset("parquet", data_files={
        "train": f"{prefs_root}/train-*.parquet",
        "test": f"{prefs_root}/test-*.parquet",
    })
    ds = ds.filter(lambda r: abs(r["score_chosen"] - r["score_rejected"]) >= min_margin)
    ds.save_to_disk(pairs.path)


@dsl.container_component
def train_rm(pairs: dsl.Input[dsl.Dataset], sft: dsl.Input[dsl.Model], lr: str, tag: str,
             eval_acc: dsl.OutputPath(str)):
    return dsl.ContainerSpec(
        image=RLHF,
        command=['accelerate', 'launch', '--num_processes', '8', '-m', 'rlhf.train_reward'],
        args=['--model_name_or_path', sft.path,
              '--dataset_dir', pairs.path,
              '--learning_rate', lr,
              '--output_dir', dsl.ConcatPlaceholder(['s3://acme-rlhf-ckpt/reward/', tag, '/']),
              '--eval_acc_file', eval_acc],
    )


@dsl.component(base_image=RLHF)
def select_best(accs: List[str], tags: list) -> str:
    scores = [float(a) for a in accs]
    return tags[scores.index(max(scores))]


@dsl.component(base_image=RLHF)
def rewardbench_eval(best_tag: str, bench_uri: str, metrics: dsl.Output[dsl.Metrics]):
    import json

    import tensorflow as tf
    from rlhf.rewardbench import score_model  # shared helper in the image

    with tf.io.gfile.GFile(bench_uri, "r") as f:
        rows = [json.loads(l) for l in f]
    acc = score_model(f"s3://acme-rlhf-ckpt/reward/{best_tag}/", rows)
    for k, v in acc.items():
        metrics.log_metric(k, v)


@dsl.container_component
def publish_rm(best_tag: str, registry_uri: str):
    return dsl.ContainerSpec(
        image='amazon/aws-cli:2.18.0',
        command=['sh', '-c'],
        args=['aws s3 sync "s3://acme-rlhf-ckpt/reward/$0/" "$1" --exclude "optimizer*"', best_tag, registry_uri],
    )


SWEEP = [{'lr': '1e-5', 'tag': 'lr1e5'}, {'lr': '5e-6', 'tag': 'lr5e6'}]


@dsl.pipeline(name='reward-model-sweep')
def reward_model(prefs_root: str = 's3://acme-rlhf-data/preferences/helpsteer-internal/2024-10',
                 sft_uri: str = 's3://acme-rlhf-models/sft/llama3-8b-sft-v5/',
                 bench_uri: str = 'gs://acme-rlhf-eval/rewardbench/v1.0/filtered.jsonl',
                 registry_uri: str = 's3://acme-rlhf-models/reward/llama3-8b-rm-v6/',
                 run_rewardbench: bool = True):
    pairs = build_pairs(prefs_root=prefs_root, min_margin=0.5)
    sft = dsl.importer(artifact_uri=sft_uri, artifact_class=dsl.Model, reimport=False)
    with dsl.ParallelFor(SWEEP, parallelism=1) as cfg:
        rm = train_rm(pairs=pairs.outputs['pairs'], sft=sft.output, lr=cfg.lr, tag=cfg.tag)
        rm.set_accelerator_type('nvidia.com/gpu').set_accelerator_limit(8)
    best = select_best(accs=dsl.Collected(rm.outputs['eval_acc']), tags=[c['tag'] for c in SWEEP])
    with dsl.If(run_rewardbench == True, name='rewardbench'):
        rewardbench_eval(best_tag=best.output, bench_uri=bench_uri)
    pub = publish_rm(best_tag=best.output, registry_uri=registry_uri)
    pub.set_caching_options(False)


if __name__ == '__main__':
    compiler.Compiler().compile(reward_model, os.path.splitext(__file__)[0] + '.yaml')
