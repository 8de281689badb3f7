# ruff: noqa
# ruff: noqa
"""Support-bot RAG index rebuild (KFP v1 SDK -> Argo).

The knowledge-base exporter drops a dated snapshot per source and updates a
LATEST pointer; resolve-snapshot reads the pointer and hands the date on as an
output parameter. Each source's snapshot is synced onto the team's shared
work claim (sub-path support-bot), chunked and embedded with bge-large, indexed
with FAISS, evaluated against labelled support queries and published (with a
retriever reload) when recall@10 clears the bar.

Compile (kfp 1.8.x): python kfp1_b41_support_rag_index.py  -> kfp1_b41_support_rag_index.yaml
"""
import os

import kfp
from kfp import dsl
from kfp.components import create_component_from_func
from kubernetes.client.models import (V1ConfigMapKeySelector, V1EnvVar, V1EnvVarSource,
                                      V1PersistentVolumeClaimVolumeSource, V1Volume, V1VolumeMount)

RAG_IMAGE = 'ghcr.io/acme-ml/rag-tools:3.2.0'

SOURCES = [
    {'source': 'confluence', 'prefix': 's3://acme-kb-exports/confluence/'},
    {'source': 'jira', 'prefix': 's3://acme-kb-exports/jira/'},
    {'source': 'zendesk', 'prefix': 's3://acme-kb-exports/zendesk/'},
]


def chunk_and_embed(raw_dir: str, embed_model_uri: str, out_dir: str) -> int:
    import os, glob, json
    import numpy as np
    import s3fs
    from sentence_transformers import SentenceTransformer
    s3fs.S3FileSystem().get(embed_model_uri, '/tmp/embed-model/', recursive=True)
    model = SentenceTransformer('/tmp/embed-model')
    size = int(os.environ.get('CHUNK_SIZE', '512'))
    chunks = []
    for path in sorted(glob.glob(f'{raw_dir}/*/**/*.jsonl', recursive=True)):
        for line in open(path):
            doc = json.loads(line)
            text = doc['body']
            chunks += [{'id': doc['id'], 'text': text[i:i + size]} for i in range(0, len(text), size)]
    os.makedirs(out_dir, exist_ok=True)
    np.save(f'{out_dir}/vectors.npy', model.encode([c['text'] for c in chunks], batch_size=256, normalize_embeddings=True))
    with open(f'{out_dir}/chunks.jsonl', 'w') as f:
        for c in chunks:
            f.write(json.dumps(c) + '\n')
    return len(chunks)


def eval_retrieval(index_dir: str, qrels_uri: str, k: int) -> float:
    import pandas as pd
    from acme_rag.eval import recall_at_k
    qrels = pd.read_json(qrels_uri, lines=True)
    return recall_at_k(index_dir, qrels, k=k)


embed_op = create_component_from_func(chunk_and_embed, base_image=RAG_IMAGE)
eval_op = create_component_from_func(eval_retrieval, base_image=RAG_IMAGE)


def kb_work(op, read_only=False):
    op.add_volume(V1Volume(name='kb-work',
                           persistent_volume_claim=V1PersistentVolumeClaimVolumeSource(claim_name='rag-kb-work')))
    op.container.add_volume_mount(V1VolumeMount(name='kb-work', mount_path='/kb', sub_path='support-bot',
                                                read_only=read_only))
    return op


@dsl.pipeline(name='support-bot-rag-index')
def rag_index(embed_model_uri: str = 's3://llm-models/BAAI/bge-large-en-v1.5/',
              index_uri: str = 's3://rag-indexes/support-bot/prod/',
              min_recall: float = 0.82):
    resolve = dsl.ContainerOp(
        name='resolve-snapshot',
        image='amazon/aws-cli:2.15.30',
        command=['sh', '-c'],
        arguments=['mkdir -p /tmp/outputs && aws s3 cp s3://acme-kb-exports/_snapshots/LATEST - '
                   '| head -n1 | tr -d "\\n" > /tmp/outputs/date'],
        file_outputs={'date': '/tmp/outputs/date'})

    with dsl.ParallelFor(SOURCES) as src:
        fetch = dsl.ContainerOp(
            name='fetch-source',
            image='amazon/aws-cli:2.15.30',
            command=['aws', 's3', 'sync', '--only-show-errors', '--exclude', '*.tmp'],
            arguments=[f"{src.prefix}{resolve.outputs['date']}/", f'/kb/raw/{src.source}/'])
        kb_work(fetch)
        fetch.set_retry(3)

    emb = embed_op(raw_dir='/kb/raw', embed_model_uri=embed_model_uri, out_dir='/kb/emb').after(fetch)
    kb_work(emb)
    emb.set_gpu_limit(1)
    emb.container.add_env_variable(V1EnvVar(name='CHUNK_SIZE', value_from=V1EnvVarSource(
        config_map_key_ref=V1ConfigMapKeySelector(name='rag-defaults', key='chunk_size'))))

    index = dsl.ContainerOp(
        name='build-index',
        image='ghcr.io/acme-ml/faiss-builder:1.8.0',
        command=['python', '-m', 'faiss_builder'],
        arguments=['--vectors', '/kb/emb/vectors.npy', '--factory', 'IVF4096,PQ64', '--out', '/kb/index'],
    ).after(emb)
    kb_work(index)
    index.set_memory_limit('96G')

    ev = eval_op(index_dir='/kb/index', qrels_uri='s3://acme-kb-exports/eval/support-qrels-2024q2.jsonl',
                 k=10).after(index)
    kb_work(ev, read_only=True)

    with dsl.Condition(ev.output > min_recall):
        publish = dsl.ContainerOp(
            name='publish-index',
            image='amazon/aws-cli:2.15.30',
            command=['aws', 's3', 'sync', '--delete', '/kb/index/'],
            arguments=[index_uri])
        kb_work(publish, read_only=True)

        dsl.ContainerOp(
            name='reload-retriever',
            image='curlimages/curl:8.8.0',
            command=['curl', '-fsS', '-X', 'POST'],
            arguments=['http://support-retriever.rag.svc:8080/admin/reload'],
        ).after(publish)


if __name__ == '__main__':
    kfp.compiler.Compiler().compile(rag_index, os.path.splitext(__file__)[0] + '.yaml')
