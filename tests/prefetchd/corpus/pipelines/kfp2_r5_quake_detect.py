# ruff: noqa
from typing import List
from kfp import compiler, dsl

IMG = "ghcr.io/acme-seismo/picker:2.3.0"


@dsl.component(base_image=IMG)
def load_waveforms(stations: List[str], waveform_root: str, waves: dsl.Output[dsl.Dataset]):
    import xarray as xr
    paths = [f"{waveform_root}/{s}.zarr" for s in stations]
    ds = xr.open_mfdataset(paths, engine="zarr", combine="nested", concat_dim="station")
    ds.to_netcdf(waves.path)


@dsl.component(base_image=IMG)
def pick_phasenet(ckpt: str, waves: dsl.Input[dsl.Dataset], picks: dsl.Output[dsl.Dataset]):
    import fsspec
    import torch
    with fsspec.open(ckpt, "rb") as f:
        model = torch.load(f, map_location="cpu")
    open(picks.path, "w").write("[]")


@dsl.component(base_image=IMG)
def pick_eqt(ckpt: str, waves: dsl.Input[dsl.Dataset], picks: dsl.Output[dsl.Dataset]):
    import s3fs
    fs = s3fs.S3FileSystem()
    fs.get(ckpt, "/tmp/eqt.h5")
    open(picks.path, "w").write("[]")


@dsl.component(base_image=IMG)
def associate(picks: dsl.Input[dsl.Dataset], catalog_csv: str, minio_endpoint: str, events_out: str):
    import functools
    import pandas as pd
    import zarr
    opts = {"client_kwargs": {"endpoint_url": minio_endpoint}}
    reader = functools.partial(pd.read_csv, storage_options=opts)
    cat = reader(catalog_csv)
    vel = zarr.open("s3://acme-seismo/velocity/socal-1d.zarr", mode="r")
    events = cat.head(0)
    events.to_csv(events_out, storage_options=opts)


@dsl.pipeline(name="socal-quake-detect")
def quake_detect(
    stations: List[str] = ["CI.PASC", "CI.USC", "CI.SVD"],
    waveform_root: str = "s3://acme-seismo/waveforms/2024/312",
    picker: str = "phasenet",
    phasenet_ckpt: str = "s3://acme-seismo-models/phasenet/stead-v2.pt",
    eqt_ckpt: str = "s3://acme-seismo-models/eqtransformer/original.h5",
    catalog_csv: str = "s3://acme-seismo/catalogs/scsn-2024.csv",
    minio_endpoint: str = "http://minio.seismo.svc:9000",
    events_out: str = "s3://acme-seismo-derived/events/2024-312.csv",
):
    w = load_waveforms(stations=stations, waveform_root=waveform_root)
    with dsl.If(picker == "phasenet"):
        pn = pick_phasenet(ckpt=phasenet_ckpt, waves=w.outputs["waves"])
    with dsl.Else():
        eq = pick_eqt(ckpt=eqt_ckpt, waves=w.outputs["waves"])
    associate(picks=dsl.OneOf(pn.outputs["picks"], eq.outputs["picks"]), catalog_csv=catalog_csv,
              minio_endpoint=minio_endpoint, events_out=events_out)


if __name__ == "__main__":
    compiler.Compiler().compile(quake_detect, __file__.replace(".py", ".yaml"))
