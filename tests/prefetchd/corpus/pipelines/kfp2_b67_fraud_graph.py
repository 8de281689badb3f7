# ruff: noqa
"""Payment-fraud graph model with a nested graph-building pipeline and dsl.OneOf (KFP v2).

An inner pipeline (used as a component) receives the transaction bucket and
snapshot date as parameters and builds edge and node tables with
ConcatPlaceholder URIs. The outer pipeline trains either a GNN or a
gradient-boosted baseline (dsl.If / dsl.Else on a string parameter); the
scorer takes whichever model was trained through dsl.OneOf. Labels reach the
GNN through a constant env var and the baseline through an optional input
wrapped in IfPresentPlaceholder; the scorer's hold-out set is a component
input default. A config map and a secret are exported as env vars.

Compile: python kfp2_b67_fraud_graph.py  -> kfp2_b67_fraud_graph.yaml
"""
import os
from typing import Optional

from kfp import compiler, dsl, kubernetes
from kfp.dsl import Dataset, Input, Metrics, Model, Output

GRAPH_IMAGE = 'ghcr.io/example/fraud-graph:0.14.2'


@dsl.container_component
def extract_edges(bucket: str, snapshot: str, edges: Output[Dataset]):
    return dsl.ContainerSpec(
        image=GRAPH_IMAGE,
        command=['python', '-m', 'fraudgraph.extract_edges'],
        args=['--transactions', dsl.ConcatPlaceholder(['s3://', bucket, '/transactions/dt=', snapshot, '/']),
              '--out', edges.path])


@dsl.container_component
def extract_nodes(bucket: str, snapshot: str, nodes: Output[Dataset], kyc_table: Optional[str] = None):
    return dsl.ContainerSpec(
        image=GRAPH_IMAGE,
        command=['python', '-m', 'fraudgraph.extract_nodes'],
        args=['--accounts', dsl.ConcatPlaceholder(['s3://', bucket, '/accounts/snapshot=', snapshot,
                                                   '/accounts.parquet']),
              dsl.IfPresentPlaceholder(input_name='kyc_table', then=['--kyc', kyc_table]),
              '--out', nodes.path])


@dsl.container_component
def assemble_graph(edges: Input[Dataset], nodes: Input[Dataset], graph: Output[Dataset]):
    return dsl.ContainerSpec(
        image=GRAPH_IMAGE,
        command=['python', '-m', 'fraudgraph.assemble'],
        args=['--edges', edges.path, '--nodes', nodes.path, '--out', graph.path])


@dsl.pipeline(name='build-transaction-graph')
def build_graph(bucket: str, snapshot: str) -> Dataset:
    e = extract_edges(bucket=bucket, snapshot=snapshot)
    n = extract_nodes(bucket=bucket, snapshot=snapshot)
    g = assemble_graph(edges=e.outputs['edges'], nodes=n.outputs['nodes'])
    return g.outputs['graph']


@dsl.container_component
def train_gnn(graph: Input[Dataset], model: Output[Model], epochs: int = 40):
    # labels come from $LABELS_URI (set on the task)
    return dsl.ContainerSpec(
        image='ghcr.io/example/fraud-gnn:0.6.0',
        command=['sh', '-c', 'exec python -m fraudgnn.train --labels "$LABELS_URI" "$@"', 'train'],
        args=['--graph', graph.path, '--epochs', epochs, '--out', model.path])


@dsl.container_component
def train_xgb(graph: Input[Dataset], model: Output[Model], labels: Optional[str] = None,
              feature_store: Optional[str] = None):
    return dsl.ContainerSpec(
        image='ghcr.io/example/fraud-xgb:1.7.6',
        command=['python', '-m', 'fraudxgb.train'],
        args=['--graph', graph.path,
              dsl.IfPresentPlaceholder(input_name='labels', then=['--labels', labels]),
              dsl.IfPresentPlaceholder(input_name='feature_store', then=['--features', feature_store]),
              '--out', model.path])


@dsl.container_component
def score(model: Input[Model], report_uri: str, metrics: Output[Metrics],
          holdout: str = 's3://example-fraud/holdout/2024-07/scored_txn.parquet'):
    # reads the hold-out set, writes an HTML report to report_uri; ALERT_THRESHOLD comes from a config map
    return dsl.ContainerSpec(
        image=GRAPH_IMAGE,
        command=['python', '-m', 'fraudgraph.score'],
        args=['--model', model.path, '--holdout', holdout, '--report', report_uri, '--metrics', metrics.path])


@dsl.pipeline(name='fraud-graph-train')
def fraud_pipeline(
    txn_bucket: str = 'example-fraud',
    snapshot: str = '2024-06-30',
    model_family: str = 'gnn',
    labels_uri: str = 's3://example-fraud/labels/chargebacks_2024h1.parquet',
):
    graph_task = build_graph(bucket=txn_bucket, snapshot=snapshot)
    with dsl.If(model_family == 'gnn'):
        gnn = train_gnn(graph=graph_task.output)
        gnn.set_env_variable('LABELS_URI', 's3://example-fraud/labels/chargebacks_2024h1_graph.parquet')
        gnn.set_accelerator_type('nvidia.com/gpu').set_accelerator_limit(1)
    with dsl.Else():
        xgb = train_xgb(graph=graph_task.output, labels=labels_uri)
    sc = score(model=dsl.OneOf(gnn.outputs['model'], xgb.outputs['model']),
               report_uri=f's3://example-fraud-reports/weekly/{snapshot}/report.html')
    kubernetes.use_config_map_as_env(sc, config_map_name='fraud-thresholds',
                                     config_map_key_to_env={'alert_threshold': 'ALERT_THRESHOLD'})
    kubernetes.use_secret_as_env(sc, secret_name='fraud-s3',
                                 secret_key_to_env={'access_key': 'AWS_ACCESS_KEY_ID',
                                                    'secret_key': 'AWS_SECRET_ACCESS_KEY'})


if __name__ == '__main__':
    compiler.Compiler().compile(fraud_pipeline, os.path.splitext(__file__)[0] + '.yaml')
