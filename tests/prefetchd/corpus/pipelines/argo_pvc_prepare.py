# ruff: noqa  (pipeline source in the SDK's own idiom: mutable defaults, typing.List)
"""Dataset staging onto an existing PVC and a per-run scratch claim (Hera, steps).

An existing claim mounted read-write by the stager (which `aws s3 sync`s into
it) and read-only by two trainers; a volumeClaimTemplate for scratch; an
export step that `aws s3 cp`s results out (its flag names say nothing, the copy
direction does).

Generate: python argo_pvc_prepare.py  -> argo_pvc_prepare.yaml
"""
import os

from hera.workflows import Container, Parameter, Steps, Workflow
from hera.workflows import models as m

IMAGE = 'ghcr.io/example/seg-train:4.2.0'
DATA = m.VolumeMount(name='coco', mount_path='/data', sub_path='coco2017')
DATA_RO = m.VolumeMount(name='coco', mount_path='/data', sub_path='coco2017', read_only=True)
SCRATCH = m.VolumeMount(name='scratch', mount_path='/scratch')

with Workflow(
    generate_name='coco-seg-',
    entrypoint='main',
    arguments=[Parameter(name='src', value='s3://example-vision/coco2017/')],
    volumes=[m.Volume(name='coco', persistent_volume_claim=m.PersistentVolumeClaimVolumeSource(claim_name='vision-datasets'))],
    volume_claim_templates=[m.PersistentVolumeClaim(
        metadata=m.ObjectMeta(name='scratch'),
        spec=m.PersistentVolumeClaimSpec(access_modes=['ReadWriteOnce'],
                                         resources=m.VolumeResourceRequirements(requests={'storage': m.Quantity('100Gi')})))],
) as w:
    stage = Container(name='stage', image='amazon/aws-cli:2.15.30', command=['aws', 's3', 'sync'],
                      args=['{{workflow.parameters.src}}', '/data', '--only-show-errors'], volume_mounts=[DATA])
    tr_a = Container(name='train-mask', image=IMAGE, command=['python', '-m', 'seg.train'],
                     args=['--arch', 'maskrcnn', '--images', '/data/train2017', '--work', '/scratch/mask'],
                     volume_mounts=[DATA_RO, SCRATCH])
    tr_b = Container(name='train-detr', image=IMAGE, command=['python', '-m', 'seg.train'],
                     args=['--arch', 'detr', '--images', '/data/train2017', '--work', '/scratch/detr'],
                     volume_mounts=[DATA_RO, SCRATCH])
    exp = Container(name='collect', image='amazon/aws-cli:2.15.30', command=['sh', '-c'],
                    args=['aws s3 cp /scratch s3://example-vision-results/coco-seg/ --recursive'],
                    volume_mounts=[SCRATCH])
    with Steps(name='main') as s:
        stage(name='stage')
        with s.parallel():
            tr_a(name='train-mask')
            tr_b(name='train-detr')
        exp(name='collect')

if __name__ == '__main__':
    with open(os.path.splitext(__file__)[0] + '.yaml', 'w') as f:
        f.write(w.to_yaml())
