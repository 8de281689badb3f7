# ruff: noqa
"""Nightly FHIR bulk-export ETL for the EHR warehouse (Hera): a CronWorkflow whose DAG
tasks use templateRef into a ClusterWorkflowTemplate shared by the data
platform team.

Writes two files beside itself:
  argo_b38_ehr_nightly.yaml            the CronWorkflow
  argo_b38_ehr_nightly_templates.yaml  the ClusterWorkflowTemplate 'ehr-etl-templates'

Generate: python argo_b38_ehr_nightly.py
"""
import os

from hera.workflows import (DAG, ClusterWorkflowTemplate, Container, CronWorkflow, Parameter, S3Artifact,
                            Script, Task)
from hera.workflows import models as m

WORK = m.VolumeMount(name='etl-work', mount_path='/work')
RETRY = m.RetryStrategy(limit='3', retry_policy='OnError',
                        backoff=m.Backoff(duration='30s', factor='2', max_duration='10m'))
S3_CREDS = [
    m.EnvVar(name='AWS_ACCESS_KEY_ID', value_from=m.EnvVarSource(
        secret_key_ref=m.SecretKeySelector(name='ehr-s3-creds', key='access_key'))),
    m.EnvVar(name='AWS_SECRET_ACCESS_KEY', value_from=m.EnvVarSource(
        secret_key_ref=m.SecretKeySelector(name='ehr-s3-creds', key='secret_key'))),
]

with ClusterWorkflowTemplate(name='ehr-etl-templates') as cwt:
    Container(
        name='extract-fhir', image='ghcr.io/example/fhir-tools:2.4.1',
        command=['fhir-bulk', 'pull'],
        args=['--from', '{{inputs.parameters.source_uri}}', '--to', '/work/raw', '--resources',
              '{{inputs.parameters.resources}}'],
        inputs=[Parameter(name='source_uri'),
                Parameter(name='resources', default='Patient,Encounter,Observation,Condition')],
        env=S3_CREDS, volume_mounts=[WORK], retry_strategy=RETRY,
    )
    Container(
        name='fetch-terminology', image='busybox:1.36', command=['sh', '-c'],
        args=['mkdir -p /work/terminology && cp -r /in/snomed/. /work/terminology/'],
        inputs=[S3Artifact(name='snomed', path='/in/snomed', bucket='example-ehr',
                           key='terminology/snomed-ct/2024-03-01/', endpoint='s3.amazonaws.com',
                           access_key_secret=m.SecretKeySelector(name='ehr-s3-creds', key='access_key'),
                           secret_key_secret=m.SecretKeySelector(name='ehr-s3-creds', key='secret_key'))],
        volume_mounts=[WORK],
    )
    Container(
        name='deidentify', image='ghcr.io/example/ehr-deid:5.0.0',
        command=['deid', 'run'],
        args=['--in', '/work/raw', '--terminology', '/work/terminology', '--out', '/work/deid',
              '--policy', '{{inputs.parameters.policy}}'],
        inputs=[Parameter(name='policy', default='safe-harbor')],
        env=[m.EnvVar(name='DEID_SALT', value_from=m.EnvVarSource(
                 secret_key_ref=m.SecretKeySelector(name='deid-salt', key='salt'))),
             m.EnvVar(name='POD_NAME', value_from=m.EnvVarSource(
                 field_ref=m.ObjectFieldSelector(field_path='metadata.name')))],
        volume_mounts=[WORK], retry_strategy=RETRY,
    )
    Script(
        name='validate-schema', image='python:3.11-slim', command=['python'],
        source=('import json, pathlib\n'
                'bad = [p.name for p in pathlib.Path("/work/deid").glob("*.ndjson") if p.stat().st_size == 0]\n'
                'pathlib.Path("/tmp/status").write_text("empty" if bad else "ok")\n'),
        volume_mounts=[WORK],
        outputs=[Parameter(name='status', value_from=m.ValueFrom(path='/tmp/status', default='unknown'))],
    )
    Container(
        name='load-warehouse', image='ghcr.io/example/ehr-loader:1.3.0',
        command=['ehr-load'], args=['--in', '/work/deid', '--table', '{{inputs.parameters.table}}'],
        inputs=[Parameter(name='table')],
        env=[m.EnvVar(name='PGPASSWORD', value_from=m.EnvVarSource(
            secret_key_ref=m.SecretKeySelector(name='warehouse-writer', key='password')))],
        volume_mounts=[WORK], retry_strategy=RETRY,
    )
    Container(
        name='export-parquet', image='ghcr.io/example/fhir-tools:2.4.1',
        command=['fhir-to-parquet'], args=['--in', '/work/deid', '--out', '/out/parquet'],
        volume_mounts=[WORK],
        outputs=[S3Artifact(
            name='curated', path='/out/parquet', bucket='example-ehr', endpoint='s3.amazonaws.com',
            key='curated/fhir/{{workflow.creationTimestamp.Y}}/{{workflow.creationTimestamp.m}}/'
                '{{workflow.creationTimestamp.d}}/',
            access_key_secret=m.SecretKeySelector(name='ehr-s3-creds', key='access_key'),
            secret_key_secret=m.SecretKeySelector(name='ehr-s3-creds', key='secret_key'))],
    )


