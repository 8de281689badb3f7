# ruff: noqa  (pipeline source in the SDK's own idiom: mutable defaults, typing.List)
"""KFP v2: a static ParallelFor nested in a ParallelFor over a list parameter; the inner
task reads a location built from both items (one read per pair).

Compile (kfp 2.x): python kfp2_nested_loops.py  -> kfp2_nested_loops.yaml
"""
import os
from typing import List

from kfp import compiler, dsl


@dsl.container_component
def aggregate(logs: str):
    return dsl.ContainerSpec(image='ghcr.io/example/logagg:0.5.0', command=['python', '-m', 'agg'],
                             args=['--input', logs, '--output', '/tmp/agg'])


@dsl.pipeline(name='log-aggregate')
def log_aggregate(regions: List[str] = ['eu-west-1', 'us-east-1']):
    with dsl.ParallelFor(regions) as region:
        with dsl.ParallelFor(['web', 'api', 'batch']) as svc:
            aggregate(logs=f's3://example-logs/{region}/{svc}/')


if __name__ == '__main__':
    compiler.Compiler().compile(log_aggregate, os.path.splitext(__file__)[0] + '.yaml')
