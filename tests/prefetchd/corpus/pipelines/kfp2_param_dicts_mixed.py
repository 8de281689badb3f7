# ruff: noqa  (pipeline source in the SDK's own idiom: mutable defaults, typing.List)
"""KFP v2: ParallelFor over a list-of-dicts pipeline parameter read through fields, and a
lightweight component that reads and rewrites the same location (mixed evidence: unknown).

Compile (kfp 2.x): python kfp2_param_dicts_mixed.py  -> kfp2_param_dicts_mixed.yaml
"""
import os
from typing import Dict, List

from kfp import compiler, dsl


@dsl.component(base_image='python:3.11-slim', packages_to_install=['s3fs'])
def resize(src_uri: str, size: int, data_out: str):
    import fsspec
    with fsspec.open(src_uri, 'rb') as f:
        n = len(f.read())
    with fsspec.open(data_out, 'wb') as g:
        g.write(b'x' * (n % size))


@dsl.component(base_image='python:3.11-slim', packages_to_install=['s3fs'])
def bump_manifest(manifest: str):
    import json
    import fsspec
    with fsspec.open(manifest, 'r') as f:
        m = json.load(f)
    m['n'] = m.get('n', 0) + 1
    with fsspec.open(manifest, 'w') as f:
        json.dump(m, f)


@dsl.pipeline(name='thumbs')
def thumbs(sets: List[Dict[str, str]] = [
    {'src': 's3://example-img/products/a.tar', 'dst': 's3://example-img/thumbs/a.tar'},
    {'src': 's3://example-img/products/b.tar', 'dst': 's3://example-img/thumbs/b.tar'},
]):
    with dsl.ParallelFor(items=sets) as s:
        r = resize(src_uri=s.src, size=256, data_out=s.dst)
    bump_manifest(manifest='s3://example-img/thumbs/manifest.json').after(r)


if __name__ == '__main__':
    compiler.Compiler().compile(thumbs, os.path.splitext(__file__)[0] + '.yaml')
