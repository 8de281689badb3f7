"""Conformer ASR training on LibriSpeech-style data spread over several S3 stores (KFP v2).

How the datasets are named here:
- fetch-lm-text downloads LM text from a plain web server (openslr.org): not an object store.
- fetch-lexicon reads a public object through a virtual-hosted-style https URL of S3
  (https://asr-lexicons.s3.us-east-1.amazonaws.com/...).
- build-manifest gets bucket and key as two parameters and joins them in code
  (f"s3://{bucket}/{key}"); it lists/reads the prefix and writes a manifest object to S3.
- sample-noise globs s3://augment/musan/noise/**/*.wav on an in-cluster MinIO whose endpoint
  comes from the S3_ENDPOINT env var (fsspec client_kwargs endpoint_url).
- train-conformer streams WebDataset shards given as a brace-expanded `pipe:aws s3 cp ... -`
  URL and reads the manifest written by build-manifest (durations only; audio comes from shards).
- eval-dev reads a prefix given without trailing slash; eval-test joins the bucket with each
  loop item via os.path.join (one key has a space).

Compile: python kfp2_b64_asr_conformer.py  -> kfp2_b64_asr_conformer.yaml
"""
# ruff: noqa
import os
from typing import List

from kfp import compiler, dsl
from kfp.dsl import Artifact, Dataset, Input, Model, Output

IMAGE = 'ghcr.io/example/asr-conformer:2.1.0'


@dsl.component(base_image=IMAGE)
def fetch_lm_text(url: str, text: Output[Dataset]):
    import urllib.request
    urllib.request.urlretrieve(url, text.path)


@dsl.component(base_image=IMAGE)
def fetch_lexicon(lexicon_url: str, lexicon: Output[Artifact]):
    import urllib.request
    # public-read object, virtual-hosted-style S3 URL
    urllib.request.urlretrieve(lexicon_url, lexicon.path)


@dsl.component(base_image=IMAGE)
def train_tokenizer(text: Input[Dataset], lexicon: Input[Artifact], vocab_size: int, tokenizer: Output[Model]):
    import subprocess
    subprocess.run(['python', '-m', 'asr.tokenizer', '--text', text.path, '--lexicon', lexicon.path,
                    '--vocab-size', str(vocab_size), '--out', tokenizer.path], check=True)


@dsl.component(base_image=IMAGE)
def build_manifest(corpus_bucket: str, corpus_key: str, manifest_uri: str):
    import json
    import boto3
    src = f"s3://{corpus_bucket}/{corpus_key}"
    s3 = boto3.client('s3')
    rows = []
    for page in s3.get_paginator('list_objects_v2').paginate(Bucket=corpus_bucket, Prefix=corpus_key):
        for obj in page.get('Contents', []):
            if obj['Key'].endswith('.trans.txt'):
                body = s3.get_object(Bucket=corpus_bucket, Key=obj['Key'])['Body'].read().decode()
                for line in body.splitlines():
                    utt, text = line.split(' ', 1)
                    rows.append({'utt': utt, 'text': text})
    mb, mk = manifest_uri[len('s3://'):].split('/', 1)
    s3.put_object(Bucket=mb, Key=mk, Body='\n'.join(json.dumps(r) for r in rows).encode())
    print('indexed', src, '->', manifest_uri)


@dsl.component(base_image=IMAGE)
def sample_noise(noise_glob: str, n_clips: int, noise: Output[Dataset]):
    import os
    import random
    import s3fs
    fs = s3fs.S3FileSystem(client_kwargs={'endpoint_url': os.environ['S3_ENDPOINT']})
    clips = sorted(fs.glob(noise_glob))
    random.Random(0).shuffle(clips)
    os.makedirs(noise.path, exist_ok=True)
    for c in clips[:n_clips]:
        fs.get(c, os.path.join(noise.path, os.path.basename(c)))


