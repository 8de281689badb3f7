# ruff: noqa
"""Semantic code search index refresh (CodeSearchNet python + internal mirrors).

DevTools ML team. JSONL.gz corpus in S3 -> DuckDB dedup/filter -> CodeT5+
embeddings on a GPU with an HF cache PVC -> Lance table on S3 -> CoSQA eval.
"""
from kfp import compiler, dsl, kubernetes
from kfp.dsl import Dataset, Input, Metrics, Output

CACHE = "/models"


@dsl.component(base_image="python:3.11-slim", packages_to_install=["huggingface_hub==0.23.4"])
def download_encoder(model_id: str, revision: str) -> str:
    import os
    from huggingface_hub import snapshot_download

    path = snapshot_download(repo_id=model_id, revision=revision,
                             cache_dir="/models/hf", token=os.environ.get("HF_TOKEN"))
    print("encoder at", path)
    return path


@dsl.component(base_image="python:3.11-slim", packages_to_install=["duckdb==1.0.0", "pyarrow==16.1.0"])
def dedup_filter(corpus_glob: str, min_tokens: int, functions: Output[Dataset]):
    import duckdb

    con = duckdb.connect()
    con.sql("INSTALL httpfs; LOAD httpfs;")
    con.sql("CREATE SECRET s3 (TYPE S3, PROVIDER CREDENTIAL_CHAIN);")
    con.sql(f"""
        COPY (
            SELECT repo, path, func_name, original_string AS code, docstring,
                   md5(regexp_replace(original_string, '\\s+', '', 'g')) AS h
            FROM read_json_auto('{corpus_glob}', format='newline_delimited', compression='gzip')
            WHERE len(code_tokens) >= {min_tokens}
            QUALIFY row_number() OVER (PARTITION BY h ORDER BY repo) = 1
        ) TO '{functions.path}' (FORMAT PARQUET, COMPRESSION ZSTD)
    """)


@dsl.component(base_image="pytorch/pytorch:2.3.1-cuda12.1-cudnn8-runtime",
               packages_to_install=["transformers==4.41.2", "pyarrow==16.1.0"])
def embed_chunks(encoder_path: str, functions: Input[Dataset], embeddings: Output[Dataset], batch_size: int = 256):
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    import torch
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(encoder_path)
    model = AutoModel.from_pretrained(encoder_path, trust_remote_code=True).cuda().half().eval()
    tbl = pq.read_table(functions.path)
    codes = tbl.column("code").to_pylist()
    vecs = []
    with torch.no_grad():
        for i in range(0, len(codes), batch_size):
            enc = tok(codes[i:i + batch_size], padding=True, truncation=True, max_length=512,
                      return_tensors="pt").to("cuda")
            vecs.append(model(**enc).float().cpu().numpy())
    emb = np.concatenate(vecs)
    tbl = tbl.append_column("vector", pa.FixedSizeListArray.from_arrays(pa.array(emb.ravel()), emb.shape[1]))
    pq.write_table(tbl, embeddings.path)


@dsl.component(base_image="python:3.11-slim", packages_to_install=["lancedb==0.8.2", "pyarrow==16.1.0"])
def build_lance_index(embeddings: Input[Dataset], lance_uri: str, table: str):
    import lancedb
    import pyarrow.parquet as pq

    db = lancedb.connect(lance_uri)
    tbl = db.create_table(table, pq.read_table(embeddings.path), mode="overwrite")
    tbl.create_index(metric="cosine", num_partitions=256, num_sub_vectors=64)
    tbl.create_fts_index("docstring", replace=True)


@dsl.component(base_image="python:3.11-slim",
               packages_to_install=["lancedb==0.8.2", "transformers==4.41.2", "torch==2.3.1", "pandas==2.2.2"])
def eval_retrieval(queries: Input[Dataset], encoder_path: str, lance_uri: str, table: str, metrics: Output[Metrics]):
    import pandas as pd
    import lancedb
    import torch
    from transformers import AutoModel, AutoTokenizer

    q = pd.read_json(queries.path, lines=True)
    tok = AutoTokenizer.from_pretrained(encoder_path)
    enc = AutoModel.from_pretrained(encoder_path, trust_remote_code=True).eval()
    tbl = lancedb.connect(lance_uri).open_table(table)
    hits = 0
    for _, row in q.iterrows():
        with torch.no_grad():
            v = enc(**tok(row.doc, return_tensors="pt"))[0].numpy()
        top = tbl.search(v).limit(10).select(["func_name"]).to_list()
        hits += any(t["func_name"] == row.func_name for t in top)
    metrics.log_metric("recall@10", hits / len(q))


@dsl.pipeline(name="code-search-index-refresh")
def code_search(
    corpus_glob: str = "s3://devtools-ml-data/codesearchnet/v2/python/final/jsonl/train/*.jsonl.gz",
    encoder_id: str = "Salesforce/codet5p-110m-embedding",
    encoder_revision: str = "main",
    lance_uri: str = "s3://devtools-ml-index/code-search/lance",
    table: str = "python_functions_2025_06",
    min_tokens: int = 12,
):
    cache = kubernetes.CreatePVC(
        pvc_name_suffix="-hf-cache",
        access_modes=["ReadWriteOnce"],
        size="40Gi",
        storage_class_name="gp3-csi",
    )

    enc = download_encoder(model_id=encoder_id, revision=encoder_revision)
    kubernetes.mount_pvc(enc, pvc_name=cache.outputs["name"], mount_path=CACHE)
    kubernetes.use_secret_as_env(enc, secret_name="hf-token", secret_key_to_env={"token": "HF_TOKEN"})

    funcs = dedup_filter(corpus_glob=corpus_glob, min_tokens=min_tokens)
    funcs.set_memory_limit("32G").set_cpu_limit("8")
    kubernetes.use_secret_as_env(funcs, secret_name="devtools-ml-s3",
                                 secret_key_to_env={"access_key": "AWS_ACCESS_KEY_ID", "secret_key": "AWS_SECRET_ACCESS_KEY"})

    emb = embed_chunks(encoder_path=enc.output, functions=funcs.outputs["functions"])
    emb.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(1).set_memory_limit("32G")
    kubernetes.mount_pvc(emb, pvc_name=cache.outputs["name"], mount_path=CACHE)

    index = build_lance_index(embeddings=emb.outputs["embeddings"], lance_uri=lance_uri, table=table)
    kubernetes.use_secret_as_env(index, secret_name="devtools-ml-s3",
                                 secret_key_to_env={"access_key": "AWS_ACCESS_KEY_ID", "secret_key": "AWS_SECRET_ACCESS_KEY"})

    cosqa = dsl.importer(
        artifact_uri="s3://devtools-ml-data/cosqa/cosqa-retrieval-test-500.jsonl",
        artifact_class=Dataset,
        reimport=False,
        metadata={"source": "microsoft/CodeXGLUE NL-code-search-WebQuery"},
    )

    ev = eval_retrieval(queries=cosqa.output, encoder_path=enc.output, lance_uri=lance_uri, table=table).after(index)
    kubernetes.mount_pvc(ev, pvc_name=cache.outputs["name"], mount_path=CACHE)
    kubernetes.use_secret_as_env(ev, secret_name="devtools-ml-s3",
                                 secret_key_to_env={"access_key": "AWS_ACCESS_KEY_ID", "secret_key": "AWS_SECRET_ACCESS_KEY"})

    kubernetes.DeletePVC(pvc_name=cache.outputs["name"]).after(ev)


if __name__ == "__main__":
    compiler.Compiler().compile(code_search, __file__.replace(".py", ".yaml"))
