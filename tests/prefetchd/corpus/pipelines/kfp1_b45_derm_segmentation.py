# ruff: noqa
"""Dermoscopy lesion segmentation (U-Net / EfficientNet-B4), KFP v1 -> Argo.

The cohort comes from a Delta table; JPEGs are decoded with Ray Data onto an
existing preprocessing PVC; training writes its YAML config inline (heredoc)
and reads the PVC read-only; evaluation takes its test manifest from an env
var; when Dice is good enough, external validation runs per hospital site
(ParallelFor over a list parameter) and a report is published.

Compile (kfp 1.8.x): python kfp1_b45_derm_segmentation.py -> kfp1_b45_derm_segmentation.yaml
"""
import os

import kfp
from kfp import dsl, onprem
from kfp.components import InputPath, OutputPath, create_component_from_func
from kubernetes.client.models import V1EnvVar, V1PersistentVolumeClaimVolumeSource, V1Volume, V1VolumeMount

IMAGE = 'harbor.derm.example.net/seg/unet-effb4:1.9.2'

TRAIN_SCRIPT = r'''
set -euo pipefail
cat > /tmp/train.yaml <<YAML
data:
  train_manifest: s3://derm-lake/manifests/seg_train.parquet
  image_root: /preproc/isic2020
model:
  encoder: efficientnet-b4
  pretrained: s3://derm-models/imagenet/efficientnet_b4.safetensors
trainer:
  max_epochs: $0
  default_root_dir: s3://derm-models/unet-effb4/runs/
YAML
python -m dermseg.train --config /tmp/train.yaml --export /tmp/outputs/model
'''


def export_cohort(cohort_table: str, cohort_csv: OutputPath('CSV')):
    from deltalake import DeltaTable
    df = DeltaTable(cohort_table).to_pandas(filters=[('has_mask', '=', True)])
    df[['isic_id', 'diagnosis', 'site']].to_csv(cohort_csv, index=False)


def evaluate_seg(model: InputPath('Model')) -> float:
    import os
    import pandas as pd
    from dermseg.metrics import dice_on_manifest
    test = pd.read_parquet(os.environ['TEST_MANIFEST'])
    return float(dice_on_manifest(model, test, image_root='/preproc/isic2020'))


def external_validate(model: InputPath('Model'), site: str, holdout_uri: str) -> float:
    import torch.utils.data as tud
    import fsspec
    from dermseg.data import JpegMaskDataset
    from dermseg.metrics import dice_on_loader
    fs, root = fsspec.core.url_to_fs(holdout_uri)
    ds = JpegMaskDataset(fs, root)
    loader = tud.DataLoader(ds, batch_size=8, num_workers=4)
    d = dice_on_loader(model, loader)
    print(site, d)
    return d


cohort_op = create_component_from_func(export_cohort, base_image=IMAGE)
eval_op = create_component_from_func(evaluate_seg, base_image=IMAGE)
ext_op = create_component_from_func(external_validate, base_image=IMAGE)


@dsl.pipeline(name='derm-unet-segmentation')
def derm_pipeline(cohort_table: str = 's3://derm-lake/cohorts/melanoma_v3',
                  sites: list = ['ham10000', 'pad-ufes-20', 'bcn20000'],
                  max_epochs: int = 60):
    co = cohort_op(cohort_table=cohort_table)
    dec = dsl.ContainerOp(
        name='decode-images', image='rayproject/ray-ml:2.23.0-py310',
        command=['python', '-c'],
        arguments=['import ray, sys\n'
                   'ds = ray.data.read_images("s3://derm-raw/isic2020/jpeg/train/", size=(512, 512), include_paths=True)\n'
                   'ds.write_numpy("/preproc/isic2020", column="image")\n'],
    ).after(co)
    dec.apply(onprem.mount_pvc('derm-preproc', 'preproc', '/preproc'))
    train = dsl.ContainerOp(
        name='train-unet', image=IMAGE, command=['bash', '-c'],
        arguments=[TRAIN_SCRIPT, max_epochs],
        file_outputs={'model': '/tmp/outputs/model'},
    ).after(dec, co)
    train.add_volume(V1Volume(name='preproc-ro', persistent_volume_claim=V1PersistentVolumeClaimVolumeSource(
        claim_name='derm-preproc', read_only=True)))
    train.container.add_volume_mount(V1VolumeMount(name='preproc-ro', mount_path='/preproc', read_only=True))
    train.container.set_gpu_limit(4)
    ev = eval_op(model=train.outputs['model'])
    ev.container.add_env_variable(V1EnvVar(name='TEST_MANIFEST', value='s3://derm-lake/manifests/seg_test.parquet'))
    ev.apply(onprem.mount_pvc('derm-preproc', 'preproc', '/preproc'))
    with dsl.Condition(ev.output > 0.8):
        with dsl.ParallelFor(sites) as site:
            ext = ext_op(model=train.outputs['model'], site=site,
                         holdout_uri='s3://derm-external/' + str(site) + '/holdout/')
        pub = dsl.ContainerOp(name='publish-report', image='amazon/aws-cli:2.15.30',
                              command=['aws', 's3', 'sync', '/reports', 's3://derm-reports/unet-effb4/latest/']).after(ext)


if __name__ == '__main__':
    kfp.compiler.Compiler().compile(derm_pipeline, os.path.splitext(__file__)[0] + '.yaml')
