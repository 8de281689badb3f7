# ruff: noqa
"""Monthly churn feature snapshot + scoring as an Argo WorkflowTemplate with steps (Hera).

Three extract steps run in parallel onto an existing PVC (sub-path): a PyArrow
dataset over a bucket-relative Hive folder with an S3FileSystem whose endpoint
is a workflow parameter; `mc mirror` from an alias (the alias' host comes
from a secret-backed env); Polars scan_parquet over a Hive glob plus
pq.read_table of a dimension file. build-features reads the previous
snapshot (bucket-relative, pyarrow filesystem) and writes the new snapshot;
its stdout gates scoring, which reads the production model as an S3 input
artifact with an endpoint and writes scores.

Generate: python argo_b66_churn_tabular.py  -> argo_b66_churn_tabular.yaml
"""
import os

from hera.workflows import Container, Parameter, S3Artifact, Script, Steps, WorkflowTemplate
from hera.workflows import models as m

IMAGE = 'ghcr.io/example/churn-etl:4.2.0'
CACHE = m.VolumeMount(name='cache', mount_path='/cache', sub_path='churn/v4')

ACCOUNTS = '''
import os
import pyarrow.dataset as pads
from pyarrow.fs import S3FileSystem

fs = S3FileSystem(endpoint_override="{{workflow.parameters.s3_endpoint}}")
src = "{{workflow.parameters.lake_bucket}}/accounts/snapshot={{workflow.parameters.snapshot}}/"
ds = pads.dataset(src, filesystem=fs, format="parquet", partitioning="hive")
table = ds.to_table(columns=["account_id", "plan", "region", "tenure_days"], filter=pads.field("region") != "test")
os.makedirs("/cache/{{workflow.parameters.snapshot}}", exist_ok=True)
pads.write_dataset(table, "/cache/{{workflow.parameters.snapshot}}/accounts", format="parquet")
'''

TICKETS = '''
import polars as pl
import pyarrow.parquet as pq
from pyarrow.fs import S3FileSystem

opts = {"aws_endpoint_url": "{{workflow.parameters.s3_endpoint}}"}
tickets = pl.scan_parquet("s3://example-churn-support/tickets/year=2024/month=*/*.parquet",
                          storage_options=opts, hive_partitioning=True).collect()
agents = pq.read_table("s3://example-churn-support/dim/agents.parquet",
                       filesystem=S3FileSystem(endpoint_override="{{workflow.parameters.s3_endpoint}}"))
tickets.join(pl.from_arrow(agents), on="agent_id").write_parquet("/cache/{{workflow.parameters.snapshot}}/tickets.parquet")
'''

BUILD = '''
import sys
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from pyarrow.fs import S3FileSystem
from churn.features import build, psi

fs = S3FileSystem(endpoint_override="{{workflow.parameters.s3_endpoint}}")
prev = pq.read_table("example-churn-features/v4/snapshot={{workflow.parameters.prev_snapshot}}/", filesystem=fs).to_pandas()
feats = build("/cache/{{workflow.parameters.snapshot}}")
feats.to_parquet("/cache/{{workflow.parameters.snapshot}}/features.parquet")
pq.write_to_dataset(pa.Table.from_pandas(feats), "example-churn-features/v4/snapshot={{workflow.parameters.snapshot}}/",
                    filesystem=fs)
print("feature definitions: https://wiki.example.com/churn/features-v4", file=sys.stderr)
print("ok" if psi(prev, feats) < 0.2 else "drift")
'''

with WorkflowTemplate(
    name='churn-monthly-snapshot',
    entrypoint='snapshot',
    arguments=[Parameter(name='lake_bucket', value='example-churn-lake'),
               Parameter(name='snapshot', value='2024-05-31'),
               Parameter(name='prev_snapshot', value='2024-04-30'),
               Parameter(name='s3_endpoint', value='https://minio.data.example.internal')],
    volumes=[m.Volume(name='cache', persistent_volume_claim=m.PersistentVolumeClaimVolumeSource(
        claim_name='churn-feature-cache'))],
) as wt:
    accounts = Script(name='extract-accounts', image=IMAGE, command=['python'], source=ACCOUNTS,
                      volume_mounts=[CACHE])
    events = Container(
        name='extract-events', image='minio/mc:RELEASE.2024-06-01T15-03-35Z', command=['sh', '-c'],
        args=['mc mirror --overwrite --quiet '
              'lake/{{workflow.parameters.lake_bucket}}/events/dt={{workflow.parameters.snapshot}} '
              '/cache/{{workflow.parameters.snapshot}}/events'],
        env=[m.EnvVar(name='MC_HOST_lake', value_from=m.EnvVarSource(
            secret_key_ref=m.SecretKeySelector(name='churn-minio', key='mc-host-url')))],
        volume_mounts=[CACHE],
    )
    tickets = Script(name='extract-tickets', image=IMAGE, command=['python'], source=TICKETS, volume_mounts=[CACHE])
    build = Script(name='build-features', image=IMAGE, command=['python'], source=BUILD, volume_mounts=[CACHE])
    score = Container(
        name='score-accounts', image='ghcr.io/example/churn-score:2.0.1', command=['python', '-m', 'churn.score'],
        args=['--features', '/cache/{{workflow.parameters.snapshot}}/features.parquet',
              '--model', '/models/model.json',
              '--out', 's3://example-churn-scores/daily/{{workflow.parameters.snapshot}}/scores.parquet'],
        inputs=[S3Artifact(name='model', path='/models/model.json', bucket='example-churn-models',
                           key='xgb/prod/model.json', endpoint='minio.data.example.internal', insecure=False)],
        volume_mounts=[m.VolumeMount(name='cache', mount_path='/cache', sub_path='churn/v4', read_only=True)],
    )
    with Steps(name='snapshot') as s:
        with s.parallel():
            accounts(name='accounts')
            events(name='events')
            tickets(name='tickets')
        build(name='build-features')
        score(name='score', when='{{steps.build-features.outputs.result}} == ok')

if __name__ == '__main__':
    with open(os.path.splitext(__file__)[0] + '.yaml', 'w') as fh:
        fh.write(wt.to_yaml())
