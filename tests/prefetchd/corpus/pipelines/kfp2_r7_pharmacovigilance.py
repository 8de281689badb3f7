# ruff: noqa
"""Adverse-drug-event NER from FAERS reports (KFP v2): sh -c aws s3 sync onto an existing PVC,
pandas component reading a MedDRA lookup on S3, HF token-classification CLI, static ParallelFor
over benchmark sets, dsl.If on a parameter, boto3 put_object of a model card."""
from kfp import compiler, dsl, kubernetes
from kfp.dsl import Dataset, Input, Output

BENCHES = [
    {"bench": "cadec", "uri": "s3://acme-pv/bench/cadec/test.jsonl"},
    {"bench": "n2c2", "uri": "s3://acme-pv/bench/n2c2-2018/test.jsonl"},
]


@dsl.container_component
def fetch_faers(faers_root: str):
    return dsl.ContainerSpec(
        image="amazon/aws-cli:2.17.0",
        command=["sh", "-c"],
        args=['set -e\naws s3 sync "$0/ascii/" /data/faers/ascii/ --only-show-errors\n'
              'aws s3 cp "$0/deleted.zip" /data/faers/', faers_root])


@dsl.component(base_image="python:3.11-slim", packages_to_install=["pandas==2.2.2", "s3fs"])
def dedupe_reports(meddra_version: str, reports: Output[Dataset]):
    import glob
    import pandas as pd
    frames = [pd.read_csv(p, sep="$") for p in glob.glob("/data/faers/ascii/REAC*.txt")]
    reac = pd.concat(frames)
    llt = pd.read_csv(f"s3://acme-pv-ref/meddra/{meddra_version}/llt.csv")
    reac = reac.merge(llt, left_on="pt", right_on="llt_name", how="left").drop_duplicates("primaryid")
    reac.to_parquet(reports.path)


@dsl.container_component
def train_ner(base_model: str, reports: Input[Dataset], out_uri: str):
    return dsl.ContainerSpec(
        image="ghcr.io/acme-pv/ade-ner:1.4.0-cu121",
        command=["python", "train_ner.py"],
        args=["--model_name_or_path", base_model,
              "--train_file", reports.path,
              "--num_train_epochs", "4",
              "--output_dir", out_uri])


@dsl.component(base_image="python:3.11-slim", packages_to_install=["s3fs", "transformers==4.44.2", "torch"])
def evaluate(model_uri: str, bench_name: str, bench_uri: str) -> float:
    import json
    import fsspec
    import s3fs
    from transformers import pipeline
    s3fs.S3FileSystem().get(model_uri, "/tmp/model", recursive=True)
    ner = pipeline("token-classification", model="/tmp/model")
    with fsspec.open(bench_uri, "r") as f:
        rows = [json.loads(l) for l in f]
    hits = sum(1 for r in rows if ner(r["text"]))
    return hits / max(len(rows), 1)


@dsl.component(base_image="python:3.11-slim", packages_to_install=["boto3"])
def publish_card(model_uri: str, tag: str):
    import json
    import boto3
    card = {"model": model_uri, "tag": tag, "task": "ade-ner"}
    boto3.client("s3").put_object(Bucket="acme-pv-registry", Key=f"ade-ner/{tag}/card.json",
                                  Body=json.dumps(card).encode())


@dsl.pipeline(name="faers-ade-ner")
def pipeline(faers_root: str = "s3://acme-pv/faers/2024q4",
             meddra_version: str = "27.0",
             base_model: str = "dmis-lab/biobert-base-cased-v1.2",
             out_uri: str = "s3://acme-pv-models/ade-ner/2024q4",
             publish: bool = True,
             tag: str = "2024q4"):
    fetch = fetch_faers(faers_root=faers_root)
    kubernetes.mount_pvc(fetch, pvc_name="pv-scratch", mount_path="/data")
    dd = dedupe_reports(meddra_version=meddra_version).after(fetch)
    kubernetes.mount_pvc(dd, pvc_name="pv-scratch", mount_path="/data")
    tr = train_ner(base_model=base_model, reports=dd.outputs["reports"], out_uri=out_uri)
    tr.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(1)
    with dsl.ParallelFor(BENCHES, parallelism=2) as b:
        ev = evaluate(model_uri=out_uri, bench_name=b.bench, bench_uri=b.uri).after(tr)
    with dsl.If(publish == True):
        publish_card(model_uri=out_uri, tag=tag).after(tr)


if __name__ == "__main__":
    import os
    compiler.Compiler().compile(pipeline, os.path.splitext(__file__)[0] + ".yaml")
