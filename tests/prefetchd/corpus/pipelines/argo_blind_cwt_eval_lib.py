# ruff: noqa
"""LLM evaluation building blocks as an Argo ClusterWorkflowTemplate (Hera).

A cluster-wide library (`llm-eval-lib`) that teams call through
`templateRef: {clusterScope: true}`; it is also submittable on its own
(entrypoint `main`: fetch one benchmark, score the base model, publish).

- fetch-benchmark: `aws s3 sync` of a benchmark prefix given as an input
  parameter (default from the workflow parameter), output artifact to the
  default repository (intermediate).
- score: Python script template; the model comes in as an S3 input artifact
  whose default location is the base model (bucket, key, endpoint), the
  benchmark as an intermediate artifact; it also reads a prompt template
  with fsspec from an input parameter.
- publish-scores: `aws s3 cp` upload to a key built from an input parameter.

Generate: python argo_blind_cwt_eval_lib.py  -> argo_blind_cwt_eval_lib.yaml
"""
import os

from hera.workflows import DAG, Artifact, ClusterWorkflowTemplate, Container, Parameter, S3Artifact, Script
from hera.workflows import models as m

AWS = 'amazon/aws-cli:2.15.30'
EVAL = 'ghcr.io/example/llm-eval:2.3.1'

with ClusterWorkflowTemplate(
    name='llm-eval-lib',
    entrypoint='main',
    arguments=[
        Parameter(name='bench-uri', value='s3://example-llm-bench/mmlu/v1/'),
        Parameter(name='run-id', value='adhoc'),
    ],
) as cwt:
    fetch = Container(
        name='fetch-benchmark', image=AWS,
        command=['aws', 's3', 'sync', '--only-show-errors'],
        args=['{{inputs.parameters.bench-uri}}', '/work/bench'],
        inputs=[Parameter(name='bench-uri', value='{{workflow.parameters.bench-uri}}')],
        outputs=[Artifact(name='bench', path='/work/bench')],
        retry_strategy=m.RetryStrategy(limit='3', retry_policy='OnError'),
    )
    score = Script(
        name='score', image=EVAL, command=['python'],
        inputs=[
            Parameter(name='bench-name', value='mmlu'),
            Parameter(name='prompt-template', value='s3://example-llm-bench/prompts/five-shot-v2.jinja'),
            S3Artifact(name='model', path='/model', bucket='example-llm-models',
                       key='llama-3-8b/base/', endpoint='s3.amazonaws.com'),
            Artifact(name='bench', path='/bench'),
        ],
        outputs=[Artifact(name='scores', path='/tmp/scores.json')],
        resources=m.ResourceRequirements(limits={'nvidia.com/gpu': m.Quantity('1')}),
        source=(
            'import json\n'
            'import fsspec\n'
            'from llm_eval import evaluate\n'
            '\n'
            'with fsspec.open("{{inputs.parameters.prompt-template}}", "r") as f:\n'
            '    template = f.read()\n'
            'acc = evaluate(model_dir="/model", bench_dir="/bench", prompt=template)\n'
            'with open("/tmp/scores.json", "w") as f:\n'
            '    json.dump({"bench": "{{inputs.parameters.bench-name}}", "acc": acc}, f)\n'
            'print(acc)\n'
        ),
    )
    publish = Container(
        name='publish-scores', image=AWS, command=['sh', '-c'],
        args=['aws s3 cp /in/scores.json s3://example-llm-bench/results/{{inputs.parameters.run-id}}/{{inputs.parameters.bench-name}}.json'],
        inputs=[Parameter(name='run-id', value='{{workflow.parameters.run-id}}'),
                Parameter(name='bench-name', value='mmlu'),
                Artifact(name='scores', path='/in/scores.json')],
    )
    with DAG(name='main'):
        f = fetch(name='fetch')
        s = score(name='score', arguments=[f.get_artifact('bench').with_name('bench')])
        p = publish(name='publish', arguments=[s.get_artifact('scores').with_name('scores')])
        f >> s >> p

if __name__ == '__main__':
    with open(os.path.splitext(__file__)[0] + '.yaml', 'w') as fh:
        fh.write(cwt.to_yaml())
