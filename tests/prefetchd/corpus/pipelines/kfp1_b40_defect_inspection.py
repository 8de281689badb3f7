# ruff: noqa
"""AOI defect detection retraining for one production line (KFP v1).

Images for a shift are synced from S3 onto an existing claim; QC statistics
gate retraining (high defect rate AND enough images) and a separate alert;
the dashboard update runs after retraining (across the condition); a cleanup
op deletes the scratch prefix as the exit handler.

Compile: python kfp1_b40_defect_inspection.py -> kfp1_b40_defect_inspection.yaml
"""
import os

import kfp
from kfp import dsl, onprem

IMAGE = 'ghcr.io/example/aoi-defects:2.6.1'


def fetch_images_op(line, shift_date):
    return dsl.ContainerOp(
        name='fetch-images', image='amazon/aws-cli:2.15.30',
        command=['aws', 's3', 'sync'],
        arguments=[f's3://example-mfg/aoi/{line}/images/{shift_date}/', '/data/images'])


def qc_stats_op():
    return dsl.ContainerOp(
        name='qc-stats', image=IMAGE,
        command=['python', '-m', 'aoi.qc_stats'],
        arguments=['--images', '/data/images', '--rate-out', '/tmp/rate.txt', '--count-out', '/tmp/count.txt'],
        file_outputs={'defect_rate': '/tmp/rate.txt', 'n_images': '/tmp/count.txt'})


def retrain_op(line):
    return dsl.ContainerOp(
        name='retrain-detector', image=IMAGE,
        command=['python', '-m', 'aoi.train'],
        arguments=['--images', '/data/images',
                   '--annotations', f's3://example-mfg/aoi/{line}/annotations/v7.json',
                   '--out', f's3://example-mfg/models/{line}/candidate/'])


def alert_op(rate):
    return dsl.ContainerOp(
        name='alert-ops', image='curlimages/curl:8.8.0',
        command=['curl', '-X', 'POST', 'https://alerts.example.com/hooks/aoi'],
        arguments=['-d', rate])


def dashboard_op(line):
    return dsl.ContainerOp(
        name='update-dashboard', image=IMAGE,
        command=['python', '-m', 'aoi.dashboard'],
        arguments=['--line', line, '--out', 's3://example-mfg/dashboards/aoi/'])


def cleanup_op(line):
    return dsl.ContainerOp(
        name='cleanup-scratch', image='amazon/aws-cli:2.15.30',
        command=['aws', 's3', 'rm', '--recursive'],
        arguments=[f's3://example-mfg/scratch/{line}/'])


@dsl.pipeline(name='aoi-defect-retrain', description='AOI defect detector retraining')
def aoi_pipeline(line: str = 'line3', shift_date: str = '2024-06-14'):
    vol = onprem.mount_pvc('aoi-images', 'images', '/data')
    with dsl.ExitHandler(cleanup_op(line)):
        fetch = fetch_images_op(line, shift_date).apply(vol)
        qc = qc_stats_op().apply(vol).after(fetch)
        with dsl.Condition(qc.outputs['defect_rate'] > 0.02):
            with dsl.Condition(qc.outputs['n_images'] > 1000):
                retrain = retrain_op(line).apply(vol)
        with dsl.Condition(qc.outputs['defect_rate'] > 0.05):
            alert_op(qc.outputs['defect_rate'])
        dashboard_op(line).after(retrain)


if __name__ == '__main__':
    kfp.compiler.Compiler().compile(aoi_pipeline, os.path.splitext(__file__)[0] + '.yaml')
