# ruff: noqa
"""In-silico VHH binder screen against IL-23R (Argo Workflow, Hera) with its artifact repository ConfigMap.

Protein-design platform team. The file carries the namespace's artifact
repository ConfigMap (two repositories: `scratch`, marked default by the
annotation, and `structures`) followed by the Workflow, which selects
`structures` through spec.artifactRepositoryRef. Key-only artifacts
therefore live in bucket fold-structures. The candidate library and the
epitope map are key-only inputs; the UniRef30 database is a full S3 artifact
on the in-cluster MinIO; the pipeline code comes from git and the mmseqs
binary and OpenFold weights over HTTP. The MSA cache is optional on input
and rewritten on output. Structures are written key-only per seed, ranked,
analysed and the hits published to a fixed results bucket.

Generate: python argo_b49_vhh_screen.py  -> argo_b49_vhh_screen.yaml
"""
import os

import yaml
from hera.workflows import (DAG, Container, GitArtifact, HTTPArtifact, NoneArchiveStrategy, Parameter,
                            S3Artifact, Workflow)
from hera.workflows import models as m

IMAGE = 'ghcr.io/acme-bio/vhh-screen:2.3.1'
MINIO = 'minio.protein-data.svc:9000'


def _repo(bucket, key_format=None):
    s3 = {'endpoint': MINIO, 'bucket': bucket, 'insecure': True,
          'accessKeySecret': {'name': 'minio-fold', 'key': 'accesskey'},
          'secretKeySecret': {'name': 'minio-fold', 'key': 'secretkey'}}
    if key_format:
        s3['keyFormat'] = key_format
    return yaml.safe_dump({'s3': s3}, sort_keys=False)


CONFIG_MAP = {
    'apiVersion': 'v1',
    'kind': 'ConfigMap',
    'metadata': {
        'name': 'protein-artifact-repos',
        'annotations': {'workflows.argoproj.io/default-artifact-repository': 'scratch'},
    },
    'data': {
        'scratch': _repo('fold-scratch'),
        'structures': _repo('fold-structures', 'screens/{{workflow.name}}/{{pod.name}}'),
    },
}

