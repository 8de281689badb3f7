# ruff: noqa
"""CPC subclass classifier for incoming US pre-grant publications.

Weekly USPTO bulk-data drops are mirrored to a shared corpus volume, tokenised
with the BERT-for-Patents vocabulary and used to fine-tune a multi-label
classifier over ~660 CPC subclasses. The model is pushed to the serving
prefix only when micro-F1 beats the threshold.
"""
from typing import NamedTuple

import kfp
from kfp import dsl, onprem
from kfp.components import InputPath, OutputPath, create_component_from_func
from kubernetes.client import V1EnvVar, V1Toleration

BASE = "ghcr.io/acme-ip/patent-ml:3.2.1"


def download_pgpub(bucket: str, year: str, dest: str) -> int:
    """Mirror the year's PGPUB jsonl.gz shards onto the corpus volume."""
    import os

    import boto3

    s3 = boto3.client("s3")
    prefix = f"uspto/pgpub/{year}/"
    n = 0
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            if not obj["Key"].endswith(".jsonl.gz"):
                continue
            out = os.path.join(dest, year, os.path.basename(obj["Key"]))
            if os.path.exists(out) and os.path.getsize(out) == obj["Size"]:
                continue
            os.makedirs(os.path.dirname(out), exist_ok=True)
            s3.download_file(bucket, obj["Key"], out)
            n += 1
    print(f"downloaded {n} new shards")
    return n


def build_label_map(label_map: OutputPath("JsonObject")):
    """CPC subclass vocabulary from the scheme table the IP-data team publishes."""
    import json
    import os

    import pandas as pd

    scheme = pd.read_csv(os.environ["CPC_SCHEME_URI"], dtype=str)
    subclasses = sorted(scheme.loc[scheme["level"] == "subclass", "symbol"].unique())
    with open(label_map, "w") as f:
        json.dump({s: i for i, s in enumerate(subclasses)}, f)


def tokenize_corpus(corpus_dir: str, year: str, label_map: InputPath("JsonObject"), tokenizer_name: str,
                    max_len: int, out_dir: str) -> int:
    import glob
    import json
    import os

    import datasets
    from transformers import AutoTokenizer

    labels = json.load(open(label_map))
    tok = AutoTokenizer.from_pretrained(tokenizer_name)
    files = sorted(glob.glob(os.path.join(corpus_dir, year, "*.jsonl.gz")))
    ds = datasets.load_dataset("json", data_files=files, split="train")

    def enc(batch):
        text = [f"{t} [SEP] {a} [SEP] {c[:2000]}" for t, a, c in zip(batch["title"], batch["abstract"], batch["claims"])]
        out = tok(text, truncation=True, max_length=max_len)
        out["labels"] = [[1.0 if s in set(x[:4] for x in cpcs) else 0.0 for s in labels] for cpcs in batch["cpc_codes"]]
        return out

    ds = ds.map(enc, batched=True, num_proc=16, remove_columns=ds.column_names)
    ds.save_to_disk(os.path.join(out_dir, year))
    return len(ds)


def finetune(tokenized_dir: str, year: str, base_model: str, label_map: InputPath("JsonObject"), model_uri: str,
             epochs: int) -> NamedTuple("Outputs", [("micro_f1", float)]):
    import json
    import os
    import subprocess
    from collections import namedtuple

    import datasets
    import numpy as np
    from sklearn.metrics import f1_score
    from transformers import AutoModelForSequenceClassification, Trainer, TrainingArguments

    labels = json.load(open(label_map))
    ds = datasets.load_from_disk(os.path.join(tokenized_dir, year)).train_test_split(test_size=0.02, seed=7)
    model = AutoModelForSequenceClassification.from_pretrained(
        base_model, num_labels=len(labels), problem_type="multi_label_classification")
    args = TrainingArguments(output_dir="/tmp/cpc", per_device_train_batch_size=32, num_train_epochs=epochs,
                             bf16=True, learning_rate=3e-5, save_strategy="no", report_to=["mlflow"])
    trainer = Trainer(model=model, args=args, train_dataset=ds["train"], eval_dataset=ds["test"])
    trainer.train()
    logits = trainer.predict(ds["test"]).predictions
    f1 = f1_score(np.array(ds["test"]["labels"]), (logits > 0).astype(int), average="micro")
    trainer.save_model("/tmp/cpc/final")
    subprocess.run(["aws", "s3", "sync", "/tmp/cpc/final", model_uri, "--only-show-errors"], check=True)
    return namedtuple("Outputs", ["micro_f1"])(float(f1))


def promote(model_uri: str, serving_uri: str, micro_f1: float):
    import subprocess

    subprocess.run(["aws", "s3", "sync", model_uri, serving_uri, "--delete", "--only-show-errors"], check=True)
    print(f"promoted {model_uri} -> {serving_uri} (micro-F1 {micro_f1:.4f})")


download_op = create_component_from_func(download_pgpub, base_image=BASE)
label_map_op = create_component_from_func(build_label_map, base_image=BASE)
tokenize_op = create_component_from_func(tokenize_corpus, base_image=BASE)
finetune_op = create_component_from_func(finetune, base_image=BASE)
promote_op = create_component_from_func(promote, base_image=BASE)


@dsl.pipeline(name="cpc-subclass-classifier", description="Weekly CPC subclass classifier refresh")
def cpc_subclass_classifier(
    raw_bucket: str = "acme-ip-data",
    year: str = "2024",
    base_model: str = "anferico/bert-for-patents",
    model_uri: str = "s3://acme-ip-models/cpc-bert/2024/",
    f1_threshold: float = 0.62,
    epochs: int = 2,
):
    corpus = onprem.mount_pvc("patent-corpus", "corpus", "/mnt/corpus")

    dl = download_op(bucket=raw_bucket, year=year, dest="/mnt/corpus/pgpub").apply(corpus)
    dl.set_retry(3)

    labels = label_map_op()
    labels.container.add_env_variable(V1EnvVar(name="CPC_SCHEME_URI", value="s3://acme-ip-ref/cpc/2025.01/cpc-scheme.csv"))

    tok = tokenize_op(
        corpus_dir="/mnt/corpus/pgpub",
        year=year,
        label_map=labels.outputs["label_map"],
        tokenizer_name=base_model,
        max_len=512,
        out_dir="/mnt/corpus/tokenized",
    ).apply(corpus).after(dl)
    tok.set_cpu_limit("16").set_memory_limit("64G")

    ft = finetune_op(
        tokenized_dir="/mnt/corpus/tokenized",
        year=year,
        base_model=base_model,
        label_map=labels.outputs["label_map"],
        model_uri=model_uri,
        epochs=epochs,
    ).apply(corpus).after(tok)
    ft.set_gpu_limit(4)
    ft.add_toleration(V1Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"))

    with dsl.Condition(ft.outputs["micro_f1"] > f1_threshold, name="f1-gate"):
        promote_op(model_uri=model_uri, serving_uri="s3://acme-ip-models/cpc-bert/serving/current/",
                   micro_f1=ft.outputs["micro_f1"])


if __name__ == "__main__":
    kfp.compiler.Compiler().compile(cpc_subclass_classifier, __file__.replace(".py", ".yaml"))
