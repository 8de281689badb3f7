# ruff: noqa
"""KFP v2 (blind test r4): semantic code search index over a monthly repo snapshot.

Idioms: s3fs paths without a scheme (f"{bucket}/{key}"), a list returned by one task driving
a ParallelFor (task-output loop), ray.data.read_parquet of a per-language partition, an
encoder loaded by a shared helper module baked into the image (code not visible),
lance.write_dataset, dsl.Collected fan-in of the per-language tables, dsl.If on a boolean
pipeline parameter around a static ParallelFor, set_caching_options(False).

Compile: /tmp/kfp2/bin/python kfp2_r4_code_search.py
"""
import os
from typing import List

from kfp import compiler, dsl

PY = 'python:3.11-slim'
CODE = 'ghcr.io/acme-devtools/codesearch:2024.11.2'


@dsl.component(base_image=PY, packages_to_install=['s3fs==2024.10.0'])
def list_languages(bucket: str, manifest_key: str, min_repos: int) -> List[str]:
    """Count repos per language in the snapshot manifest (JSON lines)."""
    import collections
    import json

    import s3fs

    fs = s3fs.S3FileSystem()
    counts = collections.Counter()
    with fs.open(f"{bucket}/{manifest_key}", "r") as f:
        for line in f:
            counts[json.loads(line)["language"]] += 1
    return sorted(lang for lang, n in counts.items() if n >= min_repos)


@dsl.component(base_image=CODE)
def embed_language(lang: str, snapshot_root: str, encoder_uri: str, index_root: str,
                   batch_size: int = 256) -> str:
    import lance
    import ray
    from codesearch.encoders import load_encoder  # shared helper, lives in the image

    ray.init()
    funcs = ray.data.read_parquet(f"{snapshot_root}/lang={lang}/",
                                  columns=["repo", "path", "func_name", "func_code"])
    encoder = load_encoder(encoder_uri)
    emb = funcs.map_batches(encoder, batch_size=batch_size, num_gpus=1, concurrency=4)
    out = f"{index_root}/{lang}.lance"
    lance.write_dataset(emb.to_pandas(), out, mode="overwrite")
    return out


@dsl.component(base_image=CODE)
def merge_index(tables: List[str], index_root: str, release: str, num_partitions: int) -> str:
    import lance
    import pyarrow as pa

    merged = pa.concat_tables([lance.dataset(t).to_table() for t in tables])
    out = f"{index_root}/merged-{release}.lance"
    ds = lance.write_dataset(merged, out, mode="overwrite")
    ds.create_index("embedding", index_type="IVF_PQ", num_partitions=num_partitions, num_sub_vectors=48)
    return out


@dsl.component(base_image=CODE)
def eval_mrr(index_uri: str, queries_root: str, lang: str, metrics: dsl.Output[dsl.Metrics]):
    import lance
    import pandas as pd
    from codesearch.eval import mrr_at_k  # shared helper

    queries = pd.read_json(f"{queries_root}/{lang}/test.jsonl.gz", lines=True)
    ds = lance.dataset(index_uri)
    metrics.log_metric(f"mrr@10/{lang}", mrr_at_k(ds, queries, k=10))


@dsl.pipeline(name='code-search-index')
def code_search(bucket: str = 'acme-code-data',
                manifest_key: str = 'snapshots/2024-11/manifest/repos.jsonl',
                snapshot_root: str = 's3://acme-code-data/snapshots/2024-11/functions',
                encoder_uri: str = 's3://acme-code-models/unixcoder-ft/v3/',
                index_root: str = 's3://acme-code-index/2024-11',
                release: str = '2024-11',
                queries_root: str = 's3://acme-code-data/eval/csn-queries',
                run_eval: bool = True):
    langs = list_languages(bucket=bucket, manifest_key=manifest_key, min_repos=500)
    langs.set_caching_options(False)
    with dsl.ParallelFor(langs.output, parallelism=4) as lang:
        emb = embed_language(lang=lang, snapshot_root=snapshot_root, encoder_uri=encoder_uri,
                             index_root=index_root)
        emb.set_accelerator_type('nvidia.com/gpu').set_accelerator_limit(1)
    merged = merge_index(tables=dsl.Collected(emb.output), index_root=index_root, release=release,
                         num_partitions=1024)
    with dsl.If(run_eval == True, name='eval-enabled'):
        with dsl.ParallelFor(['python', 'go', 'java'], name='eval-langs') as ev_lang:
            eval_mrr(index_uri=merged.output, queries_root=queries_root, lang=ev_lang)


if __name__ == '__main__':
    compiler.Compiler().compile(code_search, os.path.splitext(__file__)[0] + '.yaml')
