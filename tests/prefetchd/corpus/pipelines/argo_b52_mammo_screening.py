# ruff: noqa
"""Screening-mammography classifier on CBIS-DDSM WebDataset shards (Hera -> Argo Workflow).

A script lists the training shards with s3fs (a listing, not a read) and
a withParam fan-out checks each shard through a `pipe:aws s3 cp ... -`
WebDataset URL; case metadata CSVs are merged with pandas and written with
partition_cols; DICOM QC reads an existing PACS-export PVC read-only; the
trainer streams a brace-range shard pattern from a workflow parameter and
the merged metadata, checkpointing to a volumeClaimTemplate; evaluation
reads test PNGs through an fsspec glob and labels through smart_open; a
gated export writes under {{workflow.name}}; onExit removes the run's tmp
prefix.

Generate: python argo_b52_mammo_screening.py  -> argo_b52_mammo_screening.yaml
"""
import os

from hera.workflows import DAG, Container, Parameter, Workflow, script
from hera.workflows import models as m

IMAGE = 'registry.radiology.example.org/ml/mammo:2.4.0'

CKPT = m.VolumeMount(name='ckpt', mount_path='/ckpt')


@script(image=IMAGE)
def list_shards(shard_prefix: str):
    import json
    import s3fs
    fs = s3fs.S3FileSystem()
    print(json.dumps(["s3://" + k for k in sorted(fs.glob(shard_prefix + "train-*.tar"))]))


@script(image=IMAGE)
def check_shard(url: str):
    import webdataset as wds
    n = 0
    for sample in wds.WebDataset(f"pipe:aws s3 cp {url} -", shardshuffle=False):
        assert "png" in sample and "json" in sample, sample["__key__"]
        n += 1
    print(n)


@script(image=IMAGE)
def merge_metadata(meta_root: str):
    import pandas as pd
    frames = [pd.read_csv(f"{meta_root}/{name}") for name in
              ("calc_case_description_train_set.csv", "mass_case_description_train_set.csv")]
    df = pd.concat(frames, ignore_index=True)
    df["pathology"] = df["pathology"].str.replace("BENIGN_WITHOUT_CALLBACK", "BENIGN")
    df.to_parquet(f"{meta_root}/merged/", partition_cols=["pathology"], index=False)


@script(image=IMAGE, volume_mounts=[CKPT])
def train(shards: str, val_shards: str, metadata_uri: str, epochs: str):
    import pandas as pd
    import webdataset as wds
    from mammo.train import fit
    meta = pd.read_parquet(metadata_uri)
    train_ds = wds.WebDataset(f"pipe:aws s3 cp {shards} -", resampled=True).shuffle(2000).decode("pil")
    val_ds = wds.WebDataset(f"pipe:aws s3 cp {val_shards} -").decode("pil")
    fit(train_ds, val_ds, meta, epochs=int(epochs), ckpt_dir="/ckpt")


@script(image=IMAGE, volume_mounts=[CKPT])
def evaluate(test_glob: str, labels_uri: str):
    import fsspec
    import pandas as pd
    import smart_open
    from mammo.eval import auc_from_files
    with smart_open.open(labels_uri) as f:
        labels = pd.read_csv(f)
    files = fsspec.open_files(test_glob, mode="rb")
    print(round(auc_from_files("/ckpt/best.pt", files, labels), 4))


with Workflow(
    generate_name='mammo-screening-',
    entrypoint='main',
    on_exit='cleanup',
    arguments=[
        Parameter(name='shards', value='s3://mammo-screening/wds/cbis-ddsm/train-{000000..000127}.tar'),
        Parameter(name='val_shards', value='s3://mammo-screening/wds/cbis-ddsm/val-{000000..000015}.tar'),
        Parameter(name='epochs', value='30'),
    ],
    volume_claim_templates=[m.PersistentVolumeClaim(
        metadata=m.ObjectMeta(name='ckpt'),
        spec=m.PersistentVolumeClaimSpec(access_modes=['ReadWriteOnce'],
                                         resources=m.VolumeResourceRequirements(requests={'storage': m.Quantity('40Gi')})))],
    volumes=[m.Volume(name='pacs', persistent_volume_claim=m.PersistentVolumeClaimVolumeSource(
        claim_name='pacs-export', read_only=True))],
) as w:
    qc = Container(
        name='dicom-qc', image=IMAGE, command=['python', '-m', 'mammo.qc'],
        args=['--dicom-dir', '/pacs', '--min-bits', '12', '--fail-on-missing-laterality'],
        volume_mounts=[m.VolumeMount(name='pacs', mount_path='/pacs', sub_path='cbis-ddsm', read_only=True)],
    )
    export = Container(
        name='export-torchscript', image=IMAGE, command=['sh', '-c'],
        args=['python -m mammo.export --ckpt /ckpt/best.pt --out /tmp/model.pt && '
              'aws s3 cp /tmp/model.pt s3://mammo-models/cbis-ddsm/resnet50/{{workflow.name}}/model.pt'],
        volume_mounts=[CKPT],
    )
    cleanup = Container(
        name='cleanup', image='amazon/aws-cli:2.15.30', command=['aws', 's3', 'rm', '--recursive'],
        args=['s3://mammo-screening/tmp/{{workflow.name}}/'],
    )
    with DAG(name='main'):
        ls = list_shards(name='list-shards', arguments={'shard_prefix': 's3://mammo-screening/wds/cbis-ddsm/'})
        chk = check_shard(name='check-shard', arguments={'url': '{{item}}'}, with_param=ls.result)
        meta = merge_metadata(name='merge-metadata', arguments={'meta_root': 's3://mammo-screening/metadata'})
        q = qc(name='dicom-qc')
        tr = train(name='train', arguments={
            'shards': '{{workflow.parameters.shards}}',
            'val_shards': '{{workflow.parameters.val_shards}}',
            'metadata_uri': 's3://mammo-screening/metadata/merged/',
            'epochs': '{{workflow.parameters.epochs}}'})
        ev = evaluate(name='evaluate', arguments={
            'test_glob': 's3://mammo-screening/png/test/*/*.png',
            'labels_uri': 's3://mammo-screening/metadata/test_labels.csv'})
        ex = export(name='export-torchscript', when='{{tasks.evaluate.outputs.result}} > 0.85')
        [chk, meta, q] >> tr >> ev >> ex

if __name__ == '__main__':
    with open(os.path.splitext(__file__)[0] + '.yaml', 'w') as f:
        f.write(w.to_yaml())
