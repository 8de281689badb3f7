# ruff: noqa  (pipeline source in the SDK's own idiom: mutable defaults, typing.List)
"""KFP v1 ContainerOps whose flags name direction (`--data-dir`, `--input-uri`, `--out`,
`--export`, `--output-path=`), an env var read location, and a step that both reads
and writes one URI (unknown).

Compile (kfp 1.8.x): python kfp1_data_flags.py  -> kfp1_data_flags.yaml
"""
import os

import kfp
from kfp import dsl
from kubernetes.client.models import V1EnvVar

IMAGE = 'ghcr.io/example/graph:0.8.0'


@dsl.pipeline(name='graph-embed')
def graph_embed(edges: str = 's3://example-graph/ogbn-products/edges/'):
    a = dsl.ContainerOp(name='partition', image=IMAGE, command=['python', '-m', 'g.partition'],
                        arguments=['--data-dir', edges, '--out', 's3://example-graph/parts/'])
    a.container.add_env_variable(V1EnvVar(name='NODE_FEATURES', value='s3://example-graph/ogbn-products/feat.npy'))
    b = dsl.ContainerOp(name='embed', image=IMAGE, command=['python', '-m', 'g.embed'],
                        arguments=['--input-uri', 's3://example-graph/parts/',
                                   '--export', 's3://example-graph/emb/',
                                   '--output-path=s3://example-graph/emb/meta.json']).after(a)
    dsl.ContainerOp(name='compact', image=IMAGE, command=['python', '-m', 'g.compact'],
                    arguments=['--input', 's3://example-graph/emb/', '--output', 's3://example-graph/emb/']).after(b)


if __name__ == '__main__':
    kfp.compiler.Compiler().compile(graph_embed, os.path.splitext(__file__)[0] + '.yaml')
