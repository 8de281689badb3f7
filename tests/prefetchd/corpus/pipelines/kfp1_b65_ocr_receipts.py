# ruff: noqa
"""Expense-receipt OCR by archive shard (KFP v1 SDK 1.8.24 -> Argo Workflow).

Scanned receipts sit on an existing PVC whose claim name is a pipeline
parameter. list-shards lists the month's shard folders; ocr-shard runs in a
ParallelFor over that task output (withParam) with parallelism=3, reading
the PVC and a tessdata model from a constant env var, and writing its text
to an S3 prefix built from pipeline parameters; low-confidence shards are
queued for review under a dsl.Condition. aggregate-text then reads the S3
prefix the loop wrote (same run). FX rates come from a constant S3 URI;
totals use a vendor table whose URI is an f-string of pipeline parameters;
the ledger export uses AWS credentials from a secret. An ExitHandler says
goodbye.

Compile (kfp 1.8.x): python kfp1_b65_ocr_receipts.py  -> kfp1_b65_ocr_receipts.yaml
"""
import os

import kfp
from kfp import dsl, onprem
from kfp.aws import use_aws_secret
from kfp.components import InputPath, OutputPath, create_component_from_func
from kubernetes.client.models import V1EnvVar

IMAGE = 'ghcr.io/example/receipt-ocr:2.0.4'


def list_shards(archive_dir: str) -> list:
    import os
    return sorted(os.listdir(archive_dir))


def ocr_shard(archive_dir: str, shard: str, text_root: str) -> float:
    import os, subprocess
    out = subprocess.run(['python', '-m', 'receipts.ocr', '--in', os.path.join(archive_dir, shard),
                          '--tessdata', os.environ['TESSDATA_URI'], '--out', text_root.rstrip('/') + '/' + shard + '/'],
                         check=True, capture_output=True, text=True)
    return float(out.stdout.strip() or 0.0)


def queue_review(shard: str, queue_uri: str):
    import subprocess
    subprocess.run(['python', '-m', 'receipts.queue', '--shard', shard, '--to', queue_uri], check=True)


def aggregate_text(text_root: str, receipts_path: OutputPath('JsonLines')):
    import subprocess
    subprocess.run(['python', '-m', 'receipts.aggregate', '--text', text_root, '--out', receipts_path], check=True)


def fetch_fx_rates(rates_uri: str, rates_path: OutputPath('CSV')):
    import subprocess
    subprocess.run(['aws', 's3', 'cp', rates_uri, rates_path], check=True)


def extract_totals(receipts_path: InputPath('JsonLines'), rates_path: InputPath('CSV'), vendor_table_uri: str,
                   totals_path: OutputPath('CSV')):
    import subprocess
    subprocess.run(['python', '-m', 'receipts.totals', '--receipts', receipts_path, '--fx', rates_path,
                    '--vendors', vendor_table_uri, '--out', totals_path], check=True)


def export_ledger(totals_path: InputPath('CSV'), ledger_uri: str):
    import subprocess
    subprocess.run(['aws', 's3', 'cp', totals_path, ledger_uri.rstrip('/') + '/totals.csv'], check=True)


def goodbye(msg: str):
    print(msg)


list_op = create_component_from_func(list_shards, base_image=IMAGE)
ocr_op = create_component_from_func(ocr_shard, base_image=IMAGE)
review_op = create_component_from_func(queue_review, base_image=IMAGE)
agg_op = create_component_from_func(aggregate_text, base_image=IMAGE)
fx_op = create_component_from_func(fetch_fx_rates, base_image='amazon/aws-cli:2.15.30')
totals_op = create_component_from_func(extract_totals, base_image=IMAGE)
export_op = create_component_from_func(export_ledger, base_image='amazon/aws-cli:2.15.30')
exit_op = create_component_from_func(goodbye, base_image='python:3.11-slim')


@dsl.pipeline(name='receipt-ocr-shards')
def receipts_pipeline(archive_pvc: str = 'receipts-archive',
                      data_root: str = 's3://example-docs/receipts',
                      month: str = '2024-05',
                      min_confidence: float = 0.9):
    bye = exit_op(msg='receipt-ocr-shards finished')
    with dsl.ExitHandler(bye):
        shards = list_op(archive_dir=f'/archive/{month}')
        shards.apply(onprem.mount_pvc(pvc_name=archive_pvc, volume_name='archive', volume_mount_path='/archive'))
        with dsl.ParallelFor(shards.output, parallelism=3) as shard:
            ocr = ocr_op(archive_dir=f'/archive/{month}', shard=shard, text_root=f'{data_root}/ocr-text/{month}/')
            ocr.apply(onprem.mount_pvc(pvc_name=archive_pvc, volume_name='archive', volume_mount_path='/archive'))
            ocr.container.add_env_variable(V1EnvVar(name='TESSDATA_URI',
                                                    value='s3://example-models/tesseract/tessdata_fast-4.1.0/'))
            with dsl.Condition(ocr.output < min_confidence):
                review_op(shard=shard, queue_uri=f'{data_root}/review-queue/{month}/')
        agg = agg_op(text_root=f'{data_root}/ocr-text/{month}/').after(ocr)
        fx = fx_op(rates_uri='s3://example-finance/fx/daily/2024-05.csv')
        totals = totals_op(receipts=agg.outputs['receipts'], rates=fx.outputs['rates'],
                           vendor_table_uri=f'{data_root}/reference/vendors.parquet')
        export = export_op(totals=totals.outputs['totals'], ledger_uri=f'{data_root}/ledger/{month}/')
        export.apply(use_aws_secret('receipts-aws', 'AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY'))


if __name__ == '__main__':
    kfp.compiler.Compiler().compile(receipts_pipeline, os.path.splitext(__file__)[0] + '.yaml')
