# ruff: noqa  (pipeline source in the SDK's own idiom: mutable defaults, typing.List)
"""Per-language tokenisation fan-out as an Argo Workflow DAG (Hera).

`withItems` over literal strings whose template builds the S3 key from its
input parameter, `withItems` over dicts read through `{{item.field}}`, and a
merge step that writes with `aws s3 cp` (local -> S3).

Generate: python argo_withitems_langs.py  -> argo_withitems_langs.yaml
"""
import os

from hera.workflows import DAG, Container, Parameter, Workflow

IMAGE = 'ghcr.io/example/tokenize:2.3.0'

with Workflow(
    generate_name='tokenize-langs-',
    entrypoint='main',
    arguments=[Parameter(name='root', value='s3://example-text/cc100')],
) as w:
    tok = Container(
        name='tokenize', image=IMAGE, command=['python', '-m', 'tok'],
        inputs=[Parameter(name='lang')],
        args=['--input', '{{workflow.parameters.root}}/part-{{inputs.parameters.lang}}.parquet',
              '--output', 's3://example-text/tokens/{{inputs.parameters.lang}}/'],
    )
    vocab = Container(
        name='vocab', image=IMAGE, command=['python', '-m', 'vocab'],
        inputs=[Parameter(name='uri'), Parameter(name='size')],
        args=['--data', '{{inputs.parameters.uri}}', '--size', '{{inputs.parameters.size}}',
              '--save-dir', '/tmp/vocab'],
    )
    merge = Container(
        name='merge', image='amazon/aws-cli:2.15.30', command=['sh', '-c'],
        args=['python -m merge /tmp/merged && aws s3 cp --recursive /tmp/merged s3://example-text/merged/'],
    )
    with DAG(name='main'):
        t = tok(name='tokenize', with_items=['en', 'de', 'fr'], arguments={'lang': '{{item}}'})
        v = vocab(name='vocab', with_items=[{'uri': 's3://example-text/wiki/en/', 'size': '32000'},
                                            {'uri': 's3://example-text/wiki/de/', 'size': '16000'}],
                  arguments={'uri': '{{item.uri}}', 'size': '{{item.size}}'})
        m = merge(name='merge')
        [t, v] >> m

if __name__ == '__main__':
    with open(os.path.splitext(__file__)[0] + '.yaml', 'w') as f:
        f.write(w.to_yaml())
