# ruff: noqa
"""Customs declarations -> Harmonized System (HS) code suggestions for brokers.
Pulls the tariff nomenclature for the configured version, cleans and redacts the month's declarations, splits them,
tokenizes with the base multilingual model, fine-tunes on 4 GPUs, evaluates per HS chapter, aggregates, and when
accuracy clears the bar pushes the model to serving and back-fills suggestions for the pending review queue.
An audit line is written to S3 however the run ends."""
import kfp
from kfp import dsl
from kfp.aws import use_aws_secret
from kfp.components import InputPath, OutputPath, create_component_from_func

HS_IMAGE = "registry.customs-ai.eu/hsclf/trainer:3.5.2"


def clean_declarations(declarations_uri: str, tariff_path: InputPath("JSON"), clean_path: OutputPath("Parquet")):
    import json
    import re

    import fsspec
    import pandas as pd

    decl = pd.read_parquet(declarations_uri, columns=["decl_id", "description", "origin", "hs_code", "lang"])
    with open(tariff_path) as f:
        valid = {n["code"][:6] for n in json.load(f)["nomenclature"]}
    with fsspec.open("s3://customs-ref/pii/redaction_patterns_v3.txt", "r") as f:
        patterns = [re.compile(line.strip()) for line in f if line.strip()]
    for p in patterns:
        decl["description"] = decl["description"].str.replace(p, "[REDACTED]", regex=True)
    decl = decl[decl["hs_code"].str[:6].isin(valid)].drop_duplicates("description")
    decl.to_parquet(clean_path, index=False)


def dedup_and_split(clean_path: InputPath("Parquet"), run_name: str, seed: int):
    import pandas as pd
    from sklearn.model_selection import train_test_split

    df = pd.read_parquet(clean_path)
    train, rest = train_test_split(df, test_size=0.2, random_state=seed, stratify=df["hs_code"].str[:2])
    val, test = train_test_split(rest, test_size=0.5, random_state=seed)
    parts = {"train": train, "val": val, "test": test}
    for split in ["train", "val", "test"]:
        parts[split].to_parquet(f"s3://customs-ml-data/{run_name}/splits/{split}.parquet", index=False)


def tokenize(base_model: str, run_name: str, tokenized_path: OutputPath("Directory")):
    import pandas as pd
    import s3fs
    from datasets import Dataset, DatasetDict
    from transformers import AutoTokenizer

    fs = s3fs.S3FileSystem()
    fs.get(base_model, "/tmp/base/", recursive=True)
    tok = AutoTokenizer.from_pretrained("/tmp/base")
    dd = DatasetDict({s: Dataset.from_pandas(pd.read_parquet(f"s3://customs-ml-data/{run_name}/splits/{s}.parquet"))
                      for s in ["train", "val"]})
    dd.map(lambda b: tok(b["description"], truncation=True, max_length=128), batched=True).save_to_disk(tokenized_path)


def eval_chapter(run_name: str, chapter: str) -> float:
    import json

    import pandas as pd
    import s3fs
    from hsclf.evaluate import accuracy_at_k

    fs = s3fs.S3FileSystem()
    fs.get(f"s3://customs-ml-models/{run_name}/", "/tmp/model/", recursive=True)
    test = pd.read_parquet(f"s3://customs-ml-data/{run_name}/splits/test.parquet")
    test = test[test["hs_code"].str[:2] == chapter]
    acc1, acc3 = accuracy_at_k("/tmp/model", test, ks=(1, 3))
    with fs.open(f"s3://customs-ml-reports/{run_name}/chapter_{chapter}.json", "w") as f:
        json.dump({"chapter": chapter, "n": len(test), "acc@1": acc1, "acc@3": acc3}, f)
    return float(acc1)


def aggregate_metrics(run_name: str) -> float:
    import json

    import s3fs

    fs = s3fs.S3FileSystem()
    rows = [json.load(fs.open(p)) for p in fs.glob(f"s3://customs-ml-reports/{run_name}/chapter_*.json")]
    return sum(r["acc@1"] * r["n"] for r in rows) / sum(r["n"] for r in rows)


def backfill_predictions(run_name: str):
    import pandas as pd
    import s3fs
    from hsclf.predict import suggest

    fs = s3fs.S3FileSystem()
    fs.get("s3://customs-serving/hs-classifier/current/", "/tmp/serving/", recursive=True)
    pending = pd.read_parquet("s3://customs-ops/pending-review/latest.parquet")
    out = suggest("/tmp/serving", pending, top_k=3, device="cuda")
    out.to_parquet(f"s3://customs-ops/suggestions/{run_name}.parquet", index=False)


