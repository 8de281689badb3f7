# ruff: noqa  (pipeline source in the SDK's own idiom: mutable defaults, typing.List)
"""Shard scoring with `withParam` over a literal JSON list and over a workflow
parameter whose default is a JSON list (Hera, steps).

Generate: python argo_withparam_literal.py  -> argo_withparam_literal.yaml
"""
import os

from hera.workflows import Container, Parameter, Steps, Workflow

IMAGE = 'ghcr.io/example/scorer:1.4.0'

with Workflow(
    generate_name='score-shards-',
    entrypoint='main',
    arguments=[Parameter(name='regions', value='["eu-west-1", "us-east-1"]')],
) as w:
    score = Container(
        name='score', image=IMAGE, command=['python', '-m', 'score'],
        inputs=[Parameter(name='shard')],
        args=['--data', 's3://example-logs/clicks/{{inputs.parameters.shard}}/',
              '--out', 's3://example-logs/scores/{{inputs.parameters.shard}}/'],
    )
    region = Container(
        name='region-report', image=IMAGE, command=['python', '-m', 'report'],
        inputs=[Parameter(name='region')],
        args=['--input-prefix', 's3://example-logs/by-region/{{inputs.parameters.region}}/'],
    )
    with Steps(name='main'):
        score(name='score', with_param='["2024-01", "2024-02", "2024-03"]',
              arguments={'shard': '{{item}}'})
        region(name='report', with_param='{{workflow.parameters.regions}}',
               arguments={'region': '{{item}}'})

if __name__ == '__main__':
    with open(os.path.splitext(__file__)[0] + '.yaml', 'w') as f:
        f.write(w.to_yaml())
