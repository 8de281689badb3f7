# ruff: noqa
"""Summarize new appellate court opinions with a legal-tuned LLM; ROUGE against clerk-written syllabi per court."""
from hera.workflows import (DAG, Container, Env, Parameter, Resources, SecretEnv, Workflow, script, models as m)

COURTS = ["scotus", "ca9", "ca2"]


@script(image="ghcr.io/lawsum/tools:0.9.3", inputs=[Parameter(name="month")])
def plan_batches(month: str):
    import json

    import pandas as pd

    manifest = pd.read_csv(f"s3://lawsum-opinions/manifests/{month}.csv")
    batches = sorted(manifest["batch_id"].unique().tolist())
    print(json.dumps(batches))


@script(image="ghcr.io/lawsum/vllm:0.6.3-cu124",
        inputs=[Parameter(name="month"), Parameter(name="batch")],
        resources=Resources(gpus=1, memory_request="48Gi"),
        volume_mounts=[m.VolumeMount(name="models", mount_path="/models", read_only=True)])
def summarize_batch(month: str, batch: str):
    import json

    import pandas as pd
    from vllm import LLM, SamplingParams

    docs = pd.read_json(f"s3://lawsum-opinions/batches/{month}/{batch}.jsonl", lines=True)
    llm = LLM(model="/models/llama-3.1-8b-legal-sft", max_model_len=32768)
    params = SamplingParams(temperature=0.0, max_tokens=768)
    prompts = [f"Summarize the holding and reasoning of this opinion:\n\n{t}" for t in docs["text"]]
    outs = llm.generate(prompts, params)
    docs["summary"] = [o.outputs[0].text for o in outs]
    docs[["opinion_id", "court", "summary"]].to_json(
        f"s3://lawsum-outputs/{month}/summaries/{batch}.jsonl", orient="records", lines=True)


@script(image="ghcr.io/lawsum/tools:0.9.3", inputs=[Parameter(name="month"), Parameter(name="court")])
def rouge_court(month: str, court: str):
    import json

    import pandas as pd
    import s3fs
    from rouge_score import rouge_scorer

    fs = s3fs.S3FileSystem()
    gen = pd.concat(pd.read_json(fs.open(p), lines=True)
                    for p in fs.glob(f"lawsum-outputs/{month}/summaries/*.jsonl"))
    gold = pd.read_json(f"s3://lawsum-eval/syllabi/{court}/{month}.jsonl", lines=True)
    df = gen[gen["court"] == court].merge(gold, on="opinion_id")
    sc = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    r = sum(sc.score(g, s)["rougeL"].fmeasure for g, s in zip(df["syllabus"], df["summary"])) / max(len(df), 1)
    with fs.open(f"lawsum-outputs/{month}/rouge/{court}.json", "w") as f:
        json.dump({"court": court, "rougeL": r, "n": len(df)}, f)


with Workflow(
    generate_name="court-opinion-summaries-",
    entrypoint="main",
    on_exit="notify",
    arguments=[
        Parameter(name="month", value="2025-05"),
        Parameter(name="publish", value="false"),
    ],
    volumes=[m.Volume(name="models", persistent_volume_claim=m.PersistentVolumeClaimVolumeSource(claim_name="lawsum-models"))],
    service_account_name="lawsum-runner",
) as w:
    publish = Container(
        name="publish",
        image="amazon/aws-cli:2.17.0",
        command=["sh", "-c"],
        args=['aws s3 sync "s3://lawsum-outputs/$MONTH/summaries/" "s3://lawsum-public/summaries/$MONTH/" '
              '--acl public-read'],
        env=[Env(name="MONTH", value="{{workflow.parameters.month}}")],
    )
    notify = Container(
        name="notify",
        image="curlimages/curl:8.8.0",
        command=["sh", "-c"],
        args=['curl -s -X POST -d "lawsum {{workflow.name}}: {{workflow.status}}" "$SLACK_HOOK"'],
        env=[SecretEnv(name="SLACK_HOOK", secret_name="lawsum-slack", secret_key="hook")],
    )
    with DAG(name="main"):
        plan = plan_batches(name="plan-batches", arguments={"month": "{{workflow.parameters.month}}"})
        summ = summarize_batch(
            name="summarize",
            arguments={"month": "{{workflow.parameters.month}}", "batch": "{{item}}"},
            with_param=plan.result,
        )
        rouge = rouge_court(
            name="rouge",
            arguments={"month": "{{workflow.parameters.month}}", "court": "{{item}}"},
            with_items=COURTS,
        )
        pub = publish(name="publish-summaries", when="{{workflow.parameters.publish}} == true")
        plan >> summ >> [rouge, pub]

if __name__ == "__main__":
    open(__file__.replace(".py", ".yaml"), "w").write(w.to_yaml())
