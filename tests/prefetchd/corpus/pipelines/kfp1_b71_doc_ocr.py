# ruff: noqa
"""OCR of scanned papers into a text corpus (KFP v1 SDK -> Argo).

Sources: one monthly tarball of arXiv PDFs from the arXiv bulk bucket (a
requester-pays bucket: we pay the egress), the library's own page scans on
the on-prem Ceph RGW (pulled with an rclone on-the-fly remote), and the
TrOCR weights published public-read in the OCR team's bucket, fetched by its
path-style HTTPS address. Per-language lexicons are read with boto3's
resource API. The text is synced to the corpus bucket.

Compile (kfp 1.8.x): python kfp1_b71_doc_ocr.py -> kfp1_b71_doc_ocr.yaml
"""
import os

import kfp
from kfp import dsl
from kfp.components import create_component_from_func

IMG = 'ghcr.io/acme-lib/ocr:1.4.0'


def ocr_pages(lang: str, models_bucket: str) -> int:
    import boto3
    import ocrkit
    s3 = boto3.resource('s3')
    key = f'lexicons/{lang}/words.txt'
    s3.Object(models_bucket, key).download_file(f'/data/lexicon_{lang}.txt')
    return ocrkit.run('/data/raw', '/data/scans', model='/data/models/trocr.tar.gz',
                      lexicon=f'/data/lexicon_{lang}.txt', lang=lang, out=f'/data/text/{lang}')


ocr_op = create_component_from_func(ocr_pages, base_image=IMG)


@dsl.pipeline(name='arxiv-scan-ocr', description='OCR arXiv PDFs and library scans into a text corpus')
def ocr_pipeline(arxiv_month: str = '2401', scan_batch: str = '2025-03'):
    notify = dsl.ContainerOp(name='notify', image='curlimages/curl:8.7.1',
                             command=['sh', '-c', 'curl -fsS -X POST "$HOOK" -d "ocr {{workflow.status}}" || true'])
    with dsl.ExitHandler(notify):
        vol = dsl.VolumeOp(name='work-volume', resource_name='ocr-work', size='200Gi',
                           modes=dsl.VOLUME_MODE_RWO)
        arxiv = dsl.ContainerOp(
            name='fetch-arxiv', image='amazon/aws-cli:2.15.30',
            command=['sh', '-c'],
            arguments=['mkdir -p /data/raw && aws s3 cp --request-payer requester '
                       's3://arxiv/pdf/arXiv_pdf_%s_001.tar /data/raw/ && tar -xf /data/raw/*.tar -C /data/raw' % arxiv_month],
            pvolumes={'/data': vol.volume})
        scans = dsl.ContainerOp(
            name='fetch-scans', image='rclone/rclone:1.67.0',
            command=['rclone', 'copy', '--transfers', '16'],
            arguments=[":s3,provider=Ceph,endpoint='http://rgw.docs.internal:7480':library-scans/%s/" % scan_batch,
                       '/data/scans'],
            pvolumes={'/data': vol.volume})
        model = dsl.ContainerOp(
            name='fetch-ocr-model', image='busybox:1.36',
            command=['sh', '-c', 'mkdir -p /data/models && wget -q -O /data/models/trocr.tar.gz '
                     'https://s3.eu-west-1.amazonaws.com/ocr-models/trocr/base-v3.tar.gz'],
            pvolumes={'/data': vol.volume})
        with dsl.ParallelFor(['en', 'de']) as lang:
            ocr = ocr_op(lang=lang, models_bucket='ocr-models')
            ocr.add_pvolumes({'/data': vol.volume})
            ocr.after(arxiv, scans, model)
        export = dsl.ContainerOp(
            name='export-text', image='amazon/aws-cli:2.15.30',
            command=['aws', 's3', 'sync', '/data/text/'],
            arguments=['s3://doc-corpus/ocr/arxiv-%s/' % arxiv_month],
            pvolumes={'/data': vol.volume})
        export.after(ocr)


if __name__ == '__main__':
    kfp.compiler.Compiler().compile(ocr_pipeline, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                                'kfp1_b71_doc_ocr.yaml'))
