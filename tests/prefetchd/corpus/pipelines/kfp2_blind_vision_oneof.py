# ruff: noqa
"""KFP v2 (blind test): ViT image classification whose training branch is chosen
by a pipeline parameter (dsl.If / dsl.Elif / dsl.Else), outputs merged with
dsl.OneOf; URIs built from three pipeline parameters (f-strings) into container
args; WebDataset shards read through a `pipe:aws s3 cp URL -` url; an `sh -c`
sync-then-train script; pyarrow read_table of an s3 parquet; a robustness eval
ParallelFor over static corruption names with parallelism; boto3 upload_file of
the ONNX export; display names, pod labels.

Compile: /tmp/kfp2/bin/python kfp2_blind_vision_oneof.py
"""
import os

from kfp import compiler, dsl, kubernetes

IMAGE = 'ghcr.io/acme-ml/vision:1.14.2'


@dsl.container_component
def train_wds(shards: str, epochs: int, model: dsl.Output[dsl.Model]):
    return dsl.ContainerSpec(
        image=IMAGE,
        command=['torchrun', '--nproc_per_node=8', '-m', 'vision.train_vit'],
        args=['--train-shards', dsl.ConcatPlaceholder(['pipe:aws s3 cp ', shards, ' -']),
              '--epochs', epochs, '--model-out', model.path])


@dsl.container_component
def train_folder(data_uri: str, epochs: int, model: dsl.Output[dsl.Model]):
    return dsl.ContainerSpec(
        image=IMAGE,
        command=['sh', '-c'],
        args=['aws s3 sync "$0" /data/food101 --only-show-errors && '
              'python -m vision.train_folder --root /data/food101 --epochs "$1" --model-out "$2"',
              data_uri, epochs, model.path])


@dsl.component(base_image='python:3.11-slim', packages_to_install=['pyarrow==16.1.0', 'torch==2.3.1'])
def train_parquet(bucket: str, name: str, version: str, epochs: int, model: dsl.Output[dsl.Model]):
    import pyarrow.parquet as pq
    table = pq.read_table(f's3://{bucket}/{name}/{version}/train.parquet', columns=['image', 'label'])
    print('rows', table.num_rows, 'epochs', epochs)
    with open(model.path, 'wb') as f:
        f.write(b'\0')


@dsl.container_component
def robustness_eval(model: dsl.Input[dsl.Model], test_uri: str, corruption: str, metrics: dsl.Output[dsl.Metrics]):
    return dsl.ContainerSpec(
        image=IMAGE,
        command=['python', '-m', 'vision.eval'],
        args=['--model', model.path, '--test-data', test_uri, '--corruption', corruption,
              '--metrics-json', metrics.path])


@dsl.component(base_image='python:3.11-slim', packages_to_install=['boto3==1.34.131', 'torch==2.3.1', 'onnx==1.16.1'])
def convert_to_onnx(model: dsl.Input[dsl.Model], bucket: str, prefix: str):
    import boto3
    import shutil
    shutil.copy(model.path, '/tmp/model.onnx')
    boto3.client('s3').upload_file('/tmp/model.onnx', bucket, f'{prefix}/model.onnx')


@dsl.pipeline(name='vit-image-classification')
def vit_pipeline(dataset: str = 'imagenet1k', bucket: str = 'acme-vision', version: str = 'v3', epochs: int = 90):
    with dsl.If(dataset == 'imagenet1k'):
        a = train_wds(shards=f's3://{bucket}/{dataset}/{version}/train-{{000000..001023}}.tar', epochs=epochs)
        a.set_display_name('train-imagenet-wds')
        a.set_accelerator_type('nvidia.com/gpu').set_accelerator_limit(8)
    with dsl.Elif(dataset == 'food101'):
        b = train_folder(data_uri=f's3://{bucket}/{dataset}/{version}/images/', epochs=epochs)
        b.set_display_name('train-food101-folder')
        b.set_accelerator_type('nvidia.com/gpu').set_accelerator_limit(1)
    with dsl.Else():
        c = train_parquet(bucket=bucket, name=dataset, version=version, epochs=epochs)
        c.set_display_name('train-generic-parquet')
    model = dsl.OneOf(a.outputs['model'], b.outputs['model'], c.outputs['model'])
    with dsl.ParallelFor(items=['clean', 'gaussian_noise', 'motion_blur', 'jpeg'], parallelism=2) as corr:
        ev = robustness_eval(model=model, test_uri=f's3://{bucket}/{dataset}-c/{version}/{corr}/', corruption=corr)
        kubernetes.add_pod_label(ev, label_key='team', label_value='vision')
    onnx = convert_to_onnx(model=model, bucket='acme-model-registry', prefix=f'vit/{dataset}/{version}')
    onnx.after(ev)


if __name__ == '__main__':
    compiler.Compiler().compile(vit_pipeline, os.path.splitext(__file__)[0] + '.yaml')
