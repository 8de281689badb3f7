# ruff: noqa
"""Nightly weather-station QC and merge (Hera): a CronWorkflow that calls a
ClusterWorkflowTemplate library given in a second file.

- argo_b72_station_qc_cron_cwt.yaml: ClusterWorkflowTemplate `wx-qc-toolkit`
  with `pull-station` (bash script: s5cmd glob copy of one station-day, then
  normalise and upload to the staging bucket) and `qc-stations` (container).
- argo_b72_station_qc_cron.yaml: CronWorkflow `station-qc-nightly`. The
  steps entrypoint runs pull per station (withParam over the JSON-list
  workflow parameter, templateRef clusterScope), then a nested steps
  template `qc-and-merge` (qc via templateRef, then a local merge with a
  key-only input artifact resolved through the default artifact repository,
  not shipped), then publish under `when`.
- The QC rules URI is a workflow parameter valued from a ConfigMap that is
  not shipped (valueFrom.configMapKeyRef).

Generate: python argo_b72_station_qc_cron.py
"""
import os

from hera.workflows import (
    ClusterWorkflowTemplate, Container, CronWorkflow, Parameter, S3Artifact, Script, Step, Steps,
)
from hera.workflows import models as m

IMG = 'ghcr.io/wxlab/qc:2.2.0'

with ClusterWorkflowTemplate(name='wx-qc-toolkit') as cwt:
    pull = Script(
        name='pull-station',
        image=IMG,
        command=['bash'],
        inputs=[Parameter(name='station'), Parameter(name='day')],
        source='''set -euo pipefail
mkdir -p /data/raw
s5cmd cp 's3://wx-raw/stations/{{inputs.parameters.station}}/{{inputs.parameters.day}}/*.csv' /data/raw/
python -m wxqc.normalize /data/raw --station {{inputs.parameters.station}} --out /data/norm.parquet
aws s3 cp /data/norm.parquet s3://wx-staging/{{inputs.parameters.day}}/{{inputs.parameters.station}}.parquet
''',
    )
    qc = Container(
        name='qc-stations',
        image=IMG,
        inputs=[Parameter(name='day'), Parameter(name='rules_uri'),
                Parameter(name='flags', default='spike,stuck,range')],
        command=['python', '-m', 'wxqc.run'],
        args=['--staging', 's3://wx-staging/{{inputs.parameters.day}}/',
              '--rules', '{{inputs.parameters.rules_uri}}',
              '--flags', '{{inputs.parameters.flags}}',
              '--out', 's3://wx-curated/qc/{{inputs.parameters.day}}/'],
    )

with CronWorkflow(
    name='station-qc-nightly',
    schedules=['30 2 * * *'],
    timezone='UTC',
    concurrency_policy='Replace',
    entrypoint='nightly',
    arguments=[
        Parameter(name='stations', value='["KSEA", "KPDX", "KBOI"]'),
        Parameter(name='day', value='2025-03-14'),
        Parameter(name='publish', value='true'),
        Parameter(name='qc_rules_uri', value_from=m.ValueFrom(
            config_map_key_ref=m.ConfigMapKeySelector(name='wx-qc-config', key='rules_uri'))),
    ],
) as cw:
    merge = Container(
        name='merge-stations',
        image=IMG,
        inputs=[S3Artifact(name='normals', path='/ref/normals.parquet',
                           key='climatology/normals-1991-2020.parquet')],
        command=['sh', '-c'],
        args=['aws s3 sync --only-show-errors s3://wx-curated/qc/{{workflow.parameters.day}}/ /tmp/qc && '
              'python -m wxqc.merge --qc /tmp/qc --normals /ref/normals.parquet '
              '--out s3://wx-curated/merged/{{workflow.parameters.day}}/stations.parquet'],
    )
    publish = Container(
        name='publish-daily',
        image='amazon/aws-cli:2.17.20',
        command=['aws', 's3', 'cp', '--only-show-errors'],
        args=['s3://wx-curated/merged/{{workflow.parameters.day}}/stations.parquet',
              's3://wx-public/daily/{{workflow.parameters.day}}/stations.parquet'],
    )
    with Steps(name='qc-and-merge') as qm:
        Step(name='qc', template_ref=m.TemplateRef(name='wx-qc-toolkit', template='qc-stations', cluster_scope=True),
             arguments=[Parameter(name='day', value='{{workflow.parameters.day}}'),
                        Parameter(name='rules_uri', value='{{workflow.parameters.qc_rules_uri}}')])
        merge(name='merge')
    with Steps(name='nightly'):
        Step(name='pull', template_ref=m.TemplateRef(name='wx-qc-toolkit', template='pull-station', cluster_scope=True),
             arguments=[Parameter(name='station', value='{{item}}'),
                        Parameter(name='day', value='{{workflow.parameters.day}}')],
             with_param='{{workflow.parameters.stations}}')
        qm(name='qc-merge')
        publish(name='publish', when='{{workflow.parameters.publish}} == true')

if __name__ == '__main__':
    base = os.path.splitext(__file__)[0]
    with open(base + '_cwt.yaml', 'w') as f:
        f.write(cwt.to_yaml())
    with open(base + '.yaml', 'w') as f:
        f.write(cw.to_yaml())
