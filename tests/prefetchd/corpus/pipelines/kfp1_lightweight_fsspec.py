# ruff: noqa  (pipeline source in the SDK's own idiom: mutable defaults, typing.List)
"""KFP v1 lightweight components whose code says which argument is read and which written
(fsspec open rb/wb, subprocess with --from/--to), with neutral parameter names.

Compile (kfp 1.8.x): python kfp1_lightweight_fsspec.py  -> kfp1_lightweight_fsspec.yaml
"""
import os

import kfp
from kfp import dsl
from kfp.components import create_component_from_func


def convert(first: str, second: str):
    import fsspec
    with fsspec.open(first, 'rb') as f:
        data = f.read()
    with fsspec.open(second, mode='wb') as g:
        g.write(data.upper())


def mirror(left: str, right: str):
    import subprocess
    subprocess.run(['datasync', '--from', left, '--to', right], check=True)


convert_op = create_component_from_func(convert, base_image='python:3.11-slim', packages_to_install=['s3fs'])
mirror_op = create_component_from_func(mirror, base_image='ghcr.io/example/datasync:1.1.0')


@dsl.pipeline(name='csv-convert')
def csv_convert(source_csv: str = 's3://example-tab/raw/customers.csv'):
    c = convert_op(first=source_csv, second='s3://example-tab/clean/customers.csv')
    mirror_op(left='s3://example-tab/clean/', right='s3://example-tab-dr/clean/').after(c)


if __name__ == '__main__':
    kfp.compiler.Compiler().compile(csv_convert, os.path.splitext(__file__)[0] + '.yaml')