with Workflow(
    generate_name='vhh-screen-',
    entrypoint='screen',
    arguments=[Parameter(name='library', value='vhh-lib-07'),
               Parameter(name='target', value='il23r'),
               Parameter(name='min-iptm', value='0.8')],
    artifact_repository_ref=m.ArtifactRepositoryRef(config_map='protein-artifact-repos', key='structures'),
    artifact_gc=m.WorkflowLevelArtifactGC(strategy='OnWorkflowDeletion', service_account_name='fold-artifact-gc'),
    service_account_name='fold-runner',
    on_exit='notify',
) as w:
    prepare = Container(
        name='prepare-queries', image=IMAGE, command=['python', '/src/screen/prepare.py'],
        args=['--library', '/in/candidates.fasta', '--target', '{{workflow.parameters.target}}',
              '--out', '/out/queries'],
        inputs=[
            GitArtifact(name='pipeline-src', path='/src', repo='https://github.com/acme-bio/binder-screen.git',
                        revision='v2.3.1', depth=1),
            S3Artifact(name='candidates', path='/in/candidates.fasta',
                       key='libraries/{{workflow.parameters.library}}/candidates.fasta'),
        ],
        outputs=[S3Artifact(name='queries', path='/out/queries',
                            key='screens/{{workflow.name}}/queries.tgz')],
    )
    search = Container(
        name='colabfold-search', image=IMAGE, command=['sh', '-c'],
        args=['export PATH=/opt/mmseqs/bin:$PATH && colabfold_search --use-env 0 --db-load-mode 2 '
              '--msa-cache /cache /in/queries /db/uniref30 /out/msas && cp -r /out/msas/. /cache/'],
        inputs=[
            m.Artifact(name='queries', path='/in/queries'),
            S3Artifact(name='uniref30', path='/db/uniref30', endpoint=MINIO, bucket='seqdb', insecure=True,
                       key='colabfold/uniref30_2302_db/',
                       access_key_secret=m.SecretKeySelector(name='minio-seqdb', key='accesskey'),
                       secret_key_secret=m.SecretKeySelector(name='minio-seqdb', key='secretkey')),
            HTTPArtifact(name='mmseqs', path='/opt/mmseqs', mode=0o755,
                         url='https://mmseqs.com/archive/15-6f452/mmseqs-linux-avx2.tar.gz'),
            S3Artifact(name='msa-cache', path='/cache', optional=True,
                       key='msa-cache/{{workflow.parameters.library}}/'),
        ],
        outputs=[
            S3Artifact(name='msas', path='/out/msas', key='screens/{{workflow.name}}/msas/',
                       archive=NoneArchiveStrategy(), artifact_gc=m.ArtifactGC(strategy='OnWorkflowDeletion')),
            S3Artifact(name='msa-cache', path='/cache', key='msa-cache/{{workflow.parameters.library}}/',
                       archive=NoneArchiveStrategy(), artifact_gc=m.ArtifactGC(strategy='Never')),
        ],
    )
    fold = Container(
        name='openfold-predict', image='ghcr.io/acme-bio/openfold:2.1.0-cu121', command=['python', '-m', 'openfold_run'],
        args=['--msas', '/in/msas', '--weights', '/weights/finetuning_ptm_2.pt',
              '--seed', '{{inputs.parameters.seed}}', '--out', '/out/structures'],
        inputs=[
            Parameter(name='seed'),
            S3Artifact(name='msas', path='/in/msas', key='screens/{{workflow.name}}/msas/'),
            HTTPArtifact(name='weights', path='/weights/finetuning_ptm_2.pt',
                         url='https://openfold.s3.amazonaws.com/openfold_params/finetuning_ptm_2.pt'),
        ],
        outputs=[S3Artifact(name='structures', path='/out/structures',
                            key='screens/{{workflow.name}}/structures/seed-{{inputs.parameters.seed}}/',
                            archive=NoneArchiveStrategy())],
        resources=m.ResourceRequirements(limits={'nvidia.com/gpu': '1'}),
    )
    rank = Container(
        name='rank-designs', image=IMAGE, command=['python', '/src/screen/rank.py'],
        args=['--structures', '/in/structures', '--min-iptm', '{{workflow.parameters.min-iptm}}',
              '--out', '/out/ranking.csv', '--hits', '/out/hits.txt'],
        inputs=[
            GitArtifact(name='pipeline-src', path='/src', repo='https://github.com/acme-bio/binder-screen.git',
                        revision='v2.3.1', depth=1),
            S3Artifact(name='structures', path='/in/structures', key='screens/{{workflow.name}}/structures/'),
        ],
        outputs=[Parameter(name='hits', value_from=m.ValueFrom(path='/out/hits.txt')),
                 S3Artifact(name='ranking', path='/out/ranking.csv', key='screens/{{workflow.name}}/ranking.csv',
                            archive=NoneArchiveStrategy())],
    )
    interface = Container(
        name='interface-analysis', image=IMAGE, command=['python', '-m', 'screen.interface'],
        args=['--ranking', '/in/ranking.csv', '--sabdab', '/ref/sabdab_summary_all.tsv',
              '--epitopes', '/ref/epitope-map.json', '--out', '/out/interfaces.json'],
        inputs=[
            m.Artifact(name='ranking', path='/in/ranking.csv'),
            S3Artifact(name='sabdab', path='/ref/sabdab_summary_all.tsv', endpoint='s3.amazonaws.com',
                       bucket='acme-bio-reference', region='us-east-1',
                       key='sabdab/2024-09/sabdab_summary_all.tsv',
                       access_key_secret=m.SecretKeySelector(name='aws-bio-ref', key='access_key'),
                       secret_key_secret=m.SecretKeySelector(name='aws-bio-ref', key='secret_key')),
            S3Artifact(name='epitope-map', path='/ref/epitope-map.json',
                       key='targets/{{workflow.parameters.target}}/epitope-map.json'),
        ],
        outputs=[m.Artifact(name='interfaces', path='/out/interfaces.json')],
    )
    publish = Container(
        name='publish-hits', image='amazon/aws-cli:2.15.30', command=['sh', '-c'],
        args=['cp /in/ranking.csv /out/hits.csv && cp /in/interfaces.json /out/interfaces.json'],
        inputs=[m.Artifact(name='ranking', path='/in/ranking.csv'),
                m.Artifact(name='interfaces', path='/in/interfaces.json')],
        outputs=[S3Artifact(name='hits', path='/out', endpoint='s3.amazonaws.com', bucket='acme-design-results',
                            region='us-east-1',
                            key='screens/{{workflow.parameters.library}}/{{workflow.name}}/',
                            archive=NoneArchiveStrategy(), artifact_gc=m.ArtifactGC(strategy='Never'),
                            access_key_secret=m.SecretKeySelector(name='aws-design-results', key='access_key'),
                            secret_key_secret=m.SecretKeySelector(name='aws-design-results', key='secret_key'))],
    )
    notify = Container(
        name='notify', image='curlimages/curl:8.7.1', command=['sh', '-c'],
        args=['curl -s -X POST -d "vhh-screen {{workflow.name}} {{workflow.status}}" '
              'https://chat.acme-bio.internal/hooks/design'],
    )
    with DAG(name='screen'):
        p = prepare(name='prepare-queries')
        s = search(name='colabfold-search',
                   arguments=[p.get_artifact('queries').with_name('queries')])
        f = fold(name='fold', arguments={'seed': '{{item}}'}, with_items=['0', '1', '2'])
        r = rank(name='rank-designs')
        i = interface(name='interface-analysis', arguments=[r.get_artifact('ranking').with_name('ranking')])
        pub = publish(name='publish-hits', when='{{tasks.rank-designs.outputs.parameters.hits}} > 0',
                      arguments=[r.get_artifact('ranking').with_name('ranking'),
                                 i.get_artifact('interfaces').with_name('interfaces')])
        p >> s >> f >> r >> i >> pub

if __name__ == '__main__':
    with open(os.path.splitext(__file__)[0] + '.yaml', 'w') as out:
        out.write(yaml.safe_dump(CONFIG_MAP, sort_keys=False))
        out.write('---\n')
        out.write(w.to_yaml())
