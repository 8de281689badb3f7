# ruff: noqa  (pipeline source in the SDK's own idiom: mutable defaults, typing.List)
"""KFP v2: nested ParallelFor over static strings inside a condition, dsl.If/Else,
an exit handler, f-string URIs from loop items, writes named `output_uri`/`export_dir`.

Compile (kfp 2.x): python kfp2_nested_conditions.py  -> kfp2_nested_conditions.yaml
"""
import os

from kfp import compiler, dsl

IMAGE = 'ghcr.io/example/rec:3.3.0'


@dsl.container_component
def check(table: str, flag: dsl.OutputPath(str)):
    return dsl.ContainerSpec(image=IMAGE, command=['python', '-m', 'rec.check'],
                             args=['--table', table, '--flag', flag])


@dsl.container_component
def train(day_uri: str, output_uri: str):
    return dsl.ContainerSpec(image=IMAGE, command=['python', '-m', 'rec.train'],
                             args=['--events', day_uri, '--model', output_uri])


@dsl.container_component
def backfill(export_dir: str):
    return dsl.ContainerSpec(image=IMAGE, command=['python', '-m', 'rec.backfill'],
                             args=['--events', 's3://example-rec/events/archive/', '--export-dir', export_dir])


@dsl.container_component
def cleanup():
    return dsl.ContainerSpec(image='busybox:1.36', command=['sh', '-c'], args=['echo cleanup'])


@dsl.pipeline(name='rec-daily')
def rec_daily(table: str = 's3://example-rec/events/daily/'):
    bye = cleanup()
    with dsl.ExitHandler(bye):
        c = check(table=table)
        with dsl.If(c.outputs['flag'] == 'fresh'):
            with dsl.ParallelFor(items=['mon', 'tue', 'wed']) as day:
                train(day_uri=f'{table}{day}/', output_uri=f's3://example-rec/models/{day}/')
        with dsl.Else():
            backfill(export_dir='s3://example-rec/backfill/')


if __name__ == '__main__':
    compiler.Compiler().compile(rec_daily, os.path.splitext(__file__)[0] + '.yaml')
