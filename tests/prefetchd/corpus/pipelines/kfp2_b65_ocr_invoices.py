# ruff: noqa
"""Invoice OCR over batches of scans (KFP v2, kfp 2.17.3 + kfp-kubernetes 2.17.3).

Scanned invoices sit on an existing PVC (name is a pipeline parameter,
sub-path 'incoming'). A lexicon is imported with dsl.importer whose URI is a
pipeline parameter. list-batches lists the batch folders; a reusable
per-batch OCR pipeline (a @dsl.pipeline used as a component: deskew ->
recognize) runs in a ParallelFor over that task output with parallelism=4;
recognize gets the imported lexicon through the nested pipeline's artifact
input and the tessdata location as a constant env var. The texts are fanned
in with dsl.Collected, fields are extracted (vendor registry URI is a
pipeline parameter, layout model URI a constant env var) and dsl.If/Else
publishes or queues for review. The whole run is wrapped in an ExitHandler
whose exit task moves processed scans on the same PVC.

Compile: python kfp2_b65_ocr_invoices.py  -> kfp2_b65_ocr_invoices.yaml
"""
import os
from typing import List

from kfp import compiler, dsl, kubernetes
from kfp.dsl import Dataset, Input, Output

IMAGE = 'ghcr.io/example/doc-ocr:5.3.0'


@dsl.component(base_image=IMAGE)
def list_batches(scans_dir: str) -> List[str]:
    import os
    return sorted(d for d in os.listdir(scans_dir) if os.path.isdir(os.path.join(scans_dir, d)))


@dsl.component(base_image=IMAGE)
def deskew(batch: str, scans_dir: str, pages: Output[Dataset]):
    import subprocess
    subprocess.run(['python', '-m', 'ocr.deskew', '--in', f'{scans_dir}/{batch}', '--out', pages.path], check=True)


@dsl.component(base_image=IMAGE)
def recognize(pages: Input[Dataset], lexicon: Input[Dataset], text: Output[Dataset]):
    import os, subprocess
    subprocess.run(['python', '-m', 'ocr.recognize', '--pages', pages.path, '--lexicon', lexicon.path,
                    '--tessdata', os.environ['TESSDATA_URI'], '--out', text.path], check=True)


@dsl.pipeline(name='ocr-one-batch')
def ocr_one_batch(batch: str, scans_pvc: str, lexicon: Input[Dataset]) -> Dataset:
    d = deskew(batch=batch, scans_dir='/scans')
    kubernetes.mount_pvc(d, pvc_name=scans_pvc, mount_path='/scans', sub_path='incoming')
    r = recognize(pages=d.outputs['pages'], lexicon=lexicon)
    r.set_env_variable('TESSDATA_URI', 's3://example-models/tesseract/tessdata_best-4.1.0/')
    return r.outputs['text']


@dsl.component(base_image=IMAGE)
def merge_text(texts: Input[List[Dataset]], merged: Output[Dataset]):
    import shutil
    with open(merged.path, 'w') as out:
        for t in texts:
            with open(t.path) as f:
                shutil.copyfileobj(f, out)


@dsl.component(base_image=IMAGE)
def extract_fields(merged: Input[Dataset], vendor_registry_uri: str, fields: Output[Dataset]) -> float:
    import os, subprocess
    out = subprocess.run(['python', '-m', 'ocr.extract', '--text', merged.path, '--vendors', vendor_registry_uri,
                          '--layout-model', os.environ['LAYOUT_MODEL_URI'], '--out', fields.path],
                         check=True, capture_output=True, text=True)
    return float(out.stdout.strip() or 0.0)


@dsl.container_component
def publish_fields(fields: Input[Dataset], target: str):
    return dsl.ContainerSpec(image='amazon/aws-cli:2.15.30', command=['aws', 's3', 'cp'],
                             args=[fields.path, target])


@dsl.container_component
def queue_review(fields: Input[Dataset], queue: str):
    return dsl.ContainerSpec(image=IMAGE, command=['python', '-m', 'ocr.review_queue'],
                             args=['--fields', fields.path, '--queue', queue])


@dsl.container_component
def move_processed(scans_dir: str):
    return dsl.ContainerSpec(image='busybox:1.36', command=['sh', '-c'],
                             args=['mkdir -p "$0/../processed" && mv "$0"/* "$0/../processed/" || true', scans_dir])


@dsl.pipeline(name='invoice-ocr-batches')
def ocr_pipeline(scans_pvc: str = 'invoice-scans',
                 lexicon_uri: str = 's3://example-docs/lexicons/invoice-terms-v4.txt',
                 vendor_registry_uri: str = 's3://example-docs/vendors/registry-2024.csv',
                 min_confidence: float = 0.85):
    done = move_processed(scans_dir='/scans')
    kubernetes.mount_pvc(done, pvc_name=scans_pvc, mount_path='/scans', sub_path='incoming')
    with dsl.ExitHandler(done, name='ocr-run'):
        lex = dsl.importer(artifact_uri=lexicon_uri, artifact_class=Dataset, reimport=True)
        lb = list_batches(scans_dir='/scans')
        kubernetes.mount_pvc(lb, pvc_name=scans_pvc, mount_path='/scans', sub_path='incoming')
        with dsl.ParallelFor(lb.output, parallelism=4) as batch:
            ob = ocr_one_batch(batch=batch, scans_pvc=scans_pvc, lexicon=lex.output)
        m = merge_text(texts=dsl.Collected(ob.output))
        ex = extract_fields(merged=m.outputs['merged'], vendor_registry_uri=vendor_registry_uri)
        ex.set_env_variable('LAYOUT_MODEL_URI', 's3://example-models/layoutlmv3/invoices-ft-2024-05/')
        with dsl.If(ex.outputs['Output'] >= min_confidence):
            pub = publish_fields(fields=ex.outputs['fields'], target='s3://example-docs/extracted/invoices/2024/')
            kubernetes.use_secret_as_env(pub, secret_name='docs-warehouse-creds',
                                         secret_key_to_env={'access_key': 'AWS_ACCESS_KEY_ID',
                                                            'secret_key': 'AWS_SECRET_ACCESS_KEY'})
        with dsl.Else():
            queue_review(fields=ex.outputs['fields'], queue='ocr-low-confidence')


if __name__ == '__main__':
    compiler.Compiler().compile(ocr_pipeline, os.path.splitext(__file__)[0] + '.yaml')
