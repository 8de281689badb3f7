# ruff: noqa
"""Argo WorkflowTemplate (Hera, held-out test): ESM-2 protein embeddings for UniRef50.

- A workflow parameter whose value comes from a ConfigMap (valueFrom.configMapKeyRef):
  the ESM release is only known on the cluster.
- steps template: fetch-fasta (aws s3 sync with --exclude/--include into a
  volumeClaimTemplate), then embed-shard in parallel over withItems dicts (reads the model
  prefix built from the ConfigMap parameter, writes a parquet per shard with --out),
  then pool (Hera script with polars.scan_parquet over a glob and sink to s3), whose output
  artifact (archive none) goes to S3; then a nested DAG template (index: build-faiss then
  smoke-test).

Generate: /tmp/hera/bin/python argo_heldout_protein_embed.py -> argo_heldout_protein_embed.yaml
"""
import os

from hera.workflows import DAG, Container, Parameter, S3Artifact, Script, Step, Steps, WorkflowTemplate
from hera.workflows import models as m

ESM = 'ghcr.io/acme-protein/esm-embed:2.0.1'

with WorkflowTemplate(
    name='uniref50-esm2-embeddings',
    entrypoint='pipeline',
    arguments=[
        Parameter(name='uniref-release', value='2024_02'),
        Parameter(name='esm-release', value_from=m.ValueFrom(
            config_map_key_ref=m.ConfigMapKeySelector(name='protein-ml-defaults', key='esm-release'))),
    ],
    volume_claim_templates=[m.PersistentVolumeClaim(
        metadata=m.ObjectMeta(name='work'),
        spec=m.PersistentVolumeClaimSpec(access_modes=['ReadWriteOnce'], storage_class_name='gp3',
                                         resources=m.VolumeResourceRequirements(requests={'storage': m.Quantity('500Gi')})))],
) as wt:
    fetch = Container(
        name='fetch-fasta', image='amazon/aws-cli:2.15.30',
        command=['aws', 's3', 'sync', '--only-show-errors', '--exclude', '*', '--include', 'shard-*.fasta.gz'],
        args=['s3://acme-protein/uniref50/{{workflow.parameters.uniref-release}}/fasta/', '/work/fasta/'],
        volume_mounts=[m.VolumeMount(name='work', mount_path='/work')],
    )
    embed = Container(
        name='embed-shard', image=ESM,
        command=['python', '-m', 'esm_embed.run'],
        inputs=[Parameter(name='shard'), Parameter(name='max-len')],
        args=['--fasta', '/work/fasta/shard-{{inputs.parameters.shard}}.fasta.gz',
              '--esm-weights', 's3://acme-protein-models/esm2/{{workflow.parameters.esm-release}}/',
              '--max-len', '{{inputs.parameters.max-len}}',
              '--out', 's3://acme-protein-embeddings/uniref50/{{workflow.parameters.uniref-release}}/shard-{{inputs.parameters.shard}}.parquet'],
        volume_mounts=[m.VolumeMount(name='work', mount_path='/work', read_only=True)],
        resources=m.ResourceRequirements(limits={'nvidia.com/gpu': m.Quantity('1')}),
    )
    pool = Script(
        name='pool', image='ghcr.io/acme-protein/polars:0.20.31', command=['python'],
        outputs=[S3Artifact(name='summary', path='/tmp/summary.json', bucket='acme-protein-embeddings',
                            key='uniref50/{{workflow.parameters.uniref-release}}/summary.json',
                            archive=m.ArchiveStrategy(none=m.NoneStrategy()))],
        source=(
            'import json\n'
            'import polars as pl\n'
            '\n'
            'release = "{{workflow.parameters.uniref-release}}"\n'
            'src = "s3://acme-protein-embeddings/uniref50/%s/shard-*.parquet" % release\n'
            'lf = pl.scan_parquet(src)\n'
            'pooled = lf.group_by("cluster_id").agg(pl.col("embedding").list.mean())\n'
            'pooled.sink_parquet("s3://acme-protein-embeddings/uniref50/%s/pooled.parquet" % release)\n'
            'json.dump({"rows": lf.select(pl.len()).collect().item()}, open("/tmp/summary.json", "w"))\n'
        ),
    )
    faiss = Container(
        name='build-faiss', image='ghcr.io/acme-protein/faiss:1.8.0',
        command=['python', 'build_index.py'],
        args=['--embeddings', 's3://acme-protein-embeddings/uniref50/{{workflow.parameters.uniref-release}}/pooled.parquet',
              '--index-out', 's3://acme-protein-index/uniref50/{{workflow.parameters.uniref-release}}/ivfpq.index'],
    )
    smoke = Container(
        name='smoke-test', image='ghcr.io/acme-protein/faiss:1.8.0',
        command=['python', 'smoke.py'],
        args=['--index', 's3://acme-protein-index/uniref50/{{workflow.parameters.uniref-release}}/ivfpq.index',
              '--queries', 's3://acme-protein/benchmarks/scop40/queries.fasta'],
    )
    with DAG(name='index'):
        b = faiss(name='build-faiss')
        s = smoke(name='smoke-test')
        b >> s
    with Steps(name='pipeline') as st:
        fetch(name='fetch-fasta')
        embed(name='embed-shard', with_items=[{'shard': '00', 'max-len': '1022'},
                                              {'shard': '01', 'max-len': '1022'},
                                              {'shard': '02', 'max-len': '2046'}],
              arguments={'shard': '{{item.shard}}', 'max-len': '{{item.max-len}}'})
        pool(name='pool')
        Step(name='index', template='index')

if __name__ == '__main__':
    with open(os.path.splitext(__file__)[0] + '.yaml', 'w') as f:
        f.write(wt.to_yaml())
