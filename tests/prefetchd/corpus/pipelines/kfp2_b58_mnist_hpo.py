# ruff: noqa
"""MNIST CNN hyper-parameter sweep, adapted from the Katib/KFP "MNIST" and
"Parallel loops" samples (KFP v2 + kfp-kubernetes).

Instead of a Katib Experiment the team runs a ParallelFor over a list of
trial dicts, all reading the preprocessed arrays from a per-run PVC that a
`component.yaml` step fills from MinIO. The best model is compared with a
baseline model (importer) on a reference test set held on an existing PVC,
and exported when it wins. `katib_namespace` is left from the sample.

Compile: python kfp2_b58_mnist_hpo.py  -> kfp2_b58_mnist_hpo.yaml
"""
import os
from typing import List

from kfp import compiler, components, dsl, kubernetes
from kfp.dsl import Input, Model, Output

IMAGE = 'docker.io/kubeflowkatib/pytorch-mnist-cpu:v0.17.0'

sync_op = components.load_component_from_text('''
name: Sync MNIST
description: aws s3 sync from the MinIO bucket into a mounted folder
inputs:
- {name: Source, type: String}
- {name: Dest dir, type: String, default: /work/raw}
implementation:
  container:
    image: amazon/aws-cli:2.15.30
    command: [aws, --endpoint-url, 'http://minio-service.kubeflow:9000', s3, sync, --no-progress]
    args: [{inputValue: Source}, {inputValue: Dest dir}]
''')


@dsl.component(base_image=IMAGE)
def preprocess(raw_dir: str, out_dir: str):
    import os
    import numpy as np
    os.makedirs(out_dir, exist_ok=True)
    for split in ('train', 'val'):
        arr = np.load(os.path.join(raw_dir, f'{split}.npz'))
        np.savez_compressed(os.path.join(out_dir, f'{split}.npz'), x=arr['x'] / 255.0, y=arr['y'])


@dsl.component(base_image=IMAGE)
def train(data_dir: str, lr: float, batch_size: int, model: Output[Model]) -> float:
    import subprocess
    out = subprocess.run(['python', '/opt/pytorch-mnist/mnist.py', '--data-dir', data_dir, '--lr', str(lr),
                          '--batch-size', str(batch_size), '--save-model', model.path],
                         check=True, capture_output=True, text=True)
    return float(out.stdout.strip().splitlines()[-1].split('=')[-1])


@dsl.component(base_image='python:3.11-slim')
def select_best(accuracies: List[float], models: Input[List[Model]], best: Output[Model]) -> float:
    import shutil
    i = max(range(len(accuracies)), key=lambda k: accuracies[k])
    shutil.copy(models[i].path, best.path)
    return accuracies[i]


@dsl.component(base_image=IMAGE)
def compare(candidate: Input[Model], baseline: Input[Model], test_dir: str) -> str:
    import subprocess
    res = subprocess.run(['python', '/opt/pytorch-mnist/compare.py', '--a', candidate.path, '--b', baseline.path,
                          '--test-dir', test_dir], check=True, capture_output=True, text=True)
    return 'promote' if 'candidate' in res.stdout else 'keep'


@dsl.container_component
def export_model(model: Input[Model], export_uri: str):
    return dsl.ContainerSpec(image='amazon/aws-cli:2.15.30',
                             command=['aws', '--endpoint-url', 'http://minio-service.kubeflow:9000', 's3', 'cp'],
                             args=[model.path, export_uri])


@dsl.component(base_image='python:3.11-slim')
def print_msg(msg: str):
    print(msg)


@dsl.pipeline(name='mnist-hpo-sweep')
def mnist_hpo(
    mnist_uri: str = 's3://mnist-data/raw/v2/',
    trials: list = [{'lr': 0.01, 'batch_size': 64}, {'lr': 0.001, 'batch_size': 128},
                    {'lr': 0.0005, 'batch_size': 256}],
    export_uri: str = 's3://mnist-models/serving/cnn/model.pt',
    reference_pvc: str = 'mnist-reference',
    katib_namespace: str = 'kubeflow-user-example-com',
):
    done = print_msg(msg='mnist-hpo-sweep finished')
    with dsl.ExitHandler(done, name='sweep'):
        pvc = kubernetes.CreatePVC(pvc_name_suffix='-mnist-work', access_modes=['ReadWriteMany'], size='10Gi',
                                   storage_class_name='nfs-client')
        sync = sync_op(source=mnist_uri, dest_dir='/work/raw')
        kubernetes.mount_pvc(sync, pvc_name=pvc.outputs['name'], mount_path='/work')

        prep = preprocess(raw_dir='/work/raw', out_dir='/work/npz').after(sync)
        kubernetes.mount_pvc(prep, pvc_name=pvc.outputs['name'], mount_path='/work')

        with dsl.ParallelFor(trials, parallelism=2) as trial:
            tr = train(data_dir='/work/npz', lr=trial.lr, batch_size=trial.batch_size).after(prep)
            kubernetes.mount_pvc(tr, pvc_name=pvc.outputs['name'], mount_path='/work')

        sel = select_best(accuracies=dsl.Collected(tr.outputs['Output']), models=dsl.Collected(tr.outputs['model']))
        kubernetes.DeletePVC(pvc_name=pvc.outputs['name']).after(sel)

        baseline = dsl.importer(artifact_uri='s3://mnist-models/baseline/cnn-v1/model.pt', artifact_class=Model,
                                reimport=False)
        cmp = compare(candidate=sel.outputs['best'], baseline=baseline.output, test_dir='/reference/t10k')
        kubernetes.mount_pvc(cmp, pvc_name=reference_pvc, mount_path='/reference', sub_path='mnist')
        with dsl.If(cmp.output == 'promote'):
            export_model(model=sel.outputs['best'], export_uri=export_uri)


if __name__ == '__main__':
    compiler.Compiler().compile(mnist_hpo, os.path.splitext(__file__)[0] + '.yaml')
