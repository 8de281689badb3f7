# ruff: noqa
"""Common Crawl quality filtering for LM pretraining (Hera -> Argo WorkflowTemplate).

The crawl's `warc.paths.gz` index is read anonymously from the public
`commoncrawl` bucket; a sample of WARC files is picked and each is filtered
in parallel (fastText quality classifier + domain blocklist). The classifier
lives in an S3 Express One Zone directory bucket in the same AZ as the
workers; the safety team shares its domain blocklist through an access point
whose alias we use like a bucket name. Filtered shards go to a directory
bucket for staging, then are merged and published with s5cmd.

Generate: python argo_b71_webtext_filter.py -> argo_b71_webtext_filter.yaml
"""
import os

from hera.workflows import DAG, Container, Parameter, Script, Task, WorkflowTemplate
from hera.workflows import models as m

IMG = 'ghcr.io/acme-lm/datafilter:0.9.3'

with WorkflowTemplate(
    name='webtext-filter',
    entrypoint='main',
    arguments=[Parameter(name='crawl', value='CC-MAIN-2024-51'),
               Parameter(name='n_files', value='4'),
               Parameter(name='filter_version', value='v2')],
    volumes=[m.Volume(name='models', empty_dir=m.EmptyDirVolumeSource())],
) as wt:
    pick = Script(
        name='pick-warcs', image=IMG, command=['python'],
        source='''import gzip, json, random
import fsspec

crawl = "{{workflow.parameters.crawl}}"
with fsspec.open(f"s3://commoncrawl/crawl-data/{crawl}/warc.paths.gz", "rb", anon=True) as f:
    paths = gzip.decompress(f.read()).decode().split()
random.seed(crawl)
print(json.dumps(random.sample(paths, int("{{workflow.parameters.n_files}}"))))
''')

    filt = Script(
        name='filter-warc', image=IMG, command=['python'],
        inputs=[Parameter(name='warc')],
        source='''import os
import boto3
import pandas as pd
from botocore import UNSIGNED
from botocore.config import Config
from smart_open import open as sopen
import datafilter

warc = "{{inputs.parameters.warc}}"
version = "{{workflow.parameters.filter_version}}"
boto3.client("s3").download_file("lm-filters--use1-az4--x-s3", f"fasttext/quality_{version}.bin", "/tmp/quality.bin")
blocked = set(pd.read_csv("s3://safety-ap-7h3kq9w2mzx5rb1n4yd8fc6tj0lsuse1a-s3alias/blocklists/domains.csv")["domain"])
anon = boto3.client("s3", config=Config(signature_version=UNSIGNED))
out = f"s3://webtext-stage--use1-az4--x-s3/{{workflow.parameters.crawl}}/{os.path.basename(warc)}.jsonl.zst"
with sopen(f"s3://commoncrawl/{warc}", "rb", transport_params={"client": anon}) as src, sopen(out, "wb") as dst:
    datafilter.run(src, dst, model="/tmp/quality.bin", blocked_domains=blocked)
''')

    merge = Container(
        name='merge-publish', image='peakcom/s5cmd:v2.2.2',
        command=['sh', '-c'],
        args=['/s5cmd cp "s3://webtext-stage--use1-az4--x-s3/{{workflow.parameters.crawl}}/*" /data/shards/ && '
              '/s5cmd cp "/data/shards/*" "s3://acme-lm-corpus/webtext/{{workflow.parameters.crawl}}/"'],
        volume_mounts=[m.VolumeMount(name='models', mount_path='/data')])

    with DAG(name='main'):
        p = pick(name='pick-warcs')
        f = Task(name='filter-warc', template=filt, arguments={'warc': '{{item}}'},
                 with_param='{{tasks.pick-warcs.outputs.result}}')
        mp = merge(name='merge-publish')
        p >> f >> mp

wt.to_file(os.path.dirname(os.path.abspath(__file__)), name='argo_b71_webtext_filter')
