# ruff: noqa
"""Earnings-call tone scoring with a finance-tuned encoder (KFP v2)."""
from kfp import compiler, dsl
from kfp.dsl import Dataset, Input, Model, Output

NLP = "ghcr.io/fin-nlp/ec-tools:0.14.2"


@dsl.container_component
def fetch_transcripts(quarter: str, universe: str, calls: Output[Dataset]):
    script = '''set -eu
Q="$0"; UNI="$1"; OUT="$2"
cat > /tmp/fetch.yaml <<EOF
quarter: ${Q}
transcripts_prefix: s3://ec-raw/transcripts/${Q}/
prices: s3://ec-market/eod/${UNI}/${Q}_close.parquet
EOF
python -m ectools.fetch --config /tmp/fetch.yaml --dest "$OUT"
'''
    return dsl.ContainerSpec(image=NLP, command=["sh", "-c"], args=[script, quarter, universe, calls.path])


@dsl.container_component
def segment_calls(calls: Input[Dataset], segments: Output[Dataset], sector_map: str = None):
    return dsl.ContainerSpec(
        image=NLP,
        command=["python", "-m", "ectools.segment"],
        args=["--calls", calls.path, "--segments", segments.path,
              dsl.IfPresentPlaceholder(input_name="sector_map", then=["--sector-map", sector_map]),
              "--speaker-roles", "s3://ec-ref/speaker_roles/roles_v3.json"])


@dsl.component(base_image="ghcr.io/fin-nlp/ec-torch:0.14.2-cu121")
def score_tone(segments: Input[Dataset], encoder: Input[Model], quarter: str, scores: Output[Dataset]) -> float:
    import pandas as pd
    from transformers import pipeline
    clf = pipeline("text-classification", model=encoder.path, device=0, truncation=True)
    seg = pd.read_parquet(segments.path)
    seg["neg"] = [r["score"] if r["label"] == "negative" else 0.0 for r in clf(seg.text.tolist(), batch_size=64)]
    seg.to_parquet(scores.path)
    seg.groupby("ticker").neg.mean().to_csv(f"s3://ec-signals/tone/{quarter}/ticker_neg.csv")
    return float(seg[seg.section == "qa"].neg.mean())


@dsl.container_component
def flag_negative_qa(scores: Input[Dataset], quarter: str):
    return dsl.ContainerSpec(
        image=NLP,
        command=["python", "-m", "ectools.flag"],
        args=["--scores", scores.path,
              "--baseline", dsl.ConcatPlaceholder(["s3://ec-signals/tone/baselines/", quarter, "_sector_mean.parquet"]),
              "--report", dsl.ConcatPlaceholder(["s3://ec-reports/", quarter, "/negative_qa.html"])])


@dsl.container_component
def archive_scores(scores: Input[Dataset], quarter: str):
    return dsl.ContainerSpec(
        image="amazon/aws-cli:2.17.0",
        command=["sh", "-c"],
        args=['aws s3 cp "$0" "s3://ec-archive/tone/$1/scores.parquet"', scores.path, quarter])


@dsl.pipeline(name="earnings-call-tone")
def earnings_calls(quarter: str = "2025Q2",
                   universe: str = "sp500",
                   encoder_uri: str = "s3://ec-models/finbert-tone/v3/",
                   sector_map_uri: str = "s3://ec-ref/gics/sector_map_2025.csv",
                   neg_threshold: float = 0.35):
    enc = dsl.importer(artifact_uri=encoder_uri, artifact_class=Model, reimport=False,
                       metadata={"base": "ProsusAI/finbert", "tuned_on": "fiqa+phrasebank"})
    ft = fetch_transcripts(quarter=quarter, universe=universe).set_env_variable("AWS_REGION", "us-east-1")
    seg = segment_calls(calls=ft.outputs["calls"], sector_map=sector_map_uri).set_caching_options(False)
    sc = score_tone(segments=seg.outputs["segments"], encoder=enc.output, quarter=quarter)
    sc.set_retry(num_retries=2, backoff_duration="60s")
    with dsl.If(sc.outputs["Output"] > neg_threshold, name="negative-qa"):
        flag_negative_qa(scores=sc.outputs["scores"], quarter=quarter)
    with dsl.Else(name="calm"):
        archive_scores(scores=sc.outputs["scores"], quarter=quarter)


if __name__ == "__main__":
    compiler.Compiler().compile(earnings_calls, __file__.replace(".py", ".yaml"))
