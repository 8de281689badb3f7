# ruff: noqa
"""E-commerce semantic search: product embedding index rebuild (KFP v1 SDK -> Argo Workflow).

The search-platform team downloads the E5 encoder onto a shared work volume,
embeds each catalog vertical on a GPU (static ParallelFor over dicts that
carry the vertical's export URI), builds an IVF-PQ FAISS index, snapshots the
volume, restores the snapshot as a read-only serving volume, rolls out the
index server Deployment on it and runs smoke queries against it.

Compile (kfp 1.8.24): python kfp1_b54_product_embedding_index.py -> kfp1_b54_product_embedding_index.yaml
"""
import os

import kfp
from kfp import dsl
from kfp.aws import use_aws_secret
from kfp.components import create_component_from_func, load_component_from_text

VERTICALS = [
    {'vertical': 'apparel', 'products': 's3://shopco-catalog-export/products/vertical=apparel/', 'batch': 512},
    {'vertical': 'electronics', 'products': 's3://shopco-catalog-export/products/vertical=electronics/', 'batch': 256},
    {'vertical': 'home-garden', 'products': 's3://shopco-catalog-export/products/vertical=home-garden/', 'batch': 512},
]

INDEX_CONFIG = """\
factory: IVF65536,PQ64
metric: inner_product
train_sample: s3://shopco-search/index-training/e5-base-v2/sample_2m.npy
nprobe: 48
"""


def embed_vertical(vertical: str, products_uri: str, batch_size: int, model_dir: str, out_dir: str) -> int:
    """Encodes product titles of one vertical with E5 (passage: prefix) into /work/emb."""
    import os
    import numpy as np
    import pandas as pd
    from sentence_transformers import SentenceTransformer
    from torch.utils.data import DataLoader
    df = pd.read_parquet(products_uri, columns=['sku', 'title', 'brand', 'category_path'])
    model = SentenceTransformer(model_dir, device='cuda')
    texts = ('passage: ' + df['title'] + ' | ' + df['brand'].fillna('') + ' | ' + df['category_path']).tolist()
    vecs = [model.encode(batch, convert_to_numpy=True, normalize_embeddings=True)
            for batch in DataLoader(texts, batch_size=batch_size)]
    os.makedirs(out_dir, exist_ok=True)
    np.save(f'{out_dir}/{vertical}.npy', np.concatenate(vecs))
    df[['sku']].to_parquet(f'{out_dir}/{vertical}.skus.parquet', index=False)
    return len(df)


embed_op = create_component_from_func(
    embed_vertical, base_image='pytorch/pytorch:2.1.2-cuda12.1-cudnn8-runtime',
    packages_to_install=['sentence-transformers==2.5.1', 'pandas==2.2.1', 'pyarrow==15.0.0', 's3fs==2024.2.0'])

build_index_op = load_component_from_text("""
name: Build FAISS index
description: Trains the IVF-PQ quantizer on the configured sample and adds all vertical embeddings.
inputs:
- {name: embeddings_dir, type: String}
- {name: index_config, type: YAML}
- {name: index_name, type: String}
- {name: out_dir, type: String, default: /work/index}
outputs:
- {name: index_stats, type: JsonObject}
implementation:
  container:
    image: ghcr.io/shopco/faiss-builder:1.7.4-cuda12
    command: [python, -m, faiss_builder.build]
    args: [--emb-dir, {inputValue: embeddings_dir}, --config, {inputPath: index_config},
           --name, {inputValue: index_name}, --out-dir, {inputValue: out_dir},
           --stats, {outputPath: index_stats}]
""")

AWS = use_aws_secret('aws-secret', 'AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY')


@dsl.pipeline(name='product-embedding-index', description='Rebuild the semantic product index')
def embedding_index_pipeline(embed_model_uri: str = 's3://shopco-ml-models/embeddings/e5-base-v2/',
                             catalog_date: str = '2024-06-15',
                             index_name: str = 'products-v5'):
    work = dsl.VolumeOp(name='create-embed-volume', resource_name='embed-work', size='500Gi',
                        modes=dsl.VOLUME_MODE_RWM, storage_class='efs-sc')

    encoder = dsl.ContainerOp(
        name='download-encoder', image='amazon/aws-cli:2.15.30', command=['aws', 's3', 'sync'],
        arguments=[embed_model_uri, '/work/model/', '--only-show-errors'],
        pvolumes={'/work': work.volume}).apply(AWS)

    with dsl.ParallelFor(VERTICALS) as v:
        emb = embed_op(vertical=v.vertical, products_uri=v.products, batch_size=v.batch,
                       model_dir='/work/model', out_dir='/work/emb').apply(AWS)
        emb.add_pvolumes({'/work': encoder.pvolume})
        emb.set_gpu_limit(1)
        emb.add_node_selector_constraint('nvidia.com/gpu.product', 'NVIDIA-L4')
        emb.set_retry(2)

    build = build_index_op(embeddings_dir='/work/emb', index_config=INDEX_CONFIG, index_name=index_name).apply(AWS)
    build.add_pvolumes({'/work': encoder.pvolume})
    build.after(emb)
    build.set_gpu_limit(1)
    build.set_memory_request('120G')

    snap = dsl.VolumeSnapshotOp(name='snapshot-index', resource_name='embed-index-snap', volume=build.pvolume)

    serving = dsl.VolumeOp(name='create-serving-volume', resource_name='index-serving',
                           data_source=snap.snapshot, size='500Gi', modes=dsl.VOLUME_MODE_ROM)

    deploy = dsl.ResourceOp(
        name='deploy-index-server', action='apply',
        success_condition='status.availableReplicas > 0',
        k8s_resource={
            'apiVersion': 'apps/v1', 'kind': 'Deployment',
            'metadata': {'name': f'search-index-{index_name}', 'namespace': 'search'},
            'spec': {
                'replicas': 2,
                'selector': {'matchLabels': {'app': f'search-index-{index_name}'}},
                'template': {
                    'metadata': {'labels': {'app': f'search-index-{index_name}'}},
                    'spec': {
                        'containers': [{
                            'name': 'server', 'image': 'ghcr.io/shopco/faiss-server:0.9.2',
                            'args': ['--index', f'/index/index/{index_name}.faiss', '--port', '8080'],
                            'volumeMounts': [{'name': 'index', 'mountPath': '/index', 'readOnly': True}]}],
                        'volumes': [{'name': 'index', 'persistentVolumeClaim': {
                            'claimName': serving.outputs['name'], 'readOnly': True}}]}}}})

    smoke = dsl.ContainerOp(
        name='smoke-test-queries', image='ghcr.io/shopco/search-smoke:0.4.2',
        command=['python', '-m', 'smoke.run'],
        arguments=['--queries', f's3://shopco-search/eval/smoke/{catalog_date}/queries.txt',
                   '--endpoint', f'http://search-index-{index_name}.search.svc:8080',
                   '--min-recall', '0.9']).apply(AWS)
    smoke.after(deploy)
    smoke.set_retry(5)


if __name__ == '__main__':
    kfp.compiler.Compiler().compile(embedding_index_pipeline, os.path.splitext(__file__)[0] + '.yaml')
