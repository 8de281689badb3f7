# ruff: noqa
"""Chest X-ray multi-label classifier: DenseNet-121 fine-tuning with a per-run PVC (KFP v2 + kfp-kubernetes).

A work PVC is created for the run; the studies are synced from S3 onto it,
resized to 512 px in place and used for training. The label file is
validated straight from S3. ImageNet/CXR pretrained weights come in through
an importer. After training the PVC is deleted; per-pathology decision
thresholds are calibrated in a static loop, the model is evaluated on the
adjudicated test set and exported only if the macro AUROC passes.

Compile: python kfp2_b62_chest_xray.py  -> kfp2_b62_chest_xray.yaml
"""
import os
from typing import List

from kfp import compiler, dsl, kubernetes
from kfp.dsl import Input, Model, Output

IMAGE = 'ghcr.io/acme/cxr-train:1.9.0'
PRETRAINED_URI = 's3://acme-med-models/densenet121/cxr-pretrained-v3/'
VAL_MANIFEST_URI = 's3://acme-med-imaging/cxr14/splits/val_manifest.csv'
PATHOLOGIES = ['atelectasis', 'cardiomegaly', 'effusion', 'pneumonia']


@dsl.container_component
def download_studies(src: str, dst: str):
    return dsl.ContainerSpec(image='amazon/aws-cli:2.15.30', command=['aws', 's3', 'sync', '--only-show-errors'],
                             args=[src, dst])


@dsl.component(base_image='ghcr.io/acme/cxr-tools:0.6.2')
def validate_labels(labels_uri: str, expected_classes: int) -> int:
    import pandas as pd
    labels = pd.read_csv(labels_uri)
    if labels.shape[1] - 1 != expected_classes:
        raise ValueError('unexpected number of label columns')
    return len(labels)


@dsl.component(base_image='ghcr.io/acme/cxr-tools:0.6.2')
def preprocess(image_dir: str, out_dir: str, size: int):
    import subprocess
    subprocess.run(['python', '-m', 'cxr_tools.resize', '--src', image_dir, '--dst', out_dir,
                    '--size', str(size)], check=True)


@dsl.component(base_image=IMAGE)
def train_densenet(data_dir: str, labels_uri: str, pretrained: Input[Model], epochs: int, model: Output[Model]):
    import subprocess
    subprocess.run(['python', '-m', 'cxr.train', '--images', data_dir, '--labels', labels_uri,
                    '--init', pretrained.path, '--epochs', str(epochs), '--out', model.path], check=True)


@dsl.component(base_image=IMAGE)
def calibrate_threshold(model: Input[Model], pathology: str, val_manifest_uri: str) -> float:
    import subprocess
    out = subprocess.run(['python', '-m', 'cxr.calibrate', '--model', model.path, '--pathology', pathology,
                          '--manifest', val_manifest_uri], check=True, capture_output=True, text=True)
    return float(out.stdout.strip())


@dsl.component(base_image=IMAGE)
def evaluate(model: Input[Model], test_uri: str) -> float:
    import subprocess
    out = subprocess.run(['python', '-m', 'cxr.evaluate', '--model', model.path, '--test', test_uri],
                         check=True, capture_output=True, text=True)
    return float(out.stdout.strip())


@dsl.component(base_image=IMAGE)
def export_model(model: Input[Model], thresholds: List[float], export_uri: str):
    import json, subprocess
    with open('/tmp/thresholds.json', 'w') as f:
        json.dump(thresholds, f)
    subprocess.run(['aws', 's3', 'cp', model.path, export_uri + 'model.pt'], check=True)
    subprocess.run(['aws', 's3', 'cp', '/tmp/thresholds.json', export_uri + 'thresholds.json'], check=True)


@dsl.pipeline(name='cxr-densenet-finetune')
def cxr_pipeline(studies_uri: str = 's3://acme-med-imaging/cxr14/images/',
                 labels_uri: str = 's3://acme-med-imaging/cxr14/labels/train_labels.csv',
                 test_uri: str = 's3://acme-med-imaging/cxr14/test-adjudicated/',
                 epochs: int = 12,
                 min_auroc: float = 0.85):
    pvc = kubernetes.CreatePVC(pvc_name_suffix='-cxr-work', access_modes=['ReadWriteOnce'],
                               size='200Gi', storage_class_name='gp3')

    dl = download_studies(src=studies_uri, dst='/work/raw')
    kubernetes.mount_pvc(dl, pvc_name=pvc.outputs['name'], mount_path='/work')

    vl = validate_labels(labels_uri=labels_uri, expected_classes=14)

    pp = preprocess(image_dir='/work/raw', out_dir='/work/512', size=512).after(dl)
    kubernetes.mount_pvc(pp, pvc_name=pvc.outputs['name'], mount_path='/work')

    weights = dsl.importer(artifact_uri=PRETRAINED_URI, artifact_class=Model, reimport=False)

    tr = train_densenet(data_dir='/work/512', labels_uri=labels_uri, pretrained=weights.output,
                        epochs=epochs).after(pp, vl)
    tr.set_accelerator_type('nvidia.com/gpu').set_accelerator_limit(1)
    kubernetes.mount_pvc(tr, pvc_name=pvc.outputs['name'], mount_path='/work')

    kubernetes.DeletePVC(pvc_name=pvc.outputs['name']).after(tr)

    with dsl.ParallelFor(PATHOLOGIES) as pathology:
        cal = calibrate_threshold(model=tr.outputs['model'], pathology=pathology,
                                  val_manifest_uri=VAL_MANIFEST_URI)

    ev = evaluate(model=tr.outputs['model'], test_uri=test_uri)

    with dsl.If(ev.output >= min_auroc):
        export_model(model=tr.outputs['model'], thresholds=dsl.Collected(cal.output),
                     export_uri='s3://acme-med-models/cxr-densenet/candidates/')


if __name__ == '__main__':
    compiler.Compiler().compile(cxr_pipeline, os.path.splitext(__file__)[0] + '.yaml')
