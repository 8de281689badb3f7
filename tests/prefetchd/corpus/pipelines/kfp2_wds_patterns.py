# ruff: noqa  (pipeline source in the SDK's own idiom: mutable defaults, typing.List)
"""KFP v2 container components reading WebDataset shard patterns and globs, one built
from a pipeline parameter; the checkpoint location is a write (`--output-dir`).

Compile (kfp 2.x): python kfp2_wds_patterns.py  -> kfp2_wds_patterns.yaml
"""
import os

from kfp import compiler, dsl

IMAGE = 'ghcr.io/example/clip-train:2.2.0'


@dsl.container_component
def clip_train(shards: str, val: str):
    return dsl.ContainerSpec(image=IMAGE, command=['python', '-m', 'clip.train'],
                             args=['--train-data', shards, '--val-data', val,
                                   '--output-dir', 's3://example-ckpt/clip/run1/'])


@dsl.container_component
def tokenize(glob: str):
    return dsl.ContainerSpec(image=IMAGE, command=['sh', '-c'],
                             args=['python -m clip.tok --files "$0" --out /tmp/tok', glob])


@dsl.pipeline(name='clip-wds')
def clip_wds(root: str = 's3://example-wds/cc12m'):
    tok = tokenize(glob='s3://example-wds/captions/*.jsonl')
    clip_train(shards=f'{root}/{{00000..02047}}.tar',
               val='s3://example-wds/cc3m/val-{a,b,c}.tar').after(tok)


if __name__ == '__main__':
    compiler.Compiler().compile(clip_wds, os.path.splitext(__file__)[0] + '.yaml')
