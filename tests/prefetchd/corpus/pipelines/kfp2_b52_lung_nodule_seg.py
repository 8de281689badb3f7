# ruff: noqa
"""Lung-nodule segmentation on LIDC-IDRI CT (KFP v2 + kfp-kubernetes).

An s3fs index of the DICOM series, a per-site DICOM -> Zarr conversion
(static ParallelFor over dicts, fsspec open_files with a recursive glob),
annotations loaded with Hugging Face datasets from parquet data_files and
saved to S3 with save_to_disk, a 3D UNet fine-tuned from an imported
checkpoint reading load_from_disk + the collected Zarr stores, Ray Data
evaluation on PNG slices, ONNX export from a checkpoint PVC and a gated
promotion copy.

Compile: python kfp2_b52_lung_nodule_seg.py  -> kfp2_b52_lung_nodule_seg.yaml
"""
import os
from typing import List

from kfp import compiler, dsl, kubernetes
from kfp.dsl import Input, Model, Output

IMAGE = 'registry.radiology.example.org/ml/ct-seg:3.2.1'

SITES = [
    {'site': 'mskcc', 'prefix': 's3://radiology-raw/lidc-idri/mskcc/'},
    {'site': 'ucsd', 'prefix': 's3://radiology-raw/lidc-idri/ucsd/'},
    {'site': 'duke', 'prefix': 's3://radiology-raw/lidc-idri/duke/'},
]


@dsl.component(base_image=IMAGE)
def index_series(raw_root: str, work_root: str) -> int:
    import pandas as pd
    import pydicom
    import s3fs
    fs = s3fs.S3FileSystem()
    rows = []
    for key in fs.glob(f"{raw_root}/*/*/*/*.dcm"):
        with fs.open(key, "rb") as f:
            h = pydicom.dcmread(f, stop_before_pixels=True)
        rows.append({"key": key, "site": key.split("/")[2], "series_uid": h.SeriesInstanceUID,
                     "z": float(h.ImagePositionPatient[2]), "thickness": float(h.SliceThickness)})
    df = pd.DataFrame(rows)
    df.to_parquet(f"{work_root}/manifest/series.parquet", index=False)
    return len(df)


@dsl.component(base_image=IMAGE)
def dicom_to_zarr(site: str, site_prefix: str, work_root: str) -> str:
    import fsspec
    import numpy as np
    import pandas as pd
    import pydicom
    import zarr
    manifest = pd.read_parquet(f"{work_root}/manifest/series.parquet", filters=[("site", "==", site)])
    files = {of.path: of for of in fsspec.open_files(f"{site_prefix}**/*.dcm", mode="rb")}
    store_uri = f"{work_root}/volumes/{site}.zarr"
    root = zarr.open_group(fsspec.get_mapper(store_uri), mode="w")
    for uid, grp in manifest.sort_values("z").groupby("series_uid"):
        slices = []
        for k in grp["key"]:
            with files[k] as fh:
                slices.append(pydicom.dcmread(fh).pixel_array.astype(np.int16))
        root.create_dataset(uid, data=np.stack(slices), chunks=(16, 256, 256))
    return store_uri


@dsl.component(base_image=IMAGE)
def build_annotations(labels_root: str, work_root: str):
    from datasets import load_dataset
    ds = load_dataset("parquet", data_files={
        "train": f"{labels_root}/annotations/train-*.parquet",
        "validation": f"{labels_root}/annotations/val-*.parquet",
    })
    ds = ds.filter(lambda r: r["malignancy"] >= 3)
    ds.save_to_disk(f"{work_root}/hf/annotations")


@dsl.component(base_image=IMAGE)
def train_unet(pretrained: Input[Model], annotations_uri: str, volume_stores: List[str], epochs: int,
               model: Output[Model]):
    import subprocess
    import xarray as xr
    from datasets import load_from_disk
    ann = load_from_disk(annotations_uri)
    vols = [xr.open_zarr(s, consolidated=False) for s in volume_stores]
    print("series:", sum(len(v.data_vars) for v in vols), "annotations:", ann.num_rows)
    subprocess.run(["python", "-m", "ctseg.train", "--init", pretrained.path, "--epochs", str(epochs),
                    "--ckpt-dir", "/ckpt", "--out", model.path], check=True)


@dsl.component(base_image=IMAGE)
def evaluate_slices(model: Input[Model], png_root: str, masks_uri: str) -> float:
    import ray
    from ctseg.eval import dice_batch
    imgs = ray.data.read_images(f"{png_root}/test/", include_paths=True, mode="L")
    masks = ray.data.read_parquet(masks_uri)
    return float(dice_batch(imgs, masks, model.path))


@dsl.component(base_image=IMAGE)
def export_onnx(version: str) -> str:
    import smart_open
    import torch
    from ctseg.models import SwinUNETR
    net = SwinUNETR.from_checkpoint("/ckpt/best_ema.pt").eval()
    dest = f"s3://radiology-models/lidc/unet/onnx/{version}/model.onnx"
    with smart_open.open(dest, "wb") as f:
        torch.onnx.export(net, torch.zeros(1, 1, 96, 96, 96), f, opset_version=17)
    return dest


@dsl.component(base_image=IMAGE)
def promote_model(onnx_uri: str):
    import s3fs
    s3fs.S3FileSystem().copy(onnx_uri, "s3://radiology-models/lidc/unet/production/model.onnx")


@dsl.pipeline(name='lidc-nodule-seg')
def lidc_pipeline(raw_root: str = 's3://radiology-raw/lidc-idri',
                  work_root: str = 's3://radiology-work/lidc/v5',
                  labels_root: str = 's3://radiology-labels/lidc',
                  epochs: int = 40,
                  model_version: str = '2024.06'):
    pvc = kubernetes.CreatePVC(pvc_name_suffix='-unet-ckpt', access_modes=['ReadWriteOnce'], size='100Gi',
                               storage_class_name='gp3')
    idx = index_series(raw_root=raw_root, work_root=work_root)
    with dsl.ParallelFor(SITES) as s:
        conv = dicom_to_zarr(site=s.site, site_prefix=s.prefix, work_root=work_root).after(idx)
    ann = build_annotations(labels_root=labels_root, work_root=work_root)
    weights = dsl.importer(artifact_uri='s3://radiology-models/monai/swin_unetr/btcv_pretrained.pt',
                           artifact_class=dsl.Model, reimport=False)
    tr = train_unet(pretrained=weights.output, annotations_uri=f'{work_root}/hf/annotations',
                    volume_stores=dsl.Collected(conv.output), epochs=epochs).after(ann)
    tr.set_accelerator_type('nvidia.com/gpu').set_accelerator_limit(4)
    kubernetes.mount_pvc(tr, pvc_name=pvc.outputs['name'], mount_path='/ckpt')
    ev = evaluate_slices(model=tr.outputs['model'], png_root='s3://radiology-raw/lidc-idri-png',
                         masks_uri=f'{labels_root}/test_masks.parquet')
    exp = export_onnx(version=model_version).after(ev)
    kubernetes.mount_pvc(exp, pvc_name=pvc.outputs['name'], mount_path='/ckpt')
    kubernetes.DeletePVC(pvc_name=pvc.outputs['name']).after(exp)
    with dsl.If(ev.output > 0.8):
        promote_model(onnx_uri=exp.output)


if __name__ == '__main__':
    compiler.Compiler().compile(lidc_pipeline, os.path.splitext(__file__)[0] + '.yaml')
