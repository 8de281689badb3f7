# ruff: noqa
"""Weekly query-encoder refresh for e-commerce product search.

Mines (query, clicked product) pairs per locale from session logs with DuckDB,
merges them into one training set (which also decides how the catalog is
sharded for re-encoding), fine-tunes the dual encoder on a shared cache PVC,
re-embeds every catalog shard in a loop over the merge step's shard list and
builds the ANN index. The on-call channel hears about every run.
"""
import os
from typing import List, NamedTuple, Optional

from kfp import compiler, dsl, kubernetes
from kfp.dsl import Dataset, Input, Output

SEARCH = "registry.shopgrid.io/search/relevance-py:5.3.0"


@dsl.component(base_image=SEARCH)
def mine_query_pairs(locale: str, click_log_root: str, week: str, pairs: Output[Dataset]) -> int:
    import duckdb

    con = duckdb.connect()
    con.execute("INSTALL httpfs; LOAD httpfs; SET s3_region='us-east-1';")
    src = f"{click_log_root}/locale={locale}/week={week}/*.parquet"
    n = con.execute(
        f"""
        CREATE TABLE p AS
        SELECT lower(trim(query)) AS query, product_id, count(*) AS clicks
        FROM read_parquet('{src}')
        WHERE event = 'click' AND dwell_ms > 4000
        GROUP BY 1, 2 HAVING count(*) >= 3
        """
    ).fetchone()
    con.execute(f"COPY p TO '{pairs.path}' (FORMAT PARQUET)")
    return con.execute("SELECT count(*) FROM p").fetchone()[0]


@dsl.component(base_image=SEARCH, packages_to_install=["pyarrow==16.1.0"])
def build_training_set(
    locale_pairs: Input[List[Dataset]], week: str, n_shards: int
) -> NamedTuple("Outputs", [("shards", List[str]), ("rows", int)]):
    import pyarrow as pa
    import pyarrow.parquet as pq

    tables = [pq.read_table(p.path) for p in locale_pairs]
    merged = pa.concat_tables(tables)
    pq.write_table(merged, f"s3://shopgrid-search-training/query-rewrite/{week}/train.parquet")
    shards = [f"part-{i:03d}" for i in range(n_shards)]
    Outputs = NamedTuple("Outputs", [("shards", List[str]), ("rows", int)])
    return Outputs(shards, merged.num_rows)


@dsl.container_component
def finetune_encoder(
    base_encoder: str,
    week: str,
    hard_negatives_uri: Optional[str] = None,
    resume_from: Optional[str] = None,
):
    return dsl.ContainerSpec(
        image="registry.shopgrid.io/search/encoder-train:5.3.0-cu124",
        command=["torchrun", "--nproc_per_node=4", "-m", "encoder.train"],
        args=[
            "--model_name_or_path", base_encoder,
            "--train-file", dsl.ConcatPlaceholder(["s3://shopgrid-search-training/query-rewrite/", week, "/train.parquet"]),
            dsl.IfPresentPlaceholder(input_name="hard_negatives_uri", then=["--hard-negatives", hard_negatives_uri]),
            dsl.IfPresentPlaceholder(input_name="resume_from", then=["--resume-from", resume_from], else_=["--fresh-start"]),
            "--output-dir", dsl.ConcatPlaceholder(["/cache/encoder/", week]),
            "--epochs", "2",
        ],
    )


@dsl.component(base_image=SEARCH, packages_to_install=["s3fs==2024.6.1"])
def encode_catalog_shard(shard: str, week: str, index_bucket: str):
    import fsspec
    import numpy as np
    import pandas as pd
    from encoder import DualEncoder

    enc = DualEncoder.load(f"/cache/encoder/{week}")
    items = pd.read_parquet(f"s3://shopgrid-catalog/snapshots/{week}/{shard}.parquet", columns=["product_id", "title", "attrs"])
    emb = enc.encode_docs((items["title"] + " " + items["attrs"]).tolist(), batch_size=512)
    with fsspec.open(f"s3://{index_bucket}/embeddings/{week}/{shard}.npy", "wb") as f:
        np.save(f, emb)


@dsl.component(base_image=SEARCH, packages_to_install=["s3fs==2024.6.1", "faiss-cpu==1.8.0"])
def build_ann_index(index_bucket: str, week: str):
    import glob

    import faiss
    import numpy as np
    import s3fs

    fs = s3fs.S3FileSystem()
    fs.get(f"{index_bucket}/embeddings/{week}/", "/tmp/emb/", recursive=True)
    xb = np.concatenate([np.load(p) for p in sorted(glob.glob("/tmp/emb/*.npy"))])
    index = faiss.index_factory(xb.shape[1], "IVF65536,PQ64")
    index.train(xb[:2_000_000])
    index.add(xb)
    faiss.write_index(index, "/tmp/index.ivfpq")
    fs.put("/tmp/index.ivfpq", f"{index_bucket}/faiss/{week}/index.ivfpq")


@dsl.component(base_image="python:3.11-slim", packages_to_install=["requests"])
def notify_oncall(week: str):
    import os

    import requests

    requests.post(os.environ["ONCALL_HOOK"], json={"text": f"query encoder refresh {week} finished"}, timeout=10)


@dsl.pipeline(name="search-query-encoder-weekly")
def search_query_encoder_weekly(
    locales: list = ["en-US", "de-DE", "ja-JP"],
    click_log_root: str = "s3://shopgrid-clicklogs/sessions",
    week: str = "2025-W27",
    index_bucket: str = "shopgrid-search-index",
    base_encoder: str = "s3://shopgrid-models/query-encoder/e5-base-ft-2025-06/",
    cache_pvc: str = "search-encoder-cache",
    n_shards: int = 64,
):
    bye = notify_oncall(week=week)
    kubernetes.use_secret_as_env(bye, secret_name="search-oncall", secret_key_to_env={"hook": "ONCALL_HOOK"})

    with dsl.ExitHandler(bye, name="weekly-refresh"):
        with dsl.ParallelFor(locales) as loc:
            mine = mine_query_pairs(locale=loc, click_log_root=click_log_root, week=week)
            mine.set_memory_limit("32G")

        merged = build_training_set(locale_pairs=dsl.Collected(mine.outputs["pairs"]), week=week, n_shards=n_shards)

        ft = finetune_encoder(
            base_encoder=base_encoder,
            week=week,
            hard_negatives_uri="s3://shopgrid-search-training/hard-negatives/2025-W26/negatives.parquet",
        ).after(merged)
        ft.set_caching_options(False)
        ft.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(4)
        kubernetes.mount_pvc(ft, pvc_name=cache_pvc, mount_path="/cache")
        kubernetes.add_node_selector(ft, label_key="cloud.google.com/gke-accelerator", label_value="nvidia-l4")

        with dsl.ParallelFor(merged.outputs["shards"], parallelism=8) as shard:
            enc = encode_catalog_shard(shard=shard, week=week, index_bucket=index_bucket).after(ft)
            kubernetes.mount_pvc(enc, pvc_name=cache_pvc, mount_path="/cache")

        build_ann_index(index_bucket=index_bucket, week=week).after(enc)


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    compiler.Compiler().compile(search_query_encoder_weekly, os.path.join(here, "kfp2_r18_search_encoder.yaml"))
