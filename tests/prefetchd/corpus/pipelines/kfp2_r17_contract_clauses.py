# ruff: noqa
"""Clause tagging for commercial contracts (CUAD-style labels).

Fine-tunes a legal-domain BERT on tokenised contract chunks, evaluates it on each
jurisdiction's held-out contracts and exports an ONNX model for the review tool.
Legal-ops is notified whatever happens.
"""
from typing import List

from kfp import compiler, dsl, kubernetes

NLP_IMAGE = "ghcr.io/lexcorp/legal-nlp:1.8.2"


@dsl.component(base_image=NLP_IMAGE)
def load_label_schema(label_config: str) -> str:
    import json

    import fsspec
    import yaml

    with fsspec.open(label_config, "r") as f:
        schema = yaml.safe_load(f)
    labels = [c["name"] for c in schema["clauses"] if c.get("enabled", True)]
    print(f"{len(labels)} clause types enabled")
    return json.dumps(labels)


@dsl.component(base_image=NLP_IMAGE)
def tokenize_contracts(
    corpus_uri: str,
    base_model: str,
    max_length: int,
    tokenized: dsl.Output[dsl.Dataset],
):
    import s3fs
    from datasets import load_dataset
    from transformers import AutoTokenizer

    fs = s3fs.S3FileSystem()
    fs.get(base_model, "/tmp/base-model/", recursive=True)
    tok = AutoTokenizer.from_pretrained("/tmp/base-model")

    ds = load_dataset(
        "json",
        data_files={"train": f"{corpus_uri}/train/*.jsonl.gz"},
        split="train",
    )

    def encode(batch):
        return tok(batch["text"], truncation=True, max_length=max_length, stride=128,
                   return_overflowing_tokens=True)

    ds = ds.map(encode, batched=True, remove_columns=ds.column_names)
    ds.save_to_disk(tokenized.path)


@dsl.container_component
def finetune_clause_tagger(
    tokenized: dsl.Input[dsl.Dataset],
    base_model: str,
    labels: str,
    model: dsl.Output[dsl.Model],
):
    return dsl.ContainerSpec(
        image="ghcr.io/lexcorp/legal-nlp-train:1.8.2-cu121",
        command=["python", "train_tagger.py"],
        args=[
            "--train-data", tokenized.path,
            "--init-model", base_model,
            "--labels-json", labels,
            "--epochs", "4",
            "--output-dir", model.path,
        ],
    )


@dsl.component(base_image=NLP_IMAGE)
def eval_jurisdiction(jurisdiction: str, corpus_uri: str, model: dsl.Input[dsl.Model]) -> float:
    import json
    import os

    import fsspec
    import pandas as pd
    from transformers import pipeline

    with fsspec.open(os.environ["CLAUSE_THRESHOLDS_URI"], "r") as f:
        thresholds = json.load(f)

    test = pd.read_parquet(f"{corpus_uri}/test/{jurisdiction}.parquet")
    tagger = pipeline("token-classification", model=model.path, aggregation_strategy="simple")
    hits = 0
    for text, gold in zip(test["text"], test["clauses"]):
        pred = {p["entity_group"] for p in tagger(text) if p["score"] >= thresholds.get(p["entity_group"], 0.5)}
        hits += len(pred & set(gold))
    recall = hits / max(1, sum(len(g) for g in test["clauses"]))
    print(jurisdiction, "clause recall", recall)
    return recall


@dsl.component(base_image=NLP_IMAGE)
def export_onnx(model: dsl.Input[dsl.Model], release_tag: str):
    import boto3
    from optimum.onnxruntime import ORTModelForTokenClassification

    ort = ORTModelForTokenClassification.from_pretrained(model.path, export=True)
    ort.save_pretrained("/tmp/onnx")
    s3 = boto3.client("s3")
    for name in ("model.onnx", "config.json", "tokenizer.json"):
        s3.upload_file(f"/tmp/onnx/{name}", "lexcorp-models", f"clause-tagger/{release_tag}/{name}")


@dsl.container_component
def notify_legal_ops(release_tag: str):
    return dsl.ContainerSpec(
        image="curlimages/curl:8.8.0",
        command=["sh", "-c"],
        args=[
            'curl -sf -X POST -H "Content-Type: application/json" '
            '-d "{\\"text\\": \\"clause-tagger $0 pipeline finished\\"}" "$TEAMS_WEBHOOK"',
            release_tag,
        ],
    )


@dsl.pipeline(name="contract-clause-extraction")
def clause_pipeline(
    corpus_uri: str = "s3://lexcorp-contracts/cuad/v1",
    jurisdictions: List[str] = ["us-ny", "us-de", "uk-ew"],
    base_model: str = "s3://lexcorp-models/legal-bert-base/2024-11/",
    label_config: str = "s3://lexcorp-ml-config/clauses/label_schema.yaml",
    release_tag: str = "2025.06",
    max_length: int = 512,
):
    notify = notify_legal_ops(release_tag=release_tag)
    kubernetes.use_secret_as_env(
        notify, secret_name="legal-ops-teams", secret_key_to_env={"webhook": "TEAMS_WEBHOOK"}
    )

    with dsl.ExitHandler(notify, name="clause-run"):
        schema = load_label_schema(label_config=label_config)
        tok = tokenize_contracts(corpus_uri=corpus_uri, base_model=base_model, max_length=max_length)
        tok.set_env_variable("HF_DATASETS_CACHE", "/tmp/hf-cache")
        tok.set_cpu_limit("8").set_memory_limit("32G")

        ft = finetune_clause_tagger(
            tokenized=tok.outputs["tokenized"], base_model=base_model, labels=schema.output
        )
        ft.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(2)

        with dsl.ParallelFor(jurisdictions) as juris:
            ev = eval_jurisdiction(jurisdiction=juris, corpus_uri=corpus_uri, model=ft.outputs["model"])
            ev.set_env_variable("CLAUSE_THRESHOLDS_URI", "s3://lexcorp-ml-config/clauses/thresholds.json")

        export_onnx(model=ft.outputs["model"], release_tag=release_tag).after(ev)


if __name__ == "__main__":
    compiler.Compiler().compile(clause_pipeline, __file__.replace(".py", ".yaml"))
