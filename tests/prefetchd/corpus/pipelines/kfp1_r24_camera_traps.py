# ruff: noqa
"""Camera-trap species classification: per-site image index, MegaDetector crops, species classifier, registry push."""
import kfp
from kfp import dsl
from kfp.components import create_component_from_func
from kubernetes.client import V1Toleration

SITES = [{"site": "serengeti-s1", "camera": "browning"}, {"site": "serengeti-s7", "camera": "reconyx"}]


def index_site(site: str, camera: str, season: str, labels_root: str, traps_bucket: str) -> int:
    import os
    import pandas as pd
    import s3fs
    fs = s3fs.S3FileSystem()
    images = fs.glob(f"{traps_bucket}/{site}/{season}/**/*.JPG")
    labels = pd.read_csv(os.path.join(labels_root, site, "labels.csv"))
    df = pd.DataFrame({"key": images})
    df["camera"] = camera
    df["image_id"] = df.key.str.rsplit("/", n=1).str[-1].str.removesuffix(".JPG")
    df = df.merge(labels, on="image_id", how="left")
    df.to_parquet(f"s3://wildlife-index/{season}/{site}.parquet")
    return len(df)


def train_species(season: str, taxonomy_version: str, ref_bucket: str) -> float:
    import subprocess
    import boto3
    import pandas as pd
    taxonomy = ref_bucket + "/taxonomy/" + taxonomy_version + ".csv"
    tax = pd.read_csv(taxonomy)
    local = pd.read_csv("/cache/lila_taxonomy.csv")
    tax = tax.merge(local, on="scientific_name", how="left")
    tax.to_csv("/tmp/taxonomy.csv", index=False)
    det = pd.read_parquet(f"s3://wildlife-detections/{season}/detections.parquet")
    det[det.conf > 0.2].to_parquet("/tmp/crops.parquet")
    out = subprocess.run(["python", "-m", "species.train", "--crops", "/tmp/crops.parquet", "--taxonomy", "/tmp/taxonomy.csv",
                          "--out", "/tmp/clf.pt"], check=True, capture_output=True, text=True)
    boto3.client("s3").upload_file("/tmp/clf.pt", "wildlife-models", f"species/{season}/clf.pt")
    return float(out.stdout.strip().splitlines()[-1])


index_op = create_component_from_func(index_site, base_image="ghcr.io/wildml/py:2025.05")
train_op = create_component_from_func(train_species, base_image="ghcr.io/wildml/species:1.8.0-cu121")

DETECT = r'''
import argparse, fsspec, pandas as pd, torch
ap = argparse.ArgumentParser()
ap.add_argument("--index", required=True)
ap.add_argument("--season", required=True)
ap.add_argument("--weights", default="s3://wildlife-models/megadetector/md_v5a.0.0.pt")
ap.add_argument("--out", default="s3://wildlife-detections/")
ap.add_argument("--cache-dir", default="/cache/torch")
a = ap.parse_args()
with fsspec.open(a.weights, "rb") as f:
    model = torch.load(f, map_location="cuda")
idx = pd.read_parquet(a.index)
dets = pd.DataFrame({"key": idx.key, "conf": 0.0})
dets.to_parquet(a.out + a.season + "/detections.parquet")
'''


@dsl.pipeline(name="camera-traps")
def pipeline(season: str = "2024wet", labels_root: str = "s3://wildlife-labels/v3", taxonomy_version: str = "iucn_2025"):
    cache = dsl.PipelineVolume(pvc="traps-cache")
    with dsl.ParallelFor(SITES) as s:
        idx = index_op(site=s.site, camera=s.camera, season=season, labels_root=labels_root, traps_bucket="wildlife-traps")
    lila = dsl.ContainerOp(
        name="fetch-lila-taxonomy", image="google/cloud-sdk:480.0.0-slim",
        command=["sh", "-c"],
        arguments=["gsutil -m cp gs://public-datasets-lila/taxonomy-mapping/lila-taxonomy-mapping_release.csv /cache/lila_taxonomy.csv"],
        pvolumes={"/cache": cache},
    )
    det = dsl.ContainerOp(
        name="megadetector", image="ghcr.io/wildml/megadetector:5.0.29",
        command=["python", "-c", DETECT],
        arguments=["--index", f"s3://wildlife-index/{season}/", "--season", season],
        pvolumes={"/cache": cache},
    ).after(idx)
    det.set_gpu_limit(1)
    det.add_node_selector_constraint("cloud.google.com/gke-accelerator", "nvidia-l4")
    det.add_toleration(V1Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"))
    train = train_op(season=season, taxonomy_version=taxonomy_version, ref_bucket="s3://wildlife-ref")
    train.add_pvolumes({"/cache": cache})
    train.after(det, lila)
    train.set_gpu_limit(1)
    with dsl.Condition(train.output > 0.8):
        dsl.ContainerOp(
            name="register-model", image="amazon/aws-cli:2.17.0",
            command=["aws", "s3", "cp"],
            arguments=[f"s3://wildlife-models/species/{season}/clf.pt", "s3://wildlife-registry/species/prod/clf.pt"],
        )


if __name__ == "__main__":
    kfp.compiler.Compiler().compile(pipeline, __file__.replace(".py", ".yaml"))
