# ruff: noqa
"""Invoice field extraction for the document-AI team (KFP v2).

A marker object names the newest scanned batch; the batch is synced into a
per-run fusecache scratch claim, OCR'd with models from the shared
`docai-models` claim (two sub-paths mounted in one step), classified with a
layout model named by an env var, low-confidence pages are exported for
human review under a condition, and fields are extracted to the warehouse.
A notification runs as the exit task.

Compile: python kfp2_b57_invoice_extract.py  -> kfp2_b57_invoice_extract.yaml
"""
import os

from kfp import compiler, dsl, kubernetes
from kfp.dsl import Dataset, Input, Output

IMAGE = 'registry.globex.io/docai/pipeline:5.2.0'


@dsl.component(base_image=IMAGE)
def read_marker(marker_uri: str) -> str:
    import boto3
    bucket, key = marker_uri[5:].split('/', 1)
    body = boto3.client('s3').get_object(Bucket=bucket, Key=key)['Body'].read().decode().strip()
    return body  # e.g. s3://globex-docai-inbox/invoices/batch-2024-06-14T0300/


@dsl.container_component
def fetch_batch(batch_uri: str):
    return dsl.ContainerSpec(image='amazon/aws-cli:2.15.30', command=['aws', 's3', 'sync'],
                             args=[batch_uri, '/work/pages/', '--exclude', '*.tmp'])


@dsl.container_component
def ocr_pages(lang: str):
    return dsl.ContainerSpec(image='registry.globex.io/docai/ocr:1.9.3', command=['python', '-m', 'ocr.run'],
                             args=['--pages', '/work/pages/', '--model', '/models/trocr',
                                   '--lexicon', '/lexicons/{}.txt'.format('de-en'), '--lang', lang,
                                   '--out', '/work/text/'])


@dsl.component(base_image=IMAGE)
def classify_layout(text_dir: str, low_conf: Output[Dataset]) -> int:
    import os, subprocess
    subprocess.run(['python', '-m', 'docai.layout', '--text', text_dir,
                    '--model', os.environ['LAYOUT_MODEL_URI'], '--low-conf-out', low_conf.path], check=True)
    return len(open(low_conf.path).read().splitlines())


@dsl.component(base_image=IMAGE)
def export_review(low_conf: Input[Dataset], queue_uri: str):
    import subprocess
    subprocess.run(['aws', 's3', 'cp', low_conf.path, queue_uri + 'pending.jsonl'], check=True)


@dsl.component(base_image=IMAGE)
def extract_fields(text_dir: str, extractor_dir: str, warehouse_uri: str):
    import pandas as pd
    from docai.extract import run
    df = run(text_dir, extractor_dir)
    df.to_parquet(warehouse_uri + 'invoices.parquet')


@dsl.container_component
def notify(channel: str):
    return dsl.ContainerSpec(image='curlimages/curl:8.8.0', command=['sh', '-c'],
                             args=[f'curl -s -X POST -d "invoice run finished" https://chat.globex.io/hooks/{channel}'])


@dsl.pipeline(name='invoice-field-extraction')
def invoice_pipeline(marker_uri: str = 's3://globex-docai-inbox/invoices/_LATEST',
                     models_pvc: str = 'docai-models',
                     lang: str = 'deu+eng',
                     warehouse_uri: str = 's3://globex-warehouse/docai/invoices/'):
    work = kubernetes.CreatePVC(pvc_name_suffix='-invoice-work', access_modes=['ReadWriteMany'],
                                size='100Gi', storage_class_name='fusecache-s3')
    done = notify(channel='docai-runs')
    with dsl.ExitHandler(done, name='invoice-run'):
        mk = read_marker(marker_uri=marker_uri)
        fb = fetch_batch(batch_uri=mk.output)
        kubernetes.mount_pvc(fb, pvc_name=work.outputs['name'], mount_path='/work')

        oc = ocr_pages(lang=lang).after(fb)
        kubernetes.mount_pvc(oc, pvc_name=work.outputs['name'], mount_path='/work')
        kubernetes.mount_pvc(oc, pvc_name=models_pvc, mount_path='/models/trocr', sub_path='ocr/trocr-large-printed')
        kubernetes.mount_pvc(oc, pvc_name=models_pvc, mount_path='/lexicons', sub_path='lexicons')
        oc.set_accelerator_type('nvidia.com/gpu').set_accelerator_limit(1)

        cl = classify_layout(text_dir='/work/text').after(oc)
        kubernetes.mount_pvc(cl, pvc_name=work.outputs['name'], mount_path='/work')
        cl.set_env_variable('LAYOUT_MODEL_URI', 's3://globex-docai-models/layoutlmv3/invoices-ft-7/')

        with dsl.If(cl.outputs['Output'] > 0, name='has-low-confidence'):
            export_review(low_conf=cl.outputs['low_conf'], queue_uri='s3://globex-docai-review/queue/invoices/')

        ex = extract_fields(text_dir='/work/text', extractor_dir='/extractor', warehouse_uri=warehouse_uri).after(cl)
        kubernetes.mount_pvc(ex, pvc_name=work.outputs['name'], mount_path='/work')
        kubernetes.mount_pvc(ex, pvc_name=models_pvc, mount_path='/extractor', sub_path='extractor/v5')

        kubernetes.DeletePVC(pvc_name=work.outputs['name']).after(ex)


if __name__ == '__main__':
    compiler.Compiler().compile(invoice_pipeline, os.path.splitext(__file__)[0] + '.yaml')