def ref(template):
    return m.TemplateRef(name='ehr-etl-templates', template=template, cluster_scope=True)


with CronWorkflow(
    name='ehr-fhir-nightly',
    schedules=['30 2 * * *'],
    timezone='America/New_York',
    concurrency_policy='Forbid',
    starting_deadline_seconds=600,
    entrypoint='nightly',
    on_exit='notify',
    arguments=[Parameter(name='fhir_export_uri', value='s3://example-ehr-landing/fhir-bulk/st-elsewhere/latest/'),
               Parameter(name='warehouse_table', value='clinical.fhir_nightly')],
    pod_gc=m.PodGC(strategy='OnPodSuccess'),
    service_account_name='ehr-etl',
    volume_claim_templates=[m.PersistentVolumeClaim(
        metadata=m.ObjectMeta(name='etl-work'),
        spec=m.PersistentVolumeClaimSpec(access_modes=['ReadWriteOnce'],
                                         resources=m.VolumeResourceRequirements(requests={'storage': m.Quantity('200Gi')})))],
) as cw:
    notify = Container(name='notify', image='curlimages/curl:8.8.0', command=['sh', '-c'],
                       args=['curl -s -X POST "$SLACK_WEBHOOK" -d "ehr-fhir-nightly {{workflow.status}}"'],
                       env=[m.EnvVar(name='SLACK_WEBHOOK', value_from=m.EnvVarSource(
                           secret_key_ref=m.SecretKeySelector(name='slack-webhook', key='url')))])
    with DAG(name='nightly'):
        Task(name='extract', template_ref=ref('extract-fhir'),
             arguments=[Parameter(name='source_uri', value='{{workflow.parameters.fhir_export_uri}}')])
        Task(name='terminology', template_ref=ref('fetch-terminology'))
        Task(name='deidentify', template_ref=ref('deidentify'), depends='extract && terminology')
        Task(name='validate', template_ref=ref('validate-schema'), depends='deidentify')
        Task(name='load', template_ref=ref('load-warehouse'), depends='validate',
             when="{{tasks.validate.outputs.parameters.status}} == ok",
             arguments=[Parameter(name='table', value='{{workflow.parameters.warehouse_table}}')])
        Task(name='export', template_ref=ref('export-parquet'), depends='validate',
             when="{{tasks.validate.outputs.parameters.status}} == ok")

if __name__ == '__main__':
    base = os.path.splitext(__file__)[0]
    with open(base + '.yaml', 'w') as f:
        f.write(cw.to_yaml())
    with open(base + '_templates.yaml', 'w') as f:
        f.write(cwt.to_yaml())
