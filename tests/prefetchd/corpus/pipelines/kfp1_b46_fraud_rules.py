# ruff: noqa
"""Nightly fraud rule back-test on the bank's Ceph object store (KFP v1 SDK -> Argo).

Compile (kfp 1.8.x): python kfp1_b46_fraud_rules.py -> kfp1_b46_fraud_rules.yaml
"""
import os

import kfp
from kfp import dsl, onprem
from kfp.components import create_component_from_func
from kubernetes.client.models import V1EnvVar

IMG = 'registry.bank.internal/fraud/rules:7.0.3'
CEPH = 'https://s3.ceph.bank.internal'


def load_rules(version: str) -> str:
    import boto3
    s3 = boto3.client('s3', endpoint_url='https://s3.ceph.bank.internal', region_name='default')
    obj = s3.get_object(Bucket='fraud-rules', Key=f'rules/{version}/rules.yaml')
    return obj['Body'].read().decode()


def backtest(rules: str, events_path: str, blocklist_dir: str) -> float:
    import rulesengine
    return rulesengine.backtest(rules, events_path, blocklist_dir)


load_rules_op = create_component_from_func(load_rules, base_image=IMG)
backtest_op = create_component_from_func(backtest, base_image=IMG)


@dsl.pipeline(name='fraud-rule-backtest')
def rules_pipeline(rules_version: str = 'v7',
                   events: str = 's3a://fraud-lake/events/dt=2024-06-01',
                   blocklists: str = 's3://fraud-blocklists'):
    rules = load_rules_op(version=rules_version)
    sync = dsl.ContainerOp(
        name='sync-blocklists', image='amazon/aws-cli:2.15.30',
        command=['aws', '--endpoint-url', CEPH, 's3', 'sync', blocklists, '/mnt/ref/blocklists/'])
    sync.apply(onprem.mount_pvc('fraud-reference', 'ref', '/mnt/ref'))
    sanctions = dsl.ContainerOp(
        name='fetch-sanctions', image='curlimages/curl:8.7.1',
        command=['curl', '-fsSL', '-o', '/mnt/ref/sanctions.csv',
                 'https://s3.amazonaws.com/ofac-mirror-bank/sdn/latest/sdn.csv'])
    sanctions.apply(onprem.mount_pvc('fraud-reference', 'ref', '/mnt/ref'))
    extract = dsl.ContainerOp(
        name='extract-events', image='apache/spark:3.5.1',
        command=['/opt/spark/bin/spark-submit'],
        arguments=['--conf', 'spark.hadoop.fs.s3a.endpoint=s3.ceph.bank.internal',
                   '--conf', 'spark.hadoop.fs.s3a.path.style.access=true',
                   'local:///opt/jobs/extract_events.py', '--input', events,
                   '--output', 'file:///mnt/ref/events.parquet'])
    extract.apply(onprem.mount_pvc('fraud-reference', 'ref', '/mnt/ref'))
    bt = backtest_op(rules=rules.output, events_path='/mnt/ref/events.parquet', blocklist_dir='/mnt/ref/blocklists')
    bt.apply(onprem.mount_pvc('fraud-reference', 'ref', '/mnt/ref'))
    bt.after(sync, sanctions, extract)
    pub = dsl.ContainerOp(
        name='publish-metrics', image='amazon/aws-cli:2.15.30',
        command=['sh', '-c'],
        arguments=['echo "$0" | aws --endpoint-url https://s3.ceph.bank.internal s3 cp - s3://fraud-reports/backtest/$1/hit_rate.txt',
                   bt.output, rules_version])


if __name__ == '__main__':
    kfp.compiler.Compiler().compile(rules_pipeline, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                                  'kfp1_b46_fraud_rules.yaml'))
