# ruff: noqa
"""Shelter pet adoption speed: intake records + listing photos -> CLIP photo embeddings + per-species ranker; cleans up scratch on exit."""
import kfp
from kfp import dsl
from kfp.components import create_component_from_func
from kubernetes import client as k8s

PET_IMAGE = "ghcr.io/petmatch/ml:1.8.0"


def clean_records(shelter_export: str, min_age_days: int):
    import pandas as pd

    df = pd.read_csv(shelter_export, parse_dates=["intake_date", "outcome_date"])
    df = df[df["outcome_type"].isin(["Adoption", "Transfer", "Return to Owner"]) | df["outcome_type"].isna()]
    df["days_to_adopt"] = (df["outcome_date"] - df["intake_date"]).dt.days
    df = df[df["age_days"] >= min_age_days]
    df.to_parquet("/work/records.parquet", index=False)


def train_ranker(species: str, min_photos: str, run_name: str):
    import boto3
    import numpy as np
    import pandas as pd
    import torch
    from petmatch.ranker import fit_ranker

    rec = pd.read_parquet("/work/records.parquet")
    rec = rec[(rec["species"] == species) & (rec["n_photos"] >= int(min_photos))]
    emb = np.load("/work/emb.npy", mmap_mode="r")
    model = fit_ranker(rec, emb, epochs=15)
    torch.save(model.state_dict(), f"/tmp/{species}.pt")
    boto3.client("s3").upload_file(f"/tmp/{species}.pt", "petmatch-models", f"ranker/{run_name}/{species}.pt")


def evaluate_holdout(run_name: str) -> float:
    import pandas as pd
    import s3fs
    from petmatch.ranker import evaluate_folder

    fs = s3fs.S3FileSystem()
    fs.get(f"s3://petmatch-models/ranker/{run_name}/", "/tmp/models/", recursive=True)
    holdout = pd.read_csv("s3://petmatch-data/holdout/2025-05/animals.csv")
    return float(evaluate_folder("/tmp/models", holdout)["ndcg@10"])


clean_op = create_component_from_func(clean_records, base_image=PET_IMAGE)
ranker_op = create_component_from_func(train_ranker, base_image=PET_IMAGE)
eval_op = create_component_from_func(evaluate_holdout, base_image=PET_IMAGE)


@dsl.pipeline(name="pet-adoption-speed")
def pet_pipeline(shelter_export: str = "s3://petmatch-data/exports/2025-06-01/animals.csv",
                 photos_prefix: str = "s3://petmatch-data/photos/",
                 run_name: str = "rank-2025-06",
                 min_age_days: int = 56):
    cleanup = dsl.ContainerOp(
        name="cleanup-scratch",
        image="amazon/aws-cli:2.17.0",
        command=["sh", "-c"],
        arguments=["aws s3 rm --recursive s3://petmatch-tmp/{{workflow.uid}}/ || true"],
    )

    with dsl.ExitHandler(cleanup):
        work = dsl.VolumeOp(name="work", resource_name="pet-work", size="200Gi", modes=dsl.VOLUME_MODE_RWO,
                            storage_class="standard-rwo")

        photos = dsl.ContainerOp(
            name="fetch-photos",
            image="amazon/aws-cli:2.17.0",
            command=["aws", "s3", "sync"],
            arguments=[photos_prefix, "/work/photos/", "--exclude", "*.heic", "--only-show-errors"],
            pvolumes={"/work": work.volume},
        )
        records = clean_op(shelter_export=shelter_export, min_age_days=min_age_days).add_pvolumes({"/work": work.volume})

        embed = dsl.ContainerOp(
            name="embed-photos",
            image=PET_IMAGE,
            command=["python", "-m", "petmatch.embed"],
            arguments=["--images", "/work/photos",
                       "--backbone", "s3://petmatch-models/clip/vit-b-32-laion2b/",
                       "--batch-size", "256",
                       "--out", "/work/emb.npy"],
            pvolumes={"/work": photos.pvolume},
        ).after(records)
        embed.set_gpu_limit(1)
        embed.add_node_selector_constraint("cloud.google.com/gke-accelerator", "nvidia-l4")

        with dsl.ParallelFor([{"species": "dog", "min_photos": "2"}, {"species": "cat", "min_photos": "1"}]) as item:
            rk = ranker_op(species=item.species, min_photos=item.min_photos, run_name=run_name) \
                .add_pvolumes({"/work": embed.pvolume})

        ev = eval_op(run_name=run_name).after(rk)


if __name__ == "__main__":
    kfp.compiler.Compiler().compile(pet_pipeline, __file__.replace(".py", ".yaml"))
