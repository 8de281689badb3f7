# ruff: noqa
"""CLIP ViT-B/32 pretraining on WebDataset shards (KFP v2 + kfp-kubernetes).

The data team publishes LAION-en and CC12M as WebDataset tar shards, one
folder per monthly dataset version, plus a `_shards.txt` manifest listing
every shard URL. The pipeline checks the manifest against the expected shard
count, trains open_clip on the two sources joined with `::` (open_clip's
multi-source syntax) streamed through `pipe:aws s3 cp ... -`, runs an
ImageNet zero-shot eval from parquet through `datasets.load_dataset`, and
uploads the checkpoints. Checkpoints live on a per-run PVC; S3 credentials
come from a Secret as env vars.

Compile: python kfp2_b69_clip_wds_pretrain.py  -> kfp2_b69_clip_wds_pretrain.yaml
"""
import os

from kfp import compiler, dsl, kubernetes
from kfp.dsl import Metrics, Output

TRAIN_IMAGE = 'ghcr.io/acme-ml/openclip-train:2.24.0'
AWS_SECRET = 'mm-data-reader'
AWS_KEYS = {'AWS_ACCESS_KEY_ID': 'AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY': 'AWS_SECRET_ACCESS_KEY'}


@dsl.component(base_image='python:3.11-slim', packages_to_install=['s3fs==2024.6.1'])
def check_shard_manifest(manifest_uri: str, expected_shards: int) -> int:
    import s3fs
    fs = s3fs.S3FileSystem()
    with fs.open(manifest_uri, 'r') as f:
        shards = [line.strip() for line in f if line.strip()]
    missing = [s for s in shards if not fs.exists(s)]
    if missing or len(shards) != expected_shards:
        raise RuntimeError(f'{len(missing)} missing of {len(shards)} listed, expected {expected_shards}')
    return len(shards)


@dsl.container_component
def train_clip(train_data: str, val_data: str, upsampling: str, logs_dir: str, run_name: str):
    return dsl.ContainerSpec(
        image=TRAIN_IMAGE,
        command=['torchrun', '--nproc_per_node=8', '-m', 'open_clip_train.main'],
        args=['--model', 'ViT-B-32', '--dataset-type', 'webdataset',
              '--train-data', train_data,
              '--train-data-upsampling-factors', upsampling,
              '--dataset-resampled',
              '--train-num-samples', '200000000',
              '--val-data', val_data,
              '--val-num-samples', '25000',
              '--batch-size', '512', '--epochs', '32', '--warmup', '2000',
              '--precision', 'amp_bf16', '--workers', '8',
              '--logs', logs_dir, '--name', run_name, '--save-frequency', '4'])


@dsl.component(base_image=TRAIN_IMAGE, packages_to_install=['datasets==2.20.0', 's3fs==2024.6.1'])
def zero_shot_eval(ckpt_path: str, eval_files: str, metrics: Output[Metrics]):
    from datasets import load_dataset
    from open_clip_train.zero_shot import run_imagenet_zero_shot
    val = load_dataset('parquet', data_files={'validation': eval_files}, split='validation')
    classnames = load_dataset('json', data_files='s3://acme-mm-evals/imagenet-1k/classnames.jsonl', split='train')
    top1, top5 = run_imagenet_zero_shot(ckpt_path, val, classnames['name'])
    metrics.log_metric('imagenet_zeroshot_top1', top1)
    metrics.log_metric('imagenet_zeroshot_top5', top5)


@dsl.container_component
def upload_checkpoints(ckpt_dir: str, dest: str):
    return dsl.ContainerSpec(
        image='amazon/aws-cli:2.15.30',
        command=['aws', 's3', 'cp', '--recursive', '--exclude', '*', '--include', 'epoch_*.pt'],
        args=[ckpt_dir, dest])


@dsl.pipeline(name='clip-vitb32-wds')
def clip_pretrain(data_bucket: str = 'acme-mm-data',
                  dataset_version: str = '2026-11',
                  expected_shards: int = 512,
                  run_name: str = 'vitb32-laion-cc12m-r2'):
    pvc = kubernetes.CreatePVC(pvc_name_suffix='-clip-ckpt', access_modes=['ReadWriteOnce'],
                               size='200Gi', storage_class_name='gp3-fast')

    check = check_shard_manifest(
        manifest_uri=f's3://{data_bucket}/laion-en/{dataset_version}/train/_shards.txt',
        expected_shards=expected_shards)
    kubernetes.use_secret_as_env(check, secret_name=AWS_SECRET, secret_key_to_env=AWS_KEYS)

    train = train_clip(
        train_data=(f'pipe:aws s3 cp s3://{data_bucket}/laion-en/{dataset_version}/train/shard-{{000000..000511}}.tar -'
                    f'::pipe:aws s3 cp s3://{data_bucket}/cc12m/v3/shard-{{00000..01099}}.tar -'),
        val_data='pipe:aws s3 cp s3://acme-mm-data/coco-captions/2017/val/shard-{000000..000024}.tar -',
        upsampling='1::2',
        logs_dir='/ckpt/logs',
        run_name=run_name).after(check)
    train.set_accelerator_type('nvidia.com/gpu').set_accelerator_limit(8).set_memory_limit('900G')
    kubernetes.mount_pvc(train, pvc_name=pvc.outputs['name'], mount_path='/ckpt')
    kubernetes.use_secret_as_env(train, secret_name=AWS_SECRET, secret_key_to_env=AWS_KEYS)

    ev = zero_shot_eval(ckpt_path=f'/ckpt/logs/{run_name}/checkpoints/epoch_32.pt',
                        eval_files='s3://acme-mm-evals/imagenet-1k/val/part-*.parquet').after(train)
    ev.set_accelerator_type('nvidia.com/gpu').set_accelerator_limit(1)
    kubernetes.mount_pvc(ev, pvc_name=pvc.outputs['name'], mount_path='/ckpt')
    kubernetes.use_secret_as_env(ev, secret_name=AWS_SECRET, secret_key_to_env=AWS_KEYS)

    up = upload_checkpoints(ckpt_dir=f'/ckpt/logs/{run_name}/checkpoints/',
                            dest=f's3://acme-mm-models/clip/{run_name}/').after(ev)
    kubernetes.mount_pvc(up, pvc_name=pvc.outputs['name'], mount_path='/ckpt')
    kubernetes.use_secret_as_env(up, secret_name='mm-model-writer', secret_key_to_env=AWS_KEYS)

    kubernetes.DeletePVC(pvc_name=pvc.outputs['name']).after(up)


if __name__ == '__main__':
    compiler.Compiler().compile(clip_pretrain, os.path.splitext(__file__)[0] + '.yaml')
