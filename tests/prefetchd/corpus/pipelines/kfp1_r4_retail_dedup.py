# ruff: noqa
"""KFP v1 (blind test r4): near-duplicate detection over a retail product-image catalog.

Idioms: a static ParallelFor over dicts (withItems) feeding a lightweight component that
calls datasets.load_dataset("imagefolder", data_dir=f"{root}/images/{category}") and
uploads its embeddings with gcsfs `put` to a path without a scheme; a fan-in component
globbing and opening those embeddings through gcsfs; a YAML component (argparse program in
the image) with `--catalog-table` / `--dupes` / `--out-table`; dsl.Condition on a task output;
an ExitHandler whose cleanup runs `gsutil -m rm -r`; set_memory_limit / node selector.

Compile: /tmp/kfp1/bin/python kfp1_r4_retail_dedup.py
"""
import os

import kfp
from kfp import components, dsl
from kfp.components import OutputPath

DEDUP = 'ghcr.io/acme-retail/img-dedup:1.4.0'


def embed_category(catalog_root: str, category: str, emb_bucket: str, run_id: str):
    import gcsfs
    import numpy as np
    from datasets import load_dataset
    from dedup.clip import embed_images  # shared helper in the image

    ds = load_dataset("imagefolder", data_dir=f"{catalog_root}/images/{category}", split="train")
    emb = embed_images(ds, model_name="clip-vit-l14-retail-ft")
    np.save("/tmp/emb.npy", emb)
    gcsfs.GCSFileSystem().put("/tmp/emb.npy", f"{emb_bucket}/{run_id}/{category}.npy")


embed_op = components.create_component_from_func(
    embed_category, base_image=DEDUP, packages_to_install=['gcsfs==2024.10.0', 'datasets==3.1.0'])


def find_dupes(emb_bucket: str, run_id: str, threshold: float, dupes_path: OutputPath('CSV')) -> int:
    import gcsfs
    import numpy as np
    from dedup.faiss_pairs import near_pairs  # shared helper

    fs = gcsfs.GCSFileSystem()
    mats = {}
    for p in fs.glob(f"{emb_bucket}/{run_id}/*.npy"):
        with fs.open(p, "rb") as f:
            mats[p.rsplit("/", 1)[-1][:-4]] = np.load(f)
    pairs = near_pairs(mats, threshold=threshold)
    pairs.to_csv(dupes_path, index=False)
    return len(pairs)


dupes_op = components.create_component_from_func(
    find_dupes, base_image=DEDUP, packages_to_install=['gcsfs==2024.10.0'])

apply_op = components.load_component_from_text('''
name: Apply dedup
inputs:
- {name: catalog_table, type: String}
- {name: dupes, type: CSV}
- {name: out_table, type: String}
implementation:
  container:
    image: ghcr.io/acme-retail/img-dedup:1.4.0
    command: [python, -m, dedup.apply]
    args: [--catalog-table, {inputValue: catalog_table}, --dupes, {inputPath: dupes},
           --out-table, {inputValue: out_table}, --keep, highest_resolution]
''')

CATEGORIES = [
    {'category': 'apparel', 'threshold': '0.93'},
    {'category': 'home-garden', 'threshold': '0.95'},
    {'category': 'toys', 'threshold': '0.94'},
]


@dsl.pipeline(name='retail-image-dedup', description='CLIP near-duplicate detection per category')
def retail_dedup(catalog_root: str = 'gs://acme-retail-catalog/2024-11',
                 emb_bucket: str = 'acme-retail-dedup-tmp',
                 run_id: str = 'r-2024-11-18',
                 catalog_table: str = 's3://acme-retail-lake/gold/product_images',
                 out_table: str = 's3://acme-retail-lake/gold/product_images_dedup'):
    cleanup = dsl.ContainerOp(
        name='cleanup-embeddings', image='gcr.io/google.com/cloudsdktool/google-cloud-cli:498.0.0-slim',
        command=['gsutil', '-m', 'rm', '-r', f'gs://{emb_bucket}/{run_id}/'])
    with dsl.ExitHandler(cleanup):
        with dsl.ParallelFor(CATEGORIES) as c:
            emb = embed_op(catalog_root=catalog_root, category=c.category, emb_bucket=emb_bucket, run_id=run_id)
            emb.set_gpu_limit(1)
            emb.add_node_selector_constraint('cloud.google.com/gke-accelerator', 'nvidia-l4')
        dupes = dupes_op(emb_bucket=emb_bucket, run_id=run_id, threshold=0.94).after(emb)
        dupes.set_memory_limit('64Gi')
        with dsl.Condition(dupes.outputs['Output'] > 0, name='has-dupes'):
            apply_op(catalog_table=catalog_table, dupes=dupes.outputs['dupes'], out_table=out_table)


if __name__ == '__main__':
    kfp.compiler.Compiler().compile(retail_dedup, os.path.splitext(__file__)[0] + '.yaml')
