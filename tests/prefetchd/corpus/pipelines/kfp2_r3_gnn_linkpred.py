# ruff: noqa
"""KFP v2 (blind test r3): GraphSAGE link prediction on a product co-purchase graph.

Idioms: CreatePVC + mount_pvc on several tasks + DeletePVC, ExitHandler with a notify task,
pyarrow.dataset over an f-string partition folder, pq.read_table, a helper function inside the
component that builds the embeddings path, torch.load through fsspec, pd.read_parquet with
columns=, fs.put of a local folder, kubernetes.use_secret_as_env, node selector.

Compile: /tmp/kfp2/bin/python kfp2_r3_gnn_linkpred.py
"""
import os

from kfp import compiler, dsl, kubernetes

GNN = 'ghcr.io/acme-commerce/pyg-train:2.5.3-cu121'


@dsl.component(base_image=GNN)
def export_graph(edges_root: str, nodes_uri: str, snapshot: str):
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq
    import torch

    edges = ds.dataset(f'{edges_root}/snapshot={snapshot}/', format='parquet').to_table(columns=['src', 'dst'])
    nodes = pq.read_table(nodes_uri, columns=['item_id', 'category'])
    torch.save({'src': torch.tensor(edges['src'].to_numpy()), 'dst': torch.tensor(edges['dst'].to_numpy()),
                'n': nodes.num_rows}, '/graph/raw.pt')


@dsl.component(base_image=GNN)
def partition_graph(num_parts: int):
    import torch
    from torch_geometric.loader import ClusterData
    from torch_geometric.data import Data

    raw = torch.load('/graph/raw.pt')
    data = Data(edge_index=torch.stack([raw['src'], raw['dst']]), num_nodes=raw['n'])
    ClusterData(data, num_parts=num_parts, save_dir='/graph/parts')


@dsl.component(base_image=GNN)
def train_graphsage(features_root: str, text_encoder: str, epochs: int, model: dsl.Output[dsl.Model]):
    import fsspec
    import torch
    from linkpred.train import fit_sage

    def emb_path(root: str, encoder: str) -> str:
        return f"{root.rstrip('/')}/text-emb/{encoder}/node_emb.pt"

    with fsspec.open(emb_path(features_root, text_encoder), 'rb') as f:
        x = torch.load(f, map_location='cpu')
    fit_sage(x, parts_dir='/graph/parts', epochs=epochs, out=model.path)


@dsl.component(base_image=GNN)
def evaluate_linkpred(model: dsl.Input[dsl.Model], holdout_uri: str, metrics: dsl.Output[dsl.Metrics]):
    import pandas as pd
    from linkpred.eval import hits_at_k

    pairs = pd.read_parquet(holdout_uri, columns=['src', 'dst', 'label'])
    for k, v in hits_at_k(model.path, pairs, ks=(20, 50, 100)).items():
        metrics.log_metric(f'hits@{k}', v)


@dsl.component(base_image=GNN)
def export_embeddings(model: dsl.Input[dsl.Model], ann_uri: str):
    import fsspec
    from linkpred.export import write_faiss_index

    write_faiss_index(model.path, '/tmp/ann')
    fs, _ = fsspec.core.url_to_fs(ann_uri)
    fs.put('/tmp/ann', ann_uri, recursive=True)


@dsl.container_component
def notify(channel: str, run: str):
    return dsl.ContainerSpec(image='curlimages/curl:8.8.0', command=['sh', '-c'],
                             args=['curl -s -X POST -H "Authorization: Bearer $SLACK_TOKEN" -d "{\\"text\\": \\"$1 done\\"}" "$0"', channel, run])


@dsl.pipeline(name='copurchase-graphsage')
def gnn_linkpred(edges_root: str = 's3://acme-commerce-graph/edges/copurchase',
                 nodes_uri: str = 's3://acme-commerce-graph/nodes/items-2024-10.parquet',
                 snapshot: str = '2024-10-06',
                 features_root: str = 's3://acme-commerce-graph/features/',
                 text_encoder: str = 'e5-large-v2',
                 holdout_uri: str = 's3://acme-commerce-graph/edges/copurchase/holdout/2024-10-13.parquet',
                 ann_uri: str = 's3://acme-commerce-serving/ann/copurchase-sage/2024-10-06/',
                 num_parts: int = 64, epochs: int = 20,
                 channel: str = 'https://slack.acme.example/hooks/graph-ml'):
    notify_task = notify(channel=channel, run=snapshot)
    kubernetes.use_secret_as_env(notify_task, secret_name='slack-bot', secret_key_to_env={'token': 'SLACK_TOKEN'})
    pvc = kubernetes.CreatePVC(pvc_name_suffix='-graph-scratch', access_modes=['ReadWriteOnce'],
                               size='500Gi', storage_class_name='gp3')
    with dsl.ExitHandler(notify_task, name='graph-run'):
        exp = export_graph(edges_root=edges_root, nodes_uri=nodes_uri, snapshot=snapshot)
        kubernetes.mount_pvc(exp, pvc_name=pvc.outputs['name'], mount_path='/graph')
        part = partition_graph(num_parts=num_parts).after(exp)
        kubernetes.mount_pvc(part, pvc_name=pvc.outputs['name'], mount_path='/graph')
        train = train_graphsage(features_root=features_root, text_encoder=text_encoder, epochs=epochs).after(part)
        kubernetes.mount_pvc(train, pvc_name=pvc.outputs['name'], mount_path='/graph')
        kubernetes.add_node_selector(train, label_key='nvidia.com/gpu.product', label_value='NVIDIA-A100-SXM4-80GB')
        ev = evaluate_linkpred(model=train.outputs['model'], holdout_uri=holdout_uri)
        ex = export_embeddings(model=train.outputs['model'], ann_uri=ann_uri)
        kubernetes.DeletePVC(pvc_name=pvc.outputs['name']).after(ev, ex)


if __name__ == '__main__':
    compiler.Compiler().compile(gnn_linkpred, os.path.splitext(__file__)[0] + '.yaml')