@dsl.container_component
def train_conformer(shards: str, manifest_uri: str, tokenizer: Input[Model], noise: Input[Dataset],
                    epochs: int, model: Output[Model]):
    return dsl.ContainerSpec(
        image=IMAGE, command=['python', '-m', 'asr.train'],
        args=['--shards', shards, '--manifest', manifest_uri, '--tokenizer', tokenizer.path,
              '--noise-dir', noise.path, '--epochs', epochs, '--out', model.path])


@dsl.component(base_image=IMAGE)
def eval_dev(model: Input[Model], tokenizer: Input[Model], dev_prefix: str) -> float:
    import subprocess
    out = subprocess.run(['python', '-m', 'asr.eval', '--model', model.path, '--tokenizer', tokenizer.path,
                          '--data', dev_prefix], check=True, capture_output=True, text=True)
    return float(out.stdout.strip().splitlines()[-1])


@dsl.component(base_image=IMAGE)
def eval_test(model: Input[Model], tokenizer: Input[Model], corpus_bucket: str, test_key: str) -> float:
    import os
    import subprocess
    uri = os.path.join(f's3://{corpus_bucket}', test_key)
    out = subprocess.run(['python', '-m', 'asr.eval', '--model', model.path, '--tokenizer', tokenizer.path,
                          '--data', uri], check=True, capture_output=True, text=True)
    return float(out.stdout.strip().splitlines()[-1])


@dsl.container_component
def publish(model: Input[Model], dest: str):
    return dsl.ContainerSpec(image='amazon/aws-cli:2.15.30', command=['aws', 's3', 'cp', '--recursive'],
                             args=[model.path, dest])


@dsl.pipeline(name='asr-conformer-librispeech')
def asr_pipeline(
        lm_text_url: str = 'https://www.openslr.org/resources/11/librispeech-lm-norm.txt.gz',
        lexicon_url: str = 'https://asr-lexicons.s3.us-east-1.amazonaws.com/cmudict/cmudict-0.7b.txt',
        corpus_bucket: str = 'asr-corpora',
        corpus_key: str = 'librispeech/train-clean-100/',
        manifest_uri: str = 's3://asr-manifests/librispeech/train-clean-100.jsonl',
        noise_glob: str = 's3://augment/musan/noise/**/*.wav',
        shards: str = 'pipe:aws s3 cp s3://asr-shards/librispeech/wds/train-{000000..000127}.tar -',
        dev_prefix: str = 's3://asr-corpora/librispeech/dev-clean',
        test_keys: List[str] = ['librispeech/test-clean/', 'librispeech/test-other/', 'callcenter/Q2 2024/test/'],
        epochs: int = 40):
    lm = fetch_lm_text(url=lm_text_url)
    lex = fetch_lexicon(lexicon_url=lexicon_url)
    tok = train_tokenizer(text=lm.outputs['text'], lexicon=lex.outputs['lexicon'], vocab_size=1024)
    man = build_manifest(corpus_bucket=corpus_bucket, corpus_key=corpus_key, manifest_uri=manifest_uri)
    nz = sample_noise(noise_glob=noise_glob, n_clips=2000)
    nz.set_env_variable('S3_ENDPOINT', 'http://minio.minio.svc:9000')
    tr = train_conformer(shards=shards, manifest_uri=manifest_uri, tokenizer=tok.outputs['tokenizer'],
                         noise=nz.outputs['noise'], epochs=epochs)
    tr.after(man)
    dev = eval_dev(model=tr.outputs['model'], tokenizer=tok.outputs['tokenizer'], dev_prefix=dev_prefix)
    with dsl.ParallelFor(test_keys) as key:
        eval_test(model=tr.outputs['model'], tokenizer=tok.outputs['tokenizer'],
                  corpus_bucket=corpus_bucket, test_key=key)
    with dsl.If(dev.output < 0.08):
        publish(model=tr.outputs['model'], dest='s3://asr-models/conformer/librispeech-100/')


if __name__ == '__main__':
    compiler.Compiler().compile(asr_pipeline, os.path.splitext(__file__)[0] + '.yaml')
