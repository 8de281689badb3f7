# ruff: noqa
"""Product-search learning-to-rank refresh (e-commerce search team), KFP v2.

Query/click logs are scanned lazily with polars (glob given by an env var),
the catalog comes from a Delta table, per-locale catalog text (Hugging Face
datasets saved with save_to_disk) is embedded in a ParallelFor with the
bi-encoder pulled from MLflow, the embeddings go to a scratch PVC created in
the run, a FAISS index is built from the collected outputs, the LambdaMART /
cross-encoder ranker is trained with Hydra overrides, and offline evaluation
reads TFRecord judgments via tf.io.gfile.glob.

Compile: python kfp2_b45_product_search_ranker.py -> kfp2_b45_product_search_ranker.yaml
"""
import os
from typing import List

from kfp import compiler, dsl, kubernetes
from kfp.dsl import Dataset, Input, Model, Output

IMAGE = 'ghcr.io/shopco/search-ml:3.4.0'


@dsl.component(base_image=IMAGE)
def extract_queries(min_impressions: int, queries: Output[Dataset]):
    import os
    import polars as pl
    lf = pl.scan_parquet(os.environ['CLICK_LOGS_GLOB'], storage_options={'aws_region': 'us-east-1'})
    q = (lf.group_by('query_norm').agg(pl.len().alias('impr'), pl.col('clicked').sum())
           .filter(pl.col('impr') >= min_impressions).collect())
    q.write_parquet(queries.path)


@dsl.component(base_image=IMAGE)
def load_catalog(catalog_table: str, catalog: Output[Dataset]):
    from deltalake import DeltaTable
    dt = DeltaTable(catalog_table)
    df = dt.to_pandas(columns=['sku', 'title', 'brand', 'category_path', 'locale'])
    df[df.sku.notna()].to_parquet(catalog.path)


@dsl.component(base_image=IMAGE)
def embed_products(catalog_hf_path: str, locale: str) -> str:
    import mlflow
    import numpy as np
    from datasets import load_from_disk
    from sentence_transformers import SentenceTransformer
    enc_dir = mlflow.artifacts.download_artifacts(
        artifact_uri='s3://shop-ml-artifacts/mlflow/12/9f3ab0c7e1d24f55/artifacts/bi-encoder')
    ds = load_from_disk(catalog_hf_path, storage_options={'client_kwargs': {'region_name': 'us-east-1'}})
    enc = SentenceTransformer(enc_dir)
    emb = enc.encode(ds['title'], batch_size=512, normalize_embeddings=True)
    out = f'/emb/{locale}.npy'
    np.save(out, emb)
    return out


@dsl.component(base_image=IMAGE)
def build_index(emb_files: List[str], index_prefix: str):
    import faiss, fsspec, numpy as np
    xb = np.concatenate([np.load(p) for p in emb_files])
    index = faiss.IndexHNSWFlat(xb.shape[1], 32)
    index.add(xb)
    faiss.write_index(index, '/emb/products.faiss')
    with fsspec.open(index_prefix + 'products.faiss', 'wb') as f:
        f.write(open('/emb/products.faiss', 'rb').read())


@dsl.container_component
def train_ranker(train_path: str, queries: Input[Dataset], catalog: Input[Dataset], model: Output[Model]):
    return dsl.ContainerSpec(
        image=IMAGE,
        command=['python', '-m', 'ranker.train'],
        args=[dsl.ConcatPlaceholder(['data.train_path=', train_path]),
              'data.features_path=s3://shop-search-data/ltr/features/v12/',
              dsl.ConcatPlaceholder(['data.queries=', queries.path]),
              dsl.ConcatPlaceholder(['data.catalog=', catalog.path]),
              'trainer.default_root_dir=s3://shop-ml-artifacts/ranker/runs/',
              dsl.ConcatPlaceholder(['export.path=', model.path])])


@dsl.component(base_image=IMAGE)
def offline_eval(model: Input[Model], judgments_glob: str) -> float:
    import tensorflow as tf
    from ranker.eval import ndcg_at_k, load_ranker
    files = tf.io.gfile.glob(judgments_glob)
    ds = tf.data.TFRecordDataset(files, num_parallel_reads=8)
    return float(ndcg_at_k(load_ranker(model.path), ds, k=10))


@dsl.pipeline(name='product-search-ltr-refresh')
def ltr_pipeline(catalog_table: str = 's3://shop-lakehouse/catalog/products_delta',
                 catalog_hf_root: str = 's3://shop-search-data/catalog-hf',
                 locales: List[str] = ['en_US', 'de_DE', 'ja_JP'],
                 train_path: str = 's3://shop-search-data/ltr/train/2024-05/',
                 min_impressions: int = 20):
    pvc = kubernetes.CreatePVC(pvc_name_suffix='-emb-scratch', access_modes=['ReadWriteMany'],
                               size='200Gi', storage_class_name='efs-sc')
    eq = extract_queries(min_impressions=min_impressions)
    eq.set_env_variable('CLICK_LOGS_GLOB', 's3://shop-search-logs/clicks/dt=2024-05-*/part-*.parquet')
    lc = load_catalog(catalog_table=catalog_table)
    with dsl.ParallelFor(locales, parallelism=2) as loc:
        em = embed_products(catalog_hf_path=f'{catalog_hf_root}/{loc}', locale=loc).after(lc)
        em.set_env_variable('MLFLOW_TRACKING_URI', 'http://mlflow.ml-platform.svc:5000')
        kubernetes.mount_pvc(em, pvc_name=pvc.outputs['name'], mount_path='/emb')
    bi = build_index(emb_files=dsl.Collected(em.output), index_prefix='s3://shop-search-index/faiss/hnsw32/')
    kubernetes.mount_pvc(bi, pvc_name=pvc.outputs['name'], mount_path='/emb')
    tr = train_ranker(train_path=train_path, queries=eq.outputs['queries'], catalog=lc.outputs['catalog'])
    ev = offline_eval(model=tr.outputs['model'],
                      judgments_glob='s3://shop-search-data/ltr/judgments/2024-05/*.tfrecord')
    rm = kubernetes.DeletePVC(pvc_name=pvc.outputs['name']).after(bi)


if __name__ == '__main__':
    compiler.Compiler().compile(ltr_pipeline, os.path.splitext(__file__)[0] + '.yaml')
