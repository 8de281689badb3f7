# ruff: noqa  (pipeline source in the SDK's own idiom: mutable defaults, typing.List)
"""WebDataset training over shard patterns, as an Argo DAG (Hera).

Brace ranges (`{000000..001023}`), brace lists (`{a,b,c}`), a glob in a
script's source, a numeric range too large to ever expand, and an eval step
whose `--output` is a write. A sequence loop (`withSequence`) evaluates checkpoints.

Generate: python argo_wds_shards.py  -> argo_wds_shards.yaml
"""
import os

from hera.workflows import DAG, Container, Parameter, Script, Workflow
from hera.workflows import models as m

IMAGE = 'ghcr.io/example/wds-train:1.0.0'

with Workflow(
    generate_name='wds-train-',
    entrypoint='main',
    arguments=[Parameter(name='shards', value='s3://example-wds/laion-a/train-{000000..001023}.tar')],
) as w:
    train = Container(
        name='train', image=IMAGE, command=['torchrun', '--nproc-per-node', '8', 'train.py'],
        args=['--train-shards', '{{workflow.parameters.shards}}',
              '--val-shards', 's3://example-wds/laion-a/val-{000000..000015}.tar',
              '--checkpoint-dir', 's3://example-ckpt/laion-a/'],
    )
    evalc = Container(
        name='eval', image=IMAGE, command=['python', 'eval.py'],
        inputs=[Parameter(name='i')],
        args=['--shards', 's3://example-wds/benchmarks/{imagenet,cifar100,food101}-test.tar',
              '--output', 's3://example-ckpt/laion-a/eval-{{inputs.parameters.i}}.json'],
    )
    stats = Script(
        name='stats', image='python:3.11-slim', command=['python'],
        source=('import fsspec\n'
                'fs = fsspec.filesystem("s3")\n'
                'for p in fs.glob("s3://example-wds/laion-a/meta/part-??.parquet"):\n'
                '    print(p)\n'),
    )
    huge = Container(
        name='huge-scan', image=IMAGE, command=['python', 'scan.py'],
        args=['--input', 's3://example-wds/raw/{0..99999999}.jpg'],
    )
    with DAG(name='main'):
        t = train(name='train')
        e = evalc(name='eval', with_sequence=m.Sequence(count='3'), arguments={'i': '{{item}}'})
        s = stats(name='stats')
        h = huge(name='huge-scan')
        t >> e
        s >> t

if __name__ == '__main__':
    with open(os.path.splitext(__file__)[0] + '.yaml', 'w') as f:
        f.write(w.to_yaml())
