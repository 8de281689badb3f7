# ruff: noqa
"""Nocturnal bird migration from NEXRAD weather radar.
For one night, the Level II volume scans of a list of stations are listed and downloaded from the NOAA open-data
bucket onto a scratch volume, rendered into polar sweeps with the station's beam-blockage mask, the MistNet
bird/weather segmenter is fine-tuned on 4 GPUs from webdataset tar shards, evaluated on the validation shards, and when
the IoU is good enough each station's night is segmented into bird masks and vertical profiles, which are aggregated
into a nightly migration table published as a Hugging Face dataset. The scratch volume is deleted at the end."""
from typing import List

from kfp import compiler, dsl, kubernetes
from kfp.dsl import Input, Model, Output

RADAR_IMAGE = "ghcr.io/aeroeco/mistnet:2.3.0-cu121"


@dsl.component(base_image=RADAR_IMAGE)
def fetch_scans(station: str, night: str) -> int:
    import os

    import boto3
    from botocore import UNSIGNED
    from botocore.config import Config

    s3 = boto3.client("s3", config=Config(signature_version=UNSIGNED))
    prefix = f"{night[:4]}/{night[5:7]}/{night[8:10]}/{station}/"
    dest = f"/scratch/level2/{station}"
    os.makedirs(dest, exist_ok=True)
    n = 0
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket="noaa-nexrad-level2", Prefix=prefix):
        for obj in page.get("Contents", []):
            if obj["Key"].endswith("_MDM"):
                continue
            s3.download_file("noaa-nexrad-level2", obj["Key"], os.path.join(dest, os.path.basename(obj["Key"])))
            n += 1
    return n


@dsl.component(base_image=RADAR_IMAGE)
def render_sweeps(station: str):
    import glob
    import os

    import fsspec
    import numpy as np
    import pyart

    from mistnet.render import to_polar_stack

    with fsspec.open(f"s3://aeroeco-ref/nexrad/beam-blockage/{station}.npy", "rb") as f:
        blockage = np.load(f)
    out = f"/scratch/sweeps/{station}"
    os.makedirs(out, exist_ok=True)
    for path in sorted(glob.glob(f"/scratch/level2/{station}/*")):
        radar = pyart.io.read_nexrad_archive(path)
        np.savez_compressed(os.path.join(out, os.path.basename(path) + ".npz"), **to_polar_stack(radar, blockage))


@dsl.container_component
def finetune_mistnet(train_shards: str, val_shards: str, pretrained: str, night: str, epochs: int,
                     model: Output[Model]):
    return dsl.ContainerSpec(
        image=RADAR_IMAGE,
        command=["torchrun", "--nproc_per_node", "4", "-m", "mistnet.finetune"],
        args=["--train-shards", train_shards,
              "--val-shards", val_shards,
              "--pretrained", pretrained,
              "--epochs", epochs,
              "--output-dir", f"s3://aeroeco-models/mistnet/runs/{night}/",
              "--export-torchscript", model.path],
    )


@dsl.component(base_image=RADAR_IMAGE)
def eval_mistnet(model: Input[Model], val_shards: str) -> float:
    import torch
    import webdataset as wds

    from mistnet.metrics import mean_iou

    net = torch.jit.load(model.path, map_location="cuda").eval()
    ds = wds.WebDataset(f"pipe:aws s3 cp {val_shards} -", shardshuffle=False).decode("torch").to_tuple("x.pth", "y.pth")
    loader = wds.WebLoader(ds, batch_size=16, num_workers=4)
    with torch.no_grad():
        return float(mean_iou(net, loader))


@dsl.component(base_image=RADAR_IMAGE)
def segment_night(model: Input[Model], station: str, night: str):
    import glob

    import numpy as np
    import torch
    import xarray as xr

    from mistnet.profiles import vertical_profiles

    net = torch.jit.load(model.path, map_location="cuda").eval()
    sweeps = sorted(glob.glob(f"/scratch/sweeps/{station}/*.npz"))
    masks = [net(torch.from_numpy(np.load(p)["x"]).cuda()[None]).argmax(1)[0].cpu().numpy() for p in sweeps]
    xr.Dataset({"bird_mask": (("scan", "az", "range"), np.stack(masks))}).to_zarr(
        f"s3://aeroeco-products/birdmasks/{night}/{station}.zarr", mode="w")
    vertical_profiles(sweeps, masks).to_parquet(f"s3://aeroeco-products/vpts/{night}/{station}.parquet", index=False)


@dsl.component(base_image=RADAR_IMAGE)
def aggregate_migration(night: str):
    import pyarrow.dataset as ds
    from datasets import Dataset

    table = ds.dataset(f"s3://aeroeco-products/vpts/{night}/", format="parquet").to_table()
    df = table.to_pandas()
    nightly = df.groupby(["station", "height_m"], as_index=False).agg(mtr=("mtr", "sum"), dens=("dens", "mean"))
    Dataset.from_pandas(nightly, preserve_index=False).save_to_disk(f"s3://aeroeco-public/migration-nightly/{night}")


@dsl.pipeline(name="nexrad-bird-migration")
def bird_migration(night: str = "2025-10-14",
                   stations: List[str] = ["KDOX", "KBOX", "KOKX", "KLWX"],
                   train_shards: str = "s3://aeroeco-wds/nexrad-seg/v3/train-{000000..000127}.tar",
                   val_shards: str = "s3://aeroeco-wds/nexrad-seg/v3/val-{000000..000007}.tar",
                   pretrained: str = "s3://aeroeco-models/mistnet/v2.1/mistnet.pt",
                   epochs: int = 12,
                   min_iou: float = 0.72):
    pvc = kubernetes.CreatePVC(pvc_name_suffix="-radar-scratch", access_modes=["ReadWriteMany"], size="500Gi",
                               storage_class_name="efs-sc")

    with dsl.ParallelFor(stations, parallelism=4) as st:
        fetch = fetch_scans(station=st, night=night).set_cpu_limit("2")
        kubernetes.mount_pvc(fetch, pvc_name=pvc.outputs["name"], mount_path="/scratch")
        rend = render_sweeps(station=st).after(fetch).set_cpu_limit("4").set_memory_limit("16G")
        kubernetes.mount_pvc(rend, pvc_name=pvc.outputs["name"], mount_path="/scratch")

    ft = finetune_mistnet(train_shards=train_shards, val_shards=val_shards, pretrained=pretrained, night=night,
                          epochs=epochs)
    ft.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(4).set_memory_limit("200G")
    kubernetes.add_toleration(ft, key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")

    ev = eval_mistnet(model=ft.outputs["model"], val_shards=val_shards)
    ev.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(1)

    with dsl.If(ev.output >= min_iou, name="iou-ok"):
        with dsl.ParallelFor(stations, parallelism=2) as st2:
            seg = segment_night(model=ft.outputs["model"], station=st2, night=night).after(rend)
            seg.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(1)
            kubernetes.mount_pvc(seg, pvc_name=pvc.outputs["name"], mount_path="/scratch")
        agg = aggregate_migration(night=night).after(seg)
        kubernetes.DeletePVC(pvc_name=pvc.outputs["name"]).after(agg)


if __name__ == "__main__":
    compiler.Compiler().compile(bird_migration, __file__.replace(".py", ".yaml"))
