# ruff: noqa
"""KFP v2 (held-out test): DPO alignment of an SFT Llama checkpoint with a beta sweep.
Idioms: HF datasets streaming load_dataset('json', data_files={...}, streaming=True) over a
zstd glob, ParallelFor over a list-of-dicts pipeline parameter (item fields in a container
component and a ConcatPlaceholder), dsl.If inside the loop, an env var overriding an
os.environ.get default, str.format write path, s3fs glob + cat fan-in after the loop,
add_toleration / add_node_selector.

Compile: /tmp/kfp2/bin/python kfp2_heldout_dpo_align.py
"""
import os
from typing import List

from kfp import compiler, dsl, kubernetes

PY = 'python:3.11-slim'
TRL = 'ghcr.io/acme-llm/trl:0.9.4-cu121'


@dsl.component(base_image=PY, packages_to_install=['datasets==2.19.2', 's3fs==2024.3.1', 'zstandard==0.22.0'])
def filter_preferences(prefs_repo: str, min_margin: float, clean: dsl.Output[dsl.Dataset]):
    import json

    from datasets import load_dataset
    stream = load_dataset("json", data_files={"train": f"{prefs_repo}/train/*.jsonl.zst"},
                          split="train", streaming=True)
    kept = 0
    with open(clean.path, "w") as out:
        for ex in stream:
            if ex["score_chosen"] - ex["score_rejected"] >= min_margin:
                out.write(json.dumps({"prompt": ex["prompt"], "chosen": ex["chosen"],
                                      "rejected": ex["rejected"]}) + "\n")
                kept += 1
    print("kept", kept)


@dsl.container_component
def dpo_train(sft_ckpt: str, beta: float, tag: str, prefs: dsl.Input[dsl.Dataset],
              policy: dsl.Output[dsl.Model]):
    return dsl.ContainerSpec(
        image=TRL,
        command=['accelerate', 'launch', '--config_file', '/etc/accelerate/fsdp.yaml', 'dpo.py'],
        args=['--model_name_or_path', sft_ckpt,
              '--train_file', prefs.path,
              '--beta', beta,
              '--run_name', dsl.ConcatPlaceholder(['dpo-llama3-', tag]),
              '--bf16', '--gradient_checkpointing',
              '--output_dir', policy.path])


@dsl.component(base_image=TRL)
def safety_eval(policy: dsl.Input[dsl.Model], tag: str) -> float:
    import json
    import os

    import fsspec
    from acme_llm.safety import score_refusals
    prompts_uri = os.environ.get("REDTEAM_URI", "s3://acme-llm-data/evals/redteam/v4/prompts.jsonl")
    with fsspec.open(prompts_uri, "rt") as f:
        prompts = [json.loads(line) for line in f]
    rate = score_refusals(policy.path, prompts)
    with fsspec.open("s3://acme-llm-evals/dpo/{}/safety.json".format(tag), "w") as f:
        json.dump({"tag": tag, "refusal_rate": rate}, f)
    return rate


@dsl.component(base_image=PY, packages_to_install=['s3fs==2024.3.1'])
def summarize_sweep(evals_prefix: str) -> str:
    import json

    import s3fs
    fs = s3fs.S3FileSystem()
    rows = [json.loads(fs.cat(p)) for p in fs.glob(evals_prefix + "*/safety.json")]
    best = min(rows, key=lambda r: r["refusal_rate"])
    return best["tag"]


@dsl.pipeline(name='llama3-dpo-beta-sweep')
def dpo_sweep(prefs_repo: str = 's3://acme-llm-data/preferences/hh-rlhf-v2',
              sft_ckpt: str = 's3://acme-llm-ckpt/sft/llama3-8b-sft-0611/',
              sweep: List[dict] = [{'beta': 0.1, 'tag': 'b01'}, {'beta': 0.3, 'tag': 'b03'}],
              run_safety: bool = True):
    prefs = filter_preferences(prefs_repo=prefs_repo, min_margin=1.0)
    with dsl.ParallelFor(sweep, parallelism=1) as cfg:
        train = dpo_train(sft_ckpt=sft_ckpt, beta=cfg.beta, tag=cfg.tag, prefs=prefs.outputs['clean'])
        train.set_accelerator_type('nvidia.com/gpu').set_accelerator_limit(8)
        kubernetes.add_toleration(train, key='nvidia.com/gpu', operator='Exists', effect='NoSchedule')
        kubernetes.add_node_selector(train, label_key='node.kubernetes.io/instance-type', label_value='p4d.24xlarge')
        kubernetes.use_config_map_as_volume(train, config_map_name='accelerate-fsdp', mount_path='/etc/accelerate')
        with dsl.If(run_safety == True):
            ev = safety_eval(policy=train.outputs['policy'], tag=cfg.tag)
            ev.set_env_variable('REDTEAM_URI', 's3://acme-llm-data/evals/redteam/v5/prompts.jsonl')
    summarize_sweep(evals_prefix='s3://acme-llm-evals/dpo/').after(ev)


if __name__ == '__main__':
    compiler.Compiler().compile(dpo_sweep, os.path.splitext(__file__)[0] + '.yaml')
