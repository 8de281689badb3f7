# ruff: noqa
"""TESS exoplanet transit search: stage catalogs, detrend light curves per sector, train AstroNet, vet candidates."""
from kfp import dsl, compiler, kubernetes
from kfp.dsl import Output, Artifact


@dsl.container_component
def fetch_catalogs(catalog_root: str, toi_release: str):
    return dsl.ContainerSpec(
        image="amazon/aws-cli:2.17.0",
        command=["bash", "-c"],
        args=['''set -euo pipefail
printf -v TOI "%s/toi/toi_%s.csv" "$0" "$1"
aws s3 cp "$TOI" /work/catalogs/toi.csv
aws s3 cp --recursive "$0/eb/villanova/" /work/catalogs/eb/ --exclude "*" --include "*.csv"
''', catalog_root, toi_release],
    )


@dsl.component(base_image="ghcr.io/exoml/lightkurve:2.5.0", packages_to_install=[])
def detrend_sector(sector: str, lc_root: str, stats: Output[Artifact]):
    import json
    from dataclasses import dataclass
    from pathlib import PurePosixPath
    import lance
    import pyarrow as pa
    import s3fs

    @dataclass
    class SectorCfg:
        cadence: str = "120s"
        window_days: float = 0.75

    cfg = SectorCfg()
    fs = s3fs.S3FileSystem()
    root = PurePosixPath(lc_root.removeprefix("s3://"))
    pattern = str(root / sector / cfg.cadence / "*_lc.fits")
    files = fs.glob(pattern)
    rows = [{"tic": f.rsplit("/", 1)[-1].split("-")[2], "key": f} for f in files]
    lance.write_dataset(pa.Table.from_pylist(rows), f"s3://tess-features/detrended/{sector}.lance", mode="overwrite")
    with open(stats.path, "w") as f:
        json.dump({"sector": sector, "n": len(rows), "window": cfg.window_days}, f)


@dsl.container_component
def train_astronet(features_root: str, model_tag: str):
    return dsl.ContainerSpec(
        image="ghcr.io/exoml/astronet:3.1.0-cu124",
        command=["accelerate", "launch", "--num_processes", "4", "--mixed_precision", "bf16", "-m", "astronet.train"],
        args=["--train-dir", features_root,
              "--catalog", "/work/catalogs/toi.csv",
              "--eb-dir", "/work/catalogs/eb",
              "--init-weights", "s3://tess-models/astronet-v2/final/model.safetensors",
              "--output_dir", dsl.ConcatPlaceholder(["s3://tess-models/", model_tag, "/"])],
    )


@dsl.component(base_image="ghcr.io/exoml/astronet:3.1.0-cu124")
def vet_candidates(sectors: list, model_tag: str) -> int:
    import fsspec
    import pandas as pd
    import torch
    import yaml

    CFG = """
vetting:
  ephemeris: s3://tess-catalogs/ephem/tce_ephemerides_2025.parquet
  snr_min: 7.1
"""
    cfg = yaml.safe_load(CFG)
    eph = pd.read_parquet(cfg["vetting"]["ephemeris"])
    cents = []
    for s in sectors:
        cents.append(pd.read_parquet(f"s3://tess-lightcurves/centroids/{s}/centroids.parquet"))
    with fsspec.open(f"s3://tess-models/{model_tag}/model.pt", "rb") as f:
        model = torch.load(f, map_location="cpu")
    cand = eph[eph.snr >= cfg["vetting"]["snr_min"]].copy()
    cand["n_centroid_rows"] = sum(len(c) for c in cents)
    cand.to_csv(f"s3://tess-reports/{model_tag}/vetted_candidates.csv", index=False)
    return int(len(cand))


@dsl.container_component
def publish_candidates(model_tag: str):
    return dsl.ContainerSpec(
        image="amazon/aws-cli:2.17.0",
        command=["sh", "-c"],
        args=['aws s3 cp "s3://tess-reports/$0/vetted_candidates.csv" s3://exofop-uploads/tess/2025/', model_tag],
    )


@dsl.pipeline(name="exoplanet-transits")
def exoplanet_transits(
    sectors: list = ["s0061", "s0062"],
    lc_root: str = "s3://tess-lightcurves/spoc/",
    catalog_root: str = "s3://tess-catalogs",
    toi_release: str = "2025-05",
    model_tag: str = "astronet-v3",
):
    cat = fetch_catalogs(catalog_root=catalog_root, toi_release=toi_release)
    kubernetes.mount_pvc(cat, pvc_name="tess-work", mount_path="/work")
    with dsl.ParallelFor(sectors, parallelism=2) as sector:
        d = detrend_sector(sector=sector, lc_root=lc_root)
        d.set_cpu_limit("8").set_memory_limit("32G")
    t = train_astronet(features_root="s3://tess-features/detrended/", model_tag=model_tag).after(d, cat)
    t.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(4)
    kubernetes.mount_pvc(t, pvc_name="tess-work", mount_path="/work")
    kubernetes.add_node_selector(t, label_key="cloud.google.com/gke-accelerator", label_value="nvidia-h100-80gb")
    kubernetes.add_toleration(t, key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")
    kubernetes.use_secret_as_env(t, secret_name="tess-wandb", secret_key_to_env={"api_key": "WANDB_API_KEY"})
    v = vet_candidates(sectors=sectors, model_tag=model_tag).after(t)
    with dsl.If(v.output > 0):
        publish_candidates(model_tag=model_tag)


if __name__ == "__main__":
    compiler.Compiler().compile(exoplanet_transits, __file__.replace(".py", ".yaml"))
