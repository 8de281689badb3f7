# ruff: noqa  (pipeline source in the SDK's own idiom: mutable defaults, typing.List)
"""A WorkflowTemplate (the library half of argo_wftmplref_run / argo_cron_wftmplref).

An ETL DAG: pull a Parquet snapshot with `gcloud storage cp` (gs -> local),
train on it, upload the model with `gsutil cp` (local -> gs).

Generate: python argo_wftmplref_lib.py  -> argo_wftmplref_lib.yaml
"""
import os

from hera.workflows import DAG, Container, Parameter, WorkflowTemplate

IMAGE = 'ghcr.io/example/churn:0.9.1'

with WorkflowTemplate(
    name='churn-train',
    entrypoint='pipeline',
    arguments=[Parameter(name='snapshot', value='gs://example-warehouse/churn/2024-06-01/'),
               Parameter(name='model_bucket', value='gs://example-models')],
) as wt:
    pull = Container(
        name='pull', image='gcr.io/google.com/cloudsdktool/google-cloud-cli:475.0.0',
        command=['gcloud', 'storage', 'cp', '-r'],
        args=['{{workflow.parameters.snapshot}}', '/data/'],
    )
    train = Container(
        name='train', image=IMAGE, command=['python', '-m', 'churn.train'],
        args=['--features', 's3://example-features/churn/v3/', '--model-dir', '/data/model'],
    )
    push = Container(
        name='push', image='gcr.io/google.com/cloudsdktool/google-cloud-cli:475.0.0',
        command=['gsutil', '-m', 'cp', '-r'],
        args=['/data/model', '{{workflow.parameters.model_bucket}}/churn/latest/'],
    )
    with DAG(name='pipeline'):
        pull(name='pull') >> train(name='train') >> push(name='push')

if __name__ == '__main__':
    with open(os.path.splitext(__file__)[0] + '.yaml', 'w') as f:
        f.write(wt.to_yaml())
