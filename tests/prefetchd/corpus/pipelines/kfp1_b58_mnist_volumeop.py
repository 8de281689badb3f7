# ruff: noqa
"""MNIST learning-rate sweep on a VolumeOp, adapted from the KFP v1 "volume_ops",
"parallel loops" (ParallelFor over a pipeline parameter) and Katib MNIST samples
(KFP v1 SDK -> Argo).

The data are synced from MinIO into the run's volume; preprocessing and one
training per learning rate use it; evaluation also mounts an existing PVC
with the reference test set; the winner is uploaded when good enough and the
volume is deleted. The component.yaml for training still declares the
sample's `Data uri` input with an S3 default; nothing passes or uses it (the
data come from the volume), and KFP v1 turns it into a raw input artifact.

Compile (kfp 1.8.x): python kfp1_b58_mnist_volumeop.py  -> kfp1_b58_mnist_volumeop.yaml
"""
import os

import kfp
from kfp import dsl, onprem
from kfp.components import create_component_from_func, load_component_from_text
from kubernetes.client.models import V1EnvVar

IMAGE = 'docker.io/kubeflowkatib/pytorch-mnist-cpu:v0.17.0'
MINIO = 'http://minio-service.kubeflow:9000'

train_op = load_component_from_text('''
name: Train MNIST
inputs:
- {name: Data dir, type: String}
- {name: Learning rate, type: Float}
- {name: Model dir, type: String}
- {name: Data uri, type: String, default: 's3://ml-pipeline-playground/mnist/npz/'}
implementation:
  container:
    image: docker.io/kubeflowkatib/pytorch-mnist-cpu:v0.17.0
    command: [python, /opt/pytorch-mnist/mnist.py]
    args: [--data-dir, {inputValue: Data dir}, --lr, {inputValue: Learning rate},
           --save-model, {inputValue: Model dir}, --epochs, '3']
''')


def preprocess(raw_dir: str, out_dir: str):
    import os
    import numpy as np
    os.makedirs(out_dir, exist_ok=True)
    for split in ('train', 'test'):
        arr = np.load(os.path.join(raw_dir, f'{split}.npz'))
        np.savez_compressed(os.path.join(out_dir, f'{split}.npz'), x=arr['x'] / 255.0, y=arr['y'])


def evaluate(models_dir: str, test_dir: str) -> float:
    import glob, subprocess
    best = 0.0
    for m in glob.glob(models_dir + '/lr-*'):
        out = subprocess.run(['python', '/opt/pytorch-mnist/eval.py', '--model', m, '--test-dir', test_dir,
                              '--promote-to', models_dir + '/best'], check=True, capture_output=True, text=True)
        best = max(best, float(out.stdout.strip() or 0))
    return best


preprocess_op = create_component_from_func(preprocess, base_image=IMAGE)
evaluate_op = create_component_from_func(evaluate, base_image=IMAGE)


@dsl.pipeline(name='mnist-lr-sweep-volume')
def mnist_pipeline(mnist_uri: str = 's3://mnist-data/raw/v2/',
                   learning_rates: list = [0.01, 0.001, 0.0001],
                   export_uri: str = 's3://mnist-models/serving/cnn/',
                   min_accuracy: float = 0.98):
    vop = dsl.VolumeOp(name='create-pvc', resource_name='mnist-pvc', size='10Gi', modes=dsl.VOLUME_MODE_RWM)

    hello = dsl.ContainerOp(name='whalesay', image='docker/whalesay:latest', command=['cowsay'],
                            arguments=['mnist sweep starting'])

    sync = dsl.ContainerOp(name='sync-mnist', image='amazon/aws-cli:2.15.30', command=['aws', 's3', 'sync'],
                           arguments=[mnist_uri, '/mnt/data/raw'], pvolumes={'/mnt/data': vop.volume})
    sync.container.add_env_variable(V1EnvVar(name='AWS_ENDPOINT_URL', value=MINIO))

    prep = preprocess_op(raw_dir='/mnt/data/raw', out_dir='/mnt/data/npz')
    prep.add_pvolumes({'/mnt/data': sync.pvolume})

    with dsl.ParallelFor(learning_rates) as lr:
        tr = train_op(data_dir='/mnt/data/npz', learning_rate=lr, model_dir=f'/mnt/data/models/lr-{lr}')
        tr.add_pvolumes({'/mnt/data': prep.pvolume})
        tr.set_gpu_limit(1)

    ev = evaluate_op(models_dir='/mnt/data/models', test_dir='/reference/mnist/t10k').after(tr)
    ev.add_pvolumes({'/mnt/data': vop.volume})
    ev.apply(onprem.mount_pvc(pvc_name='mnist-reference', volume_name='reference', volume_mount_path='/reference'))

    with dsl.Condition(ev.output >= min_accuracy):
        up = dsl.ContainerOp(name='export-model', image='amazon/aws-cli:2.15.30',
                             command=['aws', 's3', 'cp', '--recursive'],
                             arguments=['/mnt/data/models/best', export_uri], pvolumes={'/mnt/data': vop.volume})
        up.container.add_env_variable(V1EnvVar(name='AWS_ENDPOINT_URL', value=MINIO))

    vop.delete().after(ev).after(up)


if __name__ == '__main__':
    kfp.compiler.Compiler().compile(mnist_pipeline, os.path.splitext(__file__)[0] + '.yaml')
