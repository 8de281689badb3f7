# ruff: noqa
"""Per-segment churn models as an Argo Workflow DAG (Hera), adapted from the
argo-workflows examples "artifact-passing", "input-artifact-s3",
"loops-param-result", "parameter-aggregation", "dag-diamond-steps",
"coinflip", "output-artifact-s3", "volumes-existing" and "exit-handlers".

fetch-customers pulls the raw CSV from the team's MinIO bucket (input
artifact) and passes it on as an artifact; list-segments prints the segment
list that fans out train-segment (withParam); aggregate collects the AUCs;
score-active reads features from an existing PVC; publish-report uploads an
output artifact. The train template keeps the example's input default
(s3://my-bucket/...) for the plan catalog, but the DAG passes the workflow
parameter. The coin flip is still there from the example.

Generate: python argo_b58_churn_segments.py  -> argo_b58_churn_segments.yaml
"""
import os

from hera.workflows import DAG, Artifact, Container, Parameter, S3Artifact, Script, Workflow
from hera.workflows import models as m

IMAGE = 'ghcr.io/acme-telco/churn:1.4.2'
MINIO = 'minio.churn-ml.svc.cluster.local:9000'
CREDS = dict(access_key_secret=m.SecretKeySelector(name='minio-creds', key='accesskey'),
             secret_key_secret=m.SecretKeySelector(name='minio-creds', key='secretkey'))

with Workflow(
    generate_name='churn-segments-',
    entrypoint='main',
    on_exit='exit-handler',
    arguments=[Parameter(name='catalog-uri', value='s3://churn-ml/reference/plan_catalog.parquet'),
               Parameter(name='scores-uri', value='s3://churn-ml/scores/segments/'),
               Parameter(name='message', value='hello world')],
    volumes=[m.Volume(name='features', persistent_volume_claim=m.PersistentVolumeClaimVolumeSource(
        claim_name='churn-features', read_only=True))],
) as w:
    fetch = Container(
        name='fetch-customers', image='alpine:3.19', command=['sh', '-c'],
        args=['mkdir -p /tmp/out && cp /tmp/customers.csv /tmp/out/customers.csv && wc -l /tmp/out/customers.csv'],
        inputs=[S3Artifact(name='customers', path='/tmp/customers.csv', bucket='churn-ml',
                           key='raw/telco/customers.csv', endpoint=MINIO, insecure=True, **CREDS)],
        outputs=[Artifact(name='customers', path='/tmp/out/customers.csv')],
        retry_strategy=m.RetryStrategy(limit='3'),
    )
    list_segments = Script(
        name='list-segments', image='python:3.11-alpine', command=['python'],
        source='import json, sys\njson.dump(["prepaid", "postpaid", "business"], sys.stdout)\n',
    )
    train = Script(
        name='train-segment', image=IMAGE, command=['python'],
        inputs=[Parameter(name='segment'),
                Parameter(name='catalog-uri', default='s3://my-bucket/argo-examples/catalog.parquet'),
                Artifact(name='customers', path='/tmp/customers.csv')],
        outputs=[Parameter(name='auc', value_from=m.ValueFrom(path='/tmp/auc.txt'))],
        env=[m.EnvVar(name='AWS_ENDPOINT_URL', value='http://' + MINIO)],
        source=(
            'import pandas as pd\n'
            'from churn.model import fit_segment\n'
            'df = pd.read_csv("/tmp/customers.csv")\n'
            'catalog = pd.read_parquet("{{inputs.parameters.catalog-uri}}")\n'
            'auc = fit_segment(df[df.segment == "{{inputs.parameters.segment}}"], catalog,\n'
            '                  out="/tmp/model-{{inputs.parameters.segment}}")\n'
            'open("/tmp/auc.txt", "w").write(str(auc))\n'
        ),
    )
    aggregate = Script(
        name='aggregate', image='python:3.11-alpine', command=['python'],
        inputs=[Parameter(name='aucs')],
        source='import json\naucs = json.loads("""{{inputs.parameters.aucs}}""")\nprint(min(float(a) for a in aucs))\n',
    )
    score = Container(
        name='score-active', image=IMAGE, command=['python', '-m', 'churn.score'],
        args=['--features', '/features/active/', '--min-auc', '{{inputs.parameters.min-auc}}',
              '--output', '{{workflow.parameters.scores-uri}}'],
        inputs=[Parameter(name='min-auc')],
        env=[m.EnvVar(name='AWS_ENDPOINT_URL', value='http://' + MINIO)],
        volume_mounts=[m.VolumeMount(name='features', mount_path='/features', read_only=True)],
    )
    report = Container(
        name='publish-report', image=IMAGE, command=['python', '-m', 'churn.report'],
        args=['--auc', '{{inputs.parameters.min-auc}}', '--out', '/tmp/report.html'],
        inputs=[Parameter(name='min-auc')],
        outputs=[S3Artifact(name='report', path='/tmp/report.html', bucket='churn-ml',
                            key='reports/{{workflow.name}}/report.html', endpoint=MINIO, insecure=True,
                            archive=m.ArchiveStrategy(none=m.NoneStrategy()), **CREDS)],
    )
    flip = Script(name='flip-coin', image='python:alpine3.6', command=['python'],
                  source='import random\nresult = "heads" if random.randint(0,1) == 0 else "tails"\nprint(result)\n')
    whalesay = Container(name='whalesay', image='docker/whalesay:latest', command=['cowsay'],
                         args=['{{inputs.parameters.message}}'], inputs=[Parameter(name='message')])
    notify = Container(name='exit-handler', image='alpine:3.19', command=['sh', '-c'],
                       args=['echo "churn-segments {{workflow.name}} finished: {{workflow.status}}"'])

    with DAG(name='main'):
        a = fetch(name='fetch-customers')
        b = list_segments(name='list-segments')
        c = train(name='train-segment', depends='fetch-customers && list-segments',
                  arguments=[Parameter(name='segment', value='{{item}}'),
                             Parameter(name='catalog-uri', value='{{workflow.parameters.catalog-uri}}'),
                             a.get_artifact('customers').with_name('customers')])
        # hera 7.1 infers loop arguments from a callable source; this one is a string
        c.with_param = '{{tasks.list-segments.outputs.result}}'
        d = aggregate(name='aggregate', depends='train-segment',
                      arguments={'aucs': '{{tasks.train-segment.outputs.parameters.auc}}'})
        score(name='score-active', depends='aggregate', arguments={'min-auc': '{{tasks.aggregate.outputs.result}}'})
        report(name='publish-report', depends='aggregate', arguments={'min-auc': '{{tasks.aggregate.outputs.result}}'})
        f = flip(name='flip-coin')
        whalesay(name='heads', depends='flip-coin', when='{{tasks.flip-coin.outputs.result}} == heads',
                 arguments={'message': 'heads'})
        whalesay(name='tails', depends='flip-coin', when='{{tasks.flip-coin.outputs.result}} == tails',
                 arguments={'message': '{{workflow.parameters.message}}'})

if __name__ == '__main__':
    with open(os.path.splitext(__file__)[0] + '.yaml', 'w') as f:
        f.write(w.to_yaml())
