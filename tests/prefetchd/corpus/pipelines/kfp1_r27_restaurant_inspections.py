# ruff: noqa
"""Severity classifier for restaurant inspection narratives: prepare text, fine-tune a small encoder, batch-predict new months."""
import kfp
from kfp import dsl
from kfp.components import create_component_from_func
from kubernetes.client import V1EnvVar

MONTHS = ["2025-01", "2025-02", "2025-03"]


def prepare_text(city: str, year: str, label_map_uri: str, val_frac: float = 0.1) -> int:
    import json

    import fsspec
    import pandas as pd

    raw_uri = f"s3://inspect-nlp-data/raw/{city}/inspections_{year}.csv"
    df = pd.read_csv(raw_uri, usecols=["inspection_id", "violations", "results", "risk"])
    with fsspec.open(label_map_uri, "r") as f:
        label_map = json.load(f)
    df = df.dropna(subset=["violations"])
    df["label"] = df["results"].map(label_map).fillna(0).astype(int)
    df = df.rename(columns={"violations": "text"})[["inspection_id", "text", "label"]]

    val = df.sample(frac=val_frac, random_state=7)
    train = df.drop(val.index)
    out = f"s3://inspect-nlp-data/prepared/{city}/{year}"
    train.to_json(f"{out}/train.jsonl", orient="records", lines=True)
    val.to_json(f"{out}/val.jsonl", orient="records", lines=True)
    return len(train)


def predict_month(city: str, year: str, month: str):
    import pandas as pd
    import s3fs
    from transformers import pipeline

    fs = s3fs.S3FileSystem()
    fs.get(f"inspect-nlp-models/severity/{city}-{year}/", "/tmp/model/", recursive=True)
    clf = pipeline("text-classification", model="/tmp/model", device=0, truncation=True)

    df = pd.read_parquet(f"s3://inspect-nlp-data/incoming/{city}/month={month}/")
    preds = clf(df["violations"].fillna("").tolist(), batch_size=64)
    df["severity"] = [p["label"] for p in preds]
    df["score"] = [p["score"] for p in preds]
    df[["inspection_id", "severity", "score"]].to_parquet(
        f"s3://inspect-nlp-data/predictions/{city}/month={month}/part-0.parquet", index=False)


prepare_op = create_component_from_func(prepare_text, base_image="ghcr.io/civic-ml/nlp:2025.02")
predict_op = create_component_from_func(predict_month, base_image="ghcr.io/civic-ml/nlp:2025.02")

FINETUNE_SH = r'''set -euo pipefail
mkdir -p /scratch/base /scratch/out
aws s3 sync "$BASE_MODEL" /scratch/base/ --only-show-errors
python -m civic_nlp.train_classifier \
  --model_name_or_path /scratch/base \
  --train_file "s3://inspect-nlp-data/prepared/${CITY}/${YEAR}/train.jsonl" \
  --validation_file "s3://inspect-nlp-data/prepared/${CITY}/${YEAR}/val.jsonl" \
  --num_train_epochs 4 --per_device_train_batch_size 32 \
  --output_dir /scratch/out
aws s3 sync /scratch/out/ "s3://inspect-nlp-models/severity/${CITY}-${YEAR}/" --exclude "checkpoint-*"
'''


@dsl.pipeline(name="restaurant-inspection-severity")
def inspections(city: str = "chicago",
                year: str = "2024",
                base_model: str = "s3://inspect-nlp-models/hf/distilroberta-base/",
                label_map_uri: str = "s3://inspect-nlp-data/ref/label_map_v2.json",
                publish: str = "true"):
    prep = prepare_op(city=city, year=year, label_map_uri=label_map_uri)

    ft = dsl.ContainerOp(
        name="finetune",
        image="ghcr.io/civic-ml/nlp:2025.02",
        command=["bash", "-c", FINETUNE_SH],
        pvolumes={"/scratch": dsl.PipelineVolume(pvc="inspect-nlp-scratch")},
    ).after(prep)
    ft.container.add_env_variable(V1EnvVar(name="BASE_MODEL", value=str(base_model)))
    ft.container.add_env_variable(V1EnvVar(name="CITY", value=str(city)))
    ft.container.add_env_variable(V1EnvVar(name="YEAR", value=str(year)))
    ft.set_gpu_limit(1)

    with dsl.ParallelFor(MONTHS) as month:
        pred = predict_op(city=city, year=year, month=month).after(ft)
        pred.set_gpu_limit(1)

    with dsl.Condition(publish == "true"):
        dsl.ContainerOp(
            name="publish-dashboard",
            image="amazon/aws-cli:2.17.0",
            command=["sh", "-c"],
            arguments=[f'aws s3 sync "s3://inspect-nlp-data/predictions/{city}/" '
                       f'"s3://city-dashboards/inspections/severity/{city}/" --delete'],
        ).after(pred)


if __name__ == "__main__":
    kfp.compiler.Compiler().compile(inspections, __file__.replace(".py", ".yaml"))