clean_op = create_component_from_func(clean_declarations, base_image=HS_IMAGE)
split_op = create_component_from_func(dedup_and_split, base_image=HS_IMAGE)
tokenize_op = create_component_from_func(tokenize, base_image=HS_IMAGE)
eval_op = create_component_from_func(eval_chapter, base_image=HS_IMAGE)
agg_op = create_component_from_func(aggregate_metrics, base_image=HS_IMAGE)
backfill_op = create_component_from_func(backfill_predictions, base_image=HS_IMAGE)


@dsl.pipeline(name="customs-hs-classifier", description="Monthly HS-code classifier retrain")
def customs_hs(declarations_uri: str = "s3://customs-ml-raw/declarations/2025-10/declarations.parquet",
               tariff_version: str = "hs2022-eu-cn-2025",
               base_model: str = "s3://customs-ml-models/hf/xlm-roberta-base/",
               run_name: str = "hsclf-2025-10",
               min_accuracy: float = 0.88):
    audit = dsl.ContainerOp(
        name="audit-log",
        image="amazon/aws-cli:2.17.0",
        command=["sh", "-c"],
        arguments=['echo "$(date -u +%FT%TZ) run=$0 status={{workflow.status}}" | aws s3 cp - "s3://customs-ml-audit/runs/$0.log"',
                   run_name],
    ).apply(use_aws_secret("customs-ml-aws"))

    with dsl.ExitHandler(audit):
        tariff = dsl.ContainerOp(
            name="pull-tariff",
            image="amazon/aws-cli:2.17.0",
            command=["aws", "s3", "cp"],
            arguments=[f"s3://customs-ref/tariff/{tariff_version}/nomenclature.json", "/tmp/outputs/tariff.json"],
            file_outputs={"tariff": "/tmp/outputs/tariff.json"},
        ).apply(use_aws_secret("customs-ml-aws"))

        clean = clean_op(declarations_uri=declarations_uri, tariff=tariff.outputs["tariff"])
        clean.apply(use_aws_secret("customs-ml-aws")).set_memory_limit("32G")

        split = split_op(clean=clean.outputs["clean"], run_name=run_name, seed=7).apply(use_aws_secret("customs-ml-aws"))

        tok = tokenize_op(base_model=base_model, run_name=run_name).after(split).apply(use_aws_secret("customs-ml-aws"))

        finetune = dsl.ContainerOp(
            name="finetune",
            image=HS_IMAGE,
            command=["accelerate", "launch", "--num_processes", "4", "-m", "hsclf.train"],
            arguments=["--model_name_or_path", base_model,
                       "--train-dir", dsl.InputArgumentPath(tok.outputs["tokenized"]),
                       "--label-map", f"s3://customs-ref/tariff/{tariff_version}/label_map.json",
                       "--num-train-epochs", "4",
                       "--output-dir", f"s3://customs-ml-models/{run_name}/"],
        ).apply(use_aws_secret("customs-ml-aws"))
        finetune.set_gpu_limit(4)
        finetune.add_node_selector_constraint("node.kubernetes.io/instance-type", "g5.12xlarge")
        finetune.set_memory_limit("180G")

        with dsl.ParallelFor(["84", "85", "39", "61"]) as chapter:
            ev = eval_op(run_name=run_name, chapter=chapter).after(finetune).apply(use_aws_secret("customs-ml-aws"))

        agg = agg_op(run_name=run_name).after(ev).apply(use_aws_secret("customs-ml-aws"))

        with dsl.Condition(agg.output >= min_accuracy):
            push = dsl.ContainerOp(
                name="push-model",
                image="amazon/aws-cli:2.17.0",
                command=["aws", "s3", "sync"],
                arguments=[f"s3://customs-ml-models/{run_name}/", "s3://customs-serving/hs-classifier/current/",
                           "--exclude", "checkpoint-*", "--delete"],
            ).apply(use_aws_secret("customs-ml-aws"))

            fill = backfill_op(run_name=run_name).after(push).apply(use_aws_secret("customs-ml-aws"))
            fill.set_gpu_limit(1)


if __name__ == "__main__":
    kfp.compiler.Compiler().compile(customs_hs, __file__.replace(".py", ".yaml"))
