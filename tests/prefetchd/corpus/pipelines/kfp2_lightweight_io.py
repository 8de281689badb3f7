# ruff: noqa  (pipeline source in the SDK's own idiom: mutable defaults, typing.List)
"""KFP v2 lightweight components (@dsl.component) whose code decides direction:
boto3 download_file/upload_file, fsspec open rb/wb, subprocess with --from/--to,
and KFP parameters named `dst`, `model_out`.

Compile (kfp 2.x): python kfp2_lightweight_io.py  -> kfp2_lightweight_io.yaml
"""
import os

from kfp import compiler, dsl


@dsl.component(base_image='python:3.11-slim', packages_to_install=['boto3'])
def fetch_vocab(x: str, y: str):
    import boto3
    from urllib.parse import urlparse
    s3 = boto3.client('s3')
    u = urlparse(x)
    s3.download_file(Bucket=u.netloc, Key=u.path.lstrip('/'), Filename='/tmp/vocab.txt')
    v = urlparse(y)
    s3.upload_file('/tmp/vocab.txt', v.netloc, v.path.lstrip('/'))


@dsl.component(base_image='python:3.11-slim', packages_to_install=['s3fs'])
def train_lm(corpus: str, model_out: str, epochs: int = 2):
    import fsspec
    with fsspec.open(corpus, 'rb') as f:
        n = len(f.read())
    with fsspec.open(model_out + '/weights.bin', 'wb') as g:
        g.write(b'0' * (n % 7))


@dsl.component(base_image='ghcr.io/example/datasync:1.1.0')
def sync(p: str, q: str):
    import subprocess
    subprocess.check_call(['datasync', '--from', p, '--to', q])


@dsl.component(base_image='amazon/aws-cli:2.15.30')
def archive(src: str, dst: str):
    import subprocess
    subprocess.check_call(['aws', 's3', 'cp', src, dst])


@dsl.pipeline(name='tiny-lm')
def tiny_lm(corpus: str = 's3://example-lm/tinystories/train.txt'):
    v = fetch_vocab(x='s3://example-lm/vocab/bpe-32k.txt', y='s3://example-lm/runs/vocab.txt')
    t = train_lm(corpus=corpus, model_out='s3://example-lm/runs/model').after(v)
    s = sync(p='s3://example-lm/runs/model', q='s3://example-lm-dr/runs/model').after(t)
    archive(src='s3://example-lm/eval/held-out.txt', dst='s3://example-lm-archive/held-out.txt').after(s)


if __name__ == '__main__':
    compiler.Compiler().compile(tiny_lm, os.path.splitext(__file__)[0] + '.yaml')
