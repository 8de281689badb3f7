# ruff: noqa
"""LLM eval harness: importer for the checkpoint, static loop over benchmark tasks
(HF load_dataset json data_files), DuckDB contamination scan, If/Else judge choice,
ExitHandler with a notifier."""
import os

from kfp import compiler, dsl

HARNESS = 'ghcr.io/acme-llm/eval-harness:0.4.3'
TASKS = ['mmlu', 'gsm8k', 'arc_challenge']


@dsl.component(base_image=HARNESS)
def run_task(model: dsl.Input[dsl.Model], task: str, evalsets: str, results: dsl.Output[dsl.Metrics]):
    import json
    from datasets import load_dataset
    ds = load_dataset('json', data_files=f'{evalsets}/{task}/test.jsonl', split='train')
    acc = len(ds) / (len(ds) + 1)
    results.log_metric(task, acc)


@dsl.component(base_image=HARNESS, packages_to_install=['duckdb==1.1.3'])
def contamination_scan(index_glob: str, evalsets: str) -> float:
    import duckdb
    con = duckdb.connect()
    con.execute("INSTALL httpfs; LOAD httpfs;")
    n = con.execute(
        f"SELECT count(*) FROM read_parquet('{index_glob}') AS p "
        f"JOIN read_json_auto('{evalsets}/mmlu/test.jsonl') AS q ON p.hash = md5(q.question)"
    ).fetchone()[0]
    return float(n)


@dsl.container_component
def judge_api(model: dsl.Input[dsl.Model], prompts: str):
    return dsl.ContainerSpec(image=HARNESS, command=['python', '-m', 'harness.judge'],
                             args=['--backend', 'openai', '--prompts', prompts,
                                   '--candidate', model.uri])


@dsl.container_component
def judge_local(model: dsl.Input[dsl.Model], prompts: str, judge_weights: str):
    return dsl.ContainerSpec(image=HARNESS, command=['python', '-m', 'harness.judge'],
                             args=['--backend', 'vllm', '--prompts', prompts,
                                   '--judge-weights', judge_weights,
                                   '--candidate', model.uri])


@dsl.container_component
def write_report(report_uri: str):
    return dsl.ContainerSpec(image=HARNESS, command=['python', '-m', 'harness.report'],
                             args=['--report-uri', report_uri])


@dsl.container_component
def notify(channel: str):
    return dsl.ContainerSpec(image='curlimages/curl:8.10.1', command=['sh', '-c'],
                             args=['curl -s -X POST "$SLACK_HOOK" -d "{\\"text\\": \\"eval done $0\\"}"', channel])


@dsl.pipeline(name='llm-eval-harness')
def harness(ckpt_uri: str = 's3://acme-llm/ckpts/llama3-8b-sft/step-12000/',
            evalsets: str = 's3://acme-llm/evalsets/v7',
            index_glob: str = 's3://acme-llm/pretrain-dedup/minhash/*.parquet',
            prompts: str = 's3://acme-llm/evalsets/v7/mt-bench/questions.jsonl',
            judge: str = 'api',
            report_uri: str = 's3://acme-llm-reports/llama3-8b-sft/step-12000/report.html'):
    n = notify(channel='#llm-eval')
    with dsl.ExitHandler(n):
        imp = dsl.importer(artifact_uri=ckpt_uri, artifact_class=dsl.Model, reimport=False)
        cs = contamination_scan(index_glob=index_glob, evalsets=evalsets)
        with dsl.ParallelFor(items=TASKS) as t:
            rt = run_task(model=imp.output, task=t, evalsets=evalsets).after(cs)
        with dsl.If(judge == 'api'):
            judge_api(model=imp.output, prompts=prompts)
        with dsl.Else():
            judge_local(model=imp.output, prompts=prompts,
                        judge_weights='s3://acme-llm/judges/prometheus-2-7b/')
        write_report(report_uri=report_uri).after(rt)


if __name__ == '__main__':
    compiler.Compiler().compile(harness, os.path.splitext(__file__)[0] + '.yaml')
