# ruff: noqa
"""Quarterly credit-portfolio stress test over macro scenarios (KFP v1).

The loan book snapshot is loaded once, each macro scenario (static dicts with
the scenario file URI) is run in parallel, results are aggregated, and a
regulatory escalation runs only in regulatory mode AND when a capital breach
is found; the regulator filing runs after the escalation; archive-logs is the
exit handler.

Compile: python kfp1_b40_credit_stress.py -> kfp1_b40_credit_stress.yaml
"""
import os

import kfp
from kfp import dsl

IMAGE = 'ghcr.io/example/credit-stress:1.9.0'

SCENARIOS = [
    {'scenario': 'baseline', 'macro_uri': 's3://example-credit/macro/2024q2/baseline.csv'},
    {'scenario': 'adverse', 'macro_uri': 's3://example-credit/macro/2024q2/adverse.csv'},
    {'scenario': 'severely-adverse', 'macro_uri': 's3://example-credit/macro/2024q2/severely_adverse.csv'},
]


@dsl.pipeline(name='credit-stress-test', description='CCAR-style stress test')
def stress_pipeline(portfolio_root: str = 's3://example-credit/portfolio',
                    snapshot: str = '2024-06-30', mode: str = 'regulatory'):
    with dsl.ExitHandler(dsl.ContainerOp(
            name='archive-logs', image='amazon/aws-cli:2.15.30',
            command=['aws', 's3', 'cp', '--recursive', '/var/log/stress', 's3://example-credit/logs/stress/'])):
        load = dsl.ContainerOp(
            name='load-portfolio', image=IMAGE,
            command=['python', '-m', 'stress.load'],
            arguments=['--loans', f'{portfolio_root}/{snapshot}/loans.parquet', '--out', '/tmp/book.parquet'],
            file_outputs={'book': '/tmp/book.parquet'})
        with dsl.ParallelFor(SCENARIOS) as sc:
            run = dsl.ContainerOp(
                name='run-scenario', image=IMAGE,
                command=['python', '-m', 'stress.run'],
                arguments=['--book', load.outputs['book'], '--macro', sc.macro_uri, '--name', sc.scenario],
                file_outputs={'loss': '/tmp/loss.json'})
            run.container.add_env_variable(
                kfp.dsl._container_op.V1EnvVar(name='PD_CURVES_URI', value='s3://example-credit/models/pd-curves/v12/'))
        agg = dsl.ContainerOp(
            name='aggregate', image=IMAGE, command=['python', '-m', 'stress.aggregate'],
            arguments=['--results', '/tmp/losses'], file_outputs={'status': '/tmp/status.txt'}).after(run)
        with dsl.Condition(mode == 'regulatory'):
            with dsl.Condition(agg.outputs['status'] == 'breach'):
                esc = dsl.ContainerOp(
                    name='escalate', image='curlimages/curl:8.8.0',
                    command=['curl', '-X', 'POST', 'https://risk.example.com/api/escalations'])
        dsl.ContainerOp(
            name='file-report', image=IMAGE, command=['python', '-m', 'stress.report'],
            arguments=['--out', f's3://example-credit/reports/{snapshot}/']).after(esc)


if __name__ == '__main__':
    kfp.compiler.Compiler().compile(stress_pipeline, os.path.splitext(__file__)[0] + '.yaml')
