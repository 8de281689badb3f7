# ruff: noqa  (pipeline source in the SDK's own idiom: mutable defaults, typing.List)
"""Argo (Hera): a DAG template looped with `withParam` over a workflow parameter, whose inner
task loops with `withItems`; the container reads a key built from both items.

Generate: python argo_nested_loops.py  -> argo_nested_loops.yaml
"""
import os

from hera.workflows import DAG, Container, Parameter, Workflow

with Workflow(
    generate_name='nested-eval-',
    entrypoint='main',
    arguments=[Parameter(name='models', value='["small", "base"]')],
) as w:
    ev = Container(name='evaluate', image='ghcr.io/example/eval:2.0.0', command=['python', '-m', 'ev'],
                   inputs=[Parameter(name='model'), Parameter(name='task')],
                   args=['--data-path', 's3://example-bench/{{inputs.parameters.task}}/test.jsonl',
                         '--weights', 's3://example-models/{{inputs.parameters.model}}/final/',
                         '--results', 's3://example-bench/results/{{inputs.parameters.model}}-{{inputs.parameters.task}}.json'])
    with DAG(name='per-model', inputs=[Parameter(name='model')]) as per_model:
        ev(name='evaluate', arguments={'model': '{{inputs.parameters.model}}', 'task': '{{item}}'},
           with_items=['boolq', 'piqa'])
    with DAG(name='main'):
        per_model(name='model', arguments={'model': '{{item}}'}, with_param='{{workflow.parameters.models}}')

if __name__ == '__main__':
    with open(os.path.splitext(__file__)[0] + '.yaml', 'w') as f:
        f.write(w.to_yaml())
