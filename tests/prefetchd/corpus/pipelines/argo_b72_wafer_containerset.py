# ruff: noqa
"""Wafer-map defect classifier retrain (Hera, Argo Workflow), one file.

- The file holds the artifact-repository ConfigMap `fab-artifact-repos` and
  the Workflow; spec.artifactRepositoryRef picks its key `ceph-rgw` (bucket
  fab-ml-artifacts on the in-cluster Ceph RGW), so key-only artifacts
  resolve there (the annotation default `scratch` is not used).
- list-lots is a `data` template listing the week's lot files on S3
  (artifactPaths + filter); score-lot loops over its result (withParam).
- train is a containerSet: sync-labels (aws CLI) -> train -> main (upload),
  sharing an emptyDir; its pretrained backbone is a key-only input artifact
  and the model a key-only output artifact.
- qa is a steps template whose one step runs a nested DAG (holdout-eval
  with a key-only input artifact, drift-check with the aws CLI).

Generate: python argo_b72_wafer_containerset.py
"""
import os

from hera.workflows import (
    DAG, Artifact, Container, ContainerNode, ContainerSet, Data, Parameter, S3Artifact, Step, Steps,
    Workflow,
)
from hera.workflows import models as m

IMG = 'ghcr.io/fab-ml/wafer:0.14.1'

with Workflow(
    generate_name='wafer-defect-retrain-',
    entrypoint='main',
    artifact_repository_ref=m.ArtifactRepositoryRef(config_map='fab-artifact-repos', key='ceph-rgw'),
    arguments=[Parameter(name='week', value='2025-w10')],
) as wf:
    list_lots = Data(
        name='list-lots',
        source=m.ArtifactPaths(name='lots', s3=m.S3Artifact(bucket='fab-wafer-maps',
                                                             key='lots/{{workflow.parameters.week}}/')),
        transformations=["filter(data, {# endsWith '.parquet'})"],
    )
    train = ContainerSet(
        name='train-classifier',
        volumes=[m.Volume(name='work', empty_dir=m.EmptyDirVolumeSource())],
        volume_mounts=[m.VolumeMount(name='work', mount_path='/work')],
        inputs=[S3Artifact(name='pretrained', path='/work/pretrained', key='pretrained/resnet18-wafer/v2/')],
        outputs=[S3Artifact(name='model', path='/work/model.tar.gz',
                            key='models/{{workflow.name}}/model.tar.gz')],
    )
    with train:
        sync = ContainerNode(name='sync-labels', image='amazon/aws-cli:2.17.20',
                             command=['aws', 's3', 'cp', '--only-show-errors',
                                      's3://fab-wafer-maps/labels/wm811k-relabel-v3.csv', '/work/labels.csv'])
        fit = ContainerNode(name='train', image=IMG,
                            command=['python', '-m', 'wafer.train'],
                            args=['--labels', '/work/labels.csv',
                                  '--maps-root', 's3://fab-wafer-maps/lots/{{workflow.parameters.week}}/',
                                  '--init', '/work/pretrained', '--out', '/work/model'])
        pack = ContainerNode(name='main', image='busybox:1.36',
                             command=['tar', 'czf', '/work/model.tar.gz', '-C', '/work/model', '.'])
        sync >> fit >> pack
    score = Container(
        name='score-lot',
        image=IMG,
        inputs=[Parameter(name='lot'), Artifact(name='model', path='/in/model.tar.gz')],
        command=['python', '-m', 'wafer.score'],
        args=['--model', '/in/model.tar.gz', '--lot', 's3://fab-wafer-maps/{{inputs.parameters.lot}}',
              '--out', 's3://fab-wafer-scores/{{workflow.parameters.week}}/'],
    )
    holdout = Container(
        name='holdout-eval',
        image=IMG,
        inputs=[Artifact(name='model', path='/in/model.tar.gz'),
                S3Artifact(name='holdout', path='/in/holdout.parquet', key='holdout/wm811k-test.parquet')],
        command=['python', '-m', 'wafer.evaluate'],
        args=['--model', '/in/model.tar.gz', '--data', '/in/holdout.parquet', '--report', '/tmp/report.json'],
    )
    drift = Container(
        name='drift-check',
        image='amazon/aws-cli:2.17.20',
        command=['sh', '-c'],
        args=['aws s3 cp --only-show-errors s3://fab-wafer-maps/reference/embeddings-w09.npy /tmp/ref.npy && '
              'python3 -m wafer.drift --ref /tmp/ref.npy --week {{workflow.parameters.week}}'],
    )
    with DAG(name='qa-dag', inputs=[Artifact(name='model')]) as qa_dag:
        holdout(name='holdout-eval',
                arguments=[Artifact(name='model', from_='{{inputs.artifacts.model}}')])
        drift(name='drift-check')
    with Steps(name='qa', inputs=[Artifact(name='model')]) as qa:
        Step(name='run-qa', template=qa_dag,
             arguments=[Artifact(name='model', from_='{{inputs.artifacts.model}}')])
    with DAG(name='main'):
        ll = list_lots(name='list-lots')
        tr = train(name='train')
        sc = score(name='score',
                   arguments=[Parameter(name='lot', value='{{item}}'),
                              tr.get_artifact('model').with_name('model')],
                   with_param='{{tasks.list-lots.outputs.result}}')
        q = qa(name='qa', arguments=[tr.get_artifact('model').with_name('model')])
        [ll, tr] >> sc
        tr >> q

REPOS = {
    'apiVersion': 'v1', 'kind': 'ConfigMap',
    'metadata': {'name': 'fab-artifact-repos',
                 'annotations': {'workflows.argoproj.io/default-artifact-repository': 'scratch'}},
    'data': {
        'scratch': 's3:\n  bucket: fab-ml-scratch\n  endpoint: s3.eu-central-1.amazonaws.com\n',
        'ceph-rgw': 's3:\n  bucket: fab-ml-artifacts\n  endpoint: rook-ceph-rgw-fab.storage.svc:80\n  insecure: true\n',
    },
}

if __name__ == '__main__':
    import yaml
    with open(os.path.splitext(__file__)[0] + '.yaml', 'w') as f:
        f.write(yaml.safe_dump(REPOS, sort_keys=False))
        f.write('---\n')
        f.write(wf.to_yaml())
