# ruff: noqa
"""DETR object-detection training on COCO as an Argo WorkflowTemplate (Hera, DAG).

- Workflow-level argument artifact (S3 annotations) forwarded from the DAG's
  inputs to a task with `from: {{inputs.artifacts.annotations}}`, plus a GCS
  input artifact.
- A `suspend` approval gate between data checks and training.
- Distributed training launched as a Kubeflow PyTorchJob by a `resource`
  template (the job's pods mount the dataset PVC, not the step).
- A `containerSet` evaluation: one container downloads the run's checkpoint
  (location built from `{{workflow.name}}`), the main one reads a dataset PVC
  declared in the template's own `volumes` with the claim name taken from a
  workflow parameter.
- ONNX export with `--weights` (read) and `--export-dir` (write).

Generate: python argo_blind_dist_train_wftmpl.py  -> argo_blind_dist_train_wftmpl.yaml
"""
import os

from hera.workflows import (DAG, Artifact, Container, ContainerNode, ContainerSet, GCSArtifact, Parameter,
                            Resource, S3Artifact, Suspend, WorkflowTemplate)
from hera.workflows import models as m

DETR = 'ghcr.io/example/detr:1.2.0'

PYTORCHJOB = """apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  generateName: detr-train-
spec:
  runPolicy:
    cleanPodPolicy: Running
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: OnFailure
      template:
        spec:
          containers:
          - name: pytorch
            image: ghcr.io/example/detr:1.2.0
            args: ["--data", "/data/coco2017", "--epochs", "{{workflow.parameters.epochs}}",
                   "--checkpoint-dir", "{{workflow.parameters.ckpt-root}}/{{workflow.name}}/"]
            resources:
              limits:
                nvidia.com/gpu: 8
            volumeMounts:
            - name: coco
              mountPath: /data
              readOnly: true
          volumes:
          - name: coco
            persistentVolumeClaim:
              claimName: "{{workflow.parameters.dataset-pvc}}"
    Worker:
      replicas: 3
      restartPolicy: OnFailure
      template:
        spec:
          containers:
          - name: pytorch
            image: ghcr.io/example/detr:1.2.0
            args: ["--data", "/data/coco2017", "--epochs", "{{workflow.parameters.epochs}}",
                   "--checkpoint-dir", "{{workflow.parameters.ckpt-root}}/{{workflow.name}}/"]
            resources:
              limits:
                nvidia.com/gpu: 8
            volumeMounts:
            - name: coco
              mountPath: /data
              readOnly: true
          volumes:
          - name: coco
            persistentVolumeClaim:
              claimName: "{{workflow.parameters.dataset-pvc}}"
"""

with WorkflowTemplate(
    name='detr-distributed-train',
    entrypoint='main',
    arguments=[
        Parameter(name='dataset-pvc', value='coco-2017-ro'),
        Parameter(name='epochs', value='50'),
        Parameter(name='ckpt-root', value='s3://example-vision-ckpt/detr'),
        S3Artifact(name='annotations', bucket='example-vision', endpoint='s3.amazonaws.com',
                   key='coco2017/annotations/instances_train2017.json'),
    ],
) as wt:
    check = Container(
        name='check-annotations', image=DETR, command=['python', '-m', 'detr.check_annotations'],
        args=['--annotations', '/in/instances.json', '--label-map', '/in/labelmap.json'],
        inputs=[Artifact(name='annotations', path='/in/instances.json'),
                GCSArtifact(name='class-map', path='/in/labelmap.json', bucket='example-vision-public',
                            key='coco/labelmap.json')],
    )
    approve = Suspend(name='approve')
    launch = Resource(
        name='launch-pytorchjob', action='create', set_owner_reference=True,
        success_condition='status.replicaStatuses.Master.succeeded > 0',
        failure_condition='status.replicaStatuses.Master.failed > 0',
        manifest=PYTORCHJOB,
    )
    with ContainerSet(
        name='evaluate',
        volumes=[m.Volume(name='coco', persistent_volume_claim=m.PersistentVolumeClaimVolumeSource(
                     claim_name='{{workflow.parameters.dataset-pvc}}')),
                 m.Volume(name='workspace', empty_dir=m.EmptyDirVolumeSource())],
    ) as ev:
        dl = ContainerNode(
            name='download', image='amazon/aws-cli:2.15.30', command=['aws', 's3', 'cp'],
            args=['{{workflow.parameters.ckpt-root}}/{{workflow.name}}/last.pt', '/workspace/last.pt'],
            volume_mounts=[m.VolumeMount(name='workspace', mount_path='/workspace')],
        )
        mn = ContainerNode(
            name='main', image=DETR, command=['python', '-m', 'detr.evaluate'],
            args=['--weights', '/workspace/last.pt', '--images', '/data/coco2017/val2017',
                  '--annotations', '/data/coco2017/annotations/instances_val2017.json'],
            volume_mounts=[m.VolumeMount(name='workspace', mount_path='/workspace'),
                           m.VolumeMount(name='coco', mount_path='/data', read_only=True)],
        )
        dl >> mn
    export = Container(
        name='export-onnx', image=DETR, command=['python', '-m', 'detr.export'],
        args=['--weights', '{{workflow.parameters.ckpt-root}}/best.pt',
              '--opset', '17', '--export-dir', 's3://example-vision-models/detr/onnx/'],
        node_selector={'kubernetes.io/arch': 'amd64'},
    )
    with DAG(name='main', inputs=[Artifact(name='annotations')]):
        c = check(name='check-annotations',
                  arguments=[Artifact(name='annotations', from_='{{inputs.artifacts.annotations}}')])
        a = approve(name='approve')
        l = launch(name='train')
        e = ev(name='evaluate')
        x = export(name='export-onnx')
        c >> a >> l >> e >> x

if __name__ == '__main__':
    with open(os.path.splitext(__file__)[0] + '.yaml', 'w') as fh:
        fh.write(wt.to_yaml())
