# ruff: noqa
"""Visual search for a fashion catalog: stage product images per category, fine-tune CLIP, build a FAISS index, eval on street2shop."""
from kfp import compiler, dsl, kubernetes

TRAIN_IMAGE = "ghcr.io/shopvis/clip-train:2.3.1-cu121"


@dsl.container_component
def stage_category(catalog_root: str, category: str):
    return dsl.ContainerSpec(
        image="peakcom/s5cmd:v2.2.2",
        command=["/s5cmd"],
        args=["--numworkers", "64", "cp", dsl.ConcatPlaceholder([catalog_root, "/", category, "/*.jpg"]),
              dsl.ConcatPlaceholder(["/catalog/", category, "/"])],
    )


@dsl.container_component
def finetune_clip(clip_model_uri: str, index_version: str, epochs: int):
    return dsl.ContainerSpec(
        image=TRAIN_IMAGE,
        command=["bash", "-c"],
        args=['set -euo pipefail\n'
              'torchrun --nproc_per_node 4 -m shopvis.train_clip \\\n'
              '  --data-root /catalog \\\n'
              '  --pretrained "$0" \\\n'
              '  --epochs "$2" --batch-size 256 --lr 1e-5 \\\n'
              '  --output-dir "s3://shopvis-models/clip-ft/$1/"\n',
              clip_model_uri, index_version, epochs],
    )


@dsl.component(base_image=TRAIN_IMAGE)
def build_index(model_root: str, index_version: str) -> int:
    import glob

    import boto3
    import faiss
    import fsspec
    import numpy as np
    import pandas as pd
    import torch
    from shopvis.model import load_clip, embed_images

    with fsspec.open(f"{model_root}/checkpoint-final.pt", "rb") as f:
        state = torch.load(f, map_location="cuda")
    model = load_clip(state)

    paths = sorted(glob.glob("/catalog/*/*.jpg"))
    vecs = embed_images(model, paths, batch_size=512).astype(np.float32)
    faiss.normalize_L2(vecs)
    index = faiss.IndexHNSWFlat(vecs.shape[1], 32)
    index.add(vecs)
    faiss.write_index(index, "/tmp/catalog.faiss")

    boto3.client("s3").upload_file("/tmp/catalog.faiss", "shopvis-index", f"{index_version}/catalog.faiss")
    pd.DataFrame({"path": paths}).to_parquet(f"s3://shopvis-index/{index_version}/ids.parquet")
    return len(paths)


@dsl.component(base_image=TRAIN_IMAGE)
def eval_retrieval(index_version: str, model_root: str, metrics: dsl.Output[dsl.Metrics]):
    import boto3
    import faiss
    import fsspec
    import pandas as pd
    import torch
    from shopvis.model import load_clip, embed_urls, recall_at_k

    s3 = boto3.client("s3")
    s3.download_file("shopvis-index", f"{index_version}/catalog.faiss", "/tmp/catalog.faiss")
    index = faiss.read_index("/tmp/catalog.faiss")
    ids = pd.read_parquet(f"s3://shopvis-index/{index_version}/ids.parquet")
    with fsspec.open(f"{model_root}/checkpoint-final.pt", "rb") as f:
        model = load_clip(torch.load(f, map_location="cuda"))

    queries = pd.read_json("s3://shopvis-eval/street2shop/queries.jsonl", lines=True)
    q = embed_urls(model, queries["image_uri"].tolist())
    for k in (1, 10):
        metrics.log_metric(f"recall@{k}", recall_at_k(index, ids, q, queries["product_path"], k))


@dsl.pipeline(name="fashion-visual-search")
def visual_search(catalog_root: str = "s3://shopvis-catalog/images/2025-06",
                  categories: list = ["dresses", "sneakers", "handbags"],
                  clip_model_uri: str = "s3://shopvis-models/clip/ViT-B-16-laion2b/",
                  index_version: str = "v41",
                  epochs: int = 3):
    pvc = kubernetes.CreatePVC(pvc_name_suffix="-catalog", access_modes=["ReadWriteMany"], size="300Gi",
                               storage_class_name="efs-sc")

    with dsl.ParallelFor(categories, parallelism=3) as category:
        stage = stage_category(catalog_root=catalog_root, category=category)
        kubernetes.mount_pvc(stage, pvc_name=pvc.outputs["name"], mount_path="/catalog")

    ft = finetune_clip(clip_model_uri=clip_model_uri, index_version=index_version, epochs=epochs).after(stage)
    kubernetes.mount_pvc(ft, pvc_name=pvc.outputs["name"], mount_path="/catalog")
    ft.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(4)
    ft.set_memory_limit("200G")
    kubernetes.add_toleration(ft, key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")

    idx = build_index(model_root=f"s3://shopvis-models/clip-ft/{index_version}", index_version=index_version).after(ft)
    kubernetes.mount_pvc(idx, pvc_name=pvc.outputs["name"], mount_path="/catalog")
    idx.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(1)

    ev = eval_retrieval(index_version=index_version, model_root=f"s3://shopvis-models/clip-ft/{index_version}")
    ev.after(idx)
    ev.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(1)

    kubernetes.DeletePVC(pvc_name=pvc.outputs["name"]).after(idx)


if __name__ == "__main__":
    compiler.Compiler().compile(visual_search, __file__.replace(".py", ".yaml"))
