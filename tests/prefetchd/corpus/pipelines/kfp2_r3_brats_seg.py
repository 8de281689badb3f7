# ruff: noqa
"""KFP v2 (blind test r3): BraTS 2023 glioma segmentation with SwinUNETR (MONAI).

Idioms: a YAML split config read from S3 that lists case folders (relative to a PVC),
an existing read-only PVC mounted with kubernetes.mount_pvc + sub_path, a dataclass
config inside the component whose default carries the pretrained weights location,
torch.load through fsspec, os.environ.get with a default while the task sets the
variable, dsl.importer with metadata, UPath '/' joins, dsl.If on a task output.

Compile: /tmp/kfp2/bin/python kfp2_r3_brats_seg.py
"""
import os
from typing import NamedTuple

from kfp import compiler, dsl, kubernetes

MONAI = 'ghcr.io/acme-radiology/monai-train:1.3.2-cu121'
PY = 'python:3.11-slim'


@dsl.component(base_image=PY, packages_to_install=['fsspec==2024.6.0', 's3fs==2024.6.0', 'pyyaml==6.0.1'])
def read_split(split_config: str, fold: int) -> NamedTuple('Split', [('train_cases', list), ('val_cases', list)]):
    """The split YAML lists case folders relative to the dataset root on the PVC."""
    from collections import namedtuple

    import fsspec
    import yaml

    with fsspec.open(split_config, 'r') as f:
        cfg = yaml.safe_load(f)
    folds = cfg['folds']
    val = folds[fold]
    train = [c for i, f in enumerate(folds) if i != fold for c in f]
    return namedtuple('Split', ['train_cases', 'val_cases'])(train, val)


@dsl.component(base_image=MONAI)
def preprocess(train_cases: list, val_cases: list, spacing: str, volumes: dsl.Output[dsl.Dataset]):
    import os

    import numpy as np
    from monai import transforms as T

    root = '/data'  # BraTS-GLI folder of the mounted claim
    load = T.Compose([T.LoadImaged(keys=['img', 'seg']), T.EnsureChannelFirstd(keys=['img', 'seg']),
                      T.Spacingd(keys=['img', 'seg'], pixdim=[float(s) for s in spacing.split(',')])])
    os.makedirs(volumes.path, exist_ok=True)
    for split, cases in (('train', train_cases), ('val', val_cases)):
        for case in cases:
            mods = [os.path.join(root, case, f'{case}-{m}.nii.gz') for m in ('t1n', 't1c', 't2w', 't2f')]
            d = load({'img': mods, 'seg': os.path.join(root, case, f'{case}-seg.nii.gz')})
            np.savez_compressed(os.path.join(volumes.path, f'{split}-{case}.npz'), img=d['img'], seg=d['seg'])


@dsl.component(base_image=MONAI)
def train_swinunetr(volumes: dsl.Input[dsl.Dataset], train_cfg: dict, model: dsl.Output[dsl.Model]):
    import json
    import os
    from dataclasses import dataclass, field

    import fsspec
    import torch
    from monai.networks.nets import SwinUNETR

    @dataclass
    class TrainConfig:
        epochs: int = 300
        lr: float = 1e-4
        roi: list = field(default_factory=lambda: [128, 128, 128])
        pretrained: str = 's3://acme-radiology-models/swinunetr/btcv-ssl/model_swinvit.pt'

    cfg = TrainConfig(**train_cfg)
    label_map_uri = os.environ.get('LABEL_MAP_URI', 's3://acme-radiology-configs/brats/labels-v1.json')
    with fsspec.open(label_map_uri, 'r') as f:
        labels = json.load(f)
    net = SwinUNETR(img_size=cfg.roi, in_channels=4, out_channels=len(labels), feature_size=48)
    with fsspec.open(cfg.pretrained, 'rb') as f:
        net.load_from(torch.load(f, map_location='cpu'))
    from brats_train import fit  # in the image
    fit(net, volumes.path, epochs=cfg.epochs, lr=cfg.lr, out_dir=model.path)


@dsl.component(base_image=MONAI, packages_to_install=['universal-pathlib==0.2.2'])
def evaluate(model: dsl.Input[dsl.Model], baseline: dsl.Input[dsl.Model], holdout_root: str,
             run_name: str) -> float:
    import json

    import pandas as pd
    from upath import UPath
    from brats_train import dice_on_folder

    root = UPath(holdout_root)
    manifest = pd.read_csv(str(root / 'manifest.csv'))
    root.fs.get(str(root / 'images'), '/tmp/holdout/images', recursive=True)
    ours = dice_on_folder(model.path, '/tmp/holdout/images', manifest)
    ref = dice_on_folder(baseline.path, '/tmp/holdout/images', manifest)
    out = UPath('s3://acme-radiology-reports') / 'brats' / run_name / 'dice.json'
    out.write_text(json.dumps({'swinunetr': ours, 'nnunet': ref}))
    return ours - ref


@dsl.container_component
def register_model(model: dsl.Input[dsl.Model], registry_prefix: str, run_name: str):
    return dsl.ContainerSpec(
        image='amazon/aws-cli:2.17.0',
        command=['sh', '-c'],
        args=['aws s3 cp --recursive "$0" "$1/$2/"', model.path, registry_prefix, run_name],
    )


@dsl.pipeline(name='brats23-swinunetr')
def brats_seg(split_config: str = 's3://acme-radiology-configs/brats/2023/split-5fold-v4.yaml',
              fold: int = 0,
              spacing: str = '1.0,1.0,1.0',
              train_cfg: dict = {'epochs': 300, 'lr': 0.0002},
              holdout_root: str = 's3://acme-radiology-data/brats2023/holdout-v2',
              registry_prefix: str = 's3://acme-radiology-models/registry/swinunetr',
              run_name: str = 'brats23-f0-r3',
              data_pvc: str = 'brats-2023-ro'):
    split = read_split(split_config=split_config, fold=fold)
    prep = preprocess(train_cases=split.outputs['train_cases'], val_cases=split.outputs['val_cases'],
                      spacing=spacing)
    kubernetes.mount_pvc(prep, pvc_name=data_pvc, mount_path='/data', sub_path='BraTS-GLI')
    train = train_swinunetr(volumes=prep.outputs['volumes'], train_cfg=train_cfg)
    train.set_env_variable('LABEL_MAP_URI', 's3://acme-radiology-configs/brats/labels-v2.json')
    train.set_accelerator_type('nvidia.com/gpu').set_accelerator_limit(4)
    base = dsl.importer(artifact_uri='s3://acme-radiology-models/nnunet/brats23/fold0/',
                        artifact_class=dsl.Model, reimport=False,
                        metadata={'framework': 'nnunetv2', 'trainer': 'nnUNetTrainer_250epochs'})
    ev = evaluate(model=train.outputs['model'], baseline=base.output, holdout_root=holdout_root,
                  run_name=run_name)
    with dsl.If(ev.output > 0.0, name='beats-nnunet'):
        register_model(model=train.outputs['model'], registry_prefix=registry_prefix, run_name=run_name)


if __name__ == '__main__':
    compiler.Compiler().compile(brats_seg, os.path.splitext(__file__)[0] + '.yaml')
