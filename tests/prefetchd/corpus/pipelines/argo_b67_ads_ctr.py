# ruff: noqa
"""Daily ads click-through-rate model as an Argo WorkflowTemplate (Hera): DAG -> DAG -> container.

Workflow parameters: the date, a JSON list of campaign types (withParam), a
feature version, a feature root that references the feature version, and
the raw-log bucket taken from a ConfigMap (valueFrom.configMapKeyRef). Each
campaign runs a nested DAG that receives campaign and date as inputs and
passes them to a join container (S3 artifacts with keys built from the
inputs) and to a feature script whose source has the feature root
substituted in. A baseline picker exports the warm-start run with
globalName; training consumes it as an argument; evaluation uses a split
input with an enum and a default.

Generate: python argo_b67_ads_ctr.py  -> argo_b67_ads_ctr.yaml
"""
import os

from hera.workflows import DAG, Artifact, Container, Parameter, S3Artifact, Script, WorkflowTemplate
from hera.workflows import models as m

IMAGE = 'ghcr.io/example/ctr-train:5.1.0'

with WorkflowTemplate(
    name='ads-ctr-daily',
    entrypoint='main',
    arguments=[
        Parameter(name='date', value='2024-07-15'),
        Parameter(name='campaigns', value='["search", "display", "video"]'),
        Parameter(name='feature_version', value='fv12'),
        Parameter(name='feature_root', value='s3://example-ads-features/{{workflow.parameters.feature_version}}'),
        Parameter(name='raw_bucket', value_from=m.ValueFrom(
            config_map_key_ref=m.ConfigMapKeySelector(name='ads-platform', key='raw-log-bucket'))),
    ],
) as wt:
    pick = Script(
        name='pick-baseline',
        image='python:3.11-slim',
        command=['python'],
        inputs=[Parameter(name='policy', default='best', enum=['best', 'latest'])],
        outputs=[Parameter(name='baseline_run', value_from=m.ValueFrom(path='/tmp/baseline_run'),
                           global_name='baseline_run')],
        source=(
            'runs = {"best": "run-0712", "latest": "run-0714"}\n'
            'open("/tmp/baseline_run", "w").write(runs["{{inputs.parameters.policy}}"])\n'
        ),
    )

    join = Container(
        name='join-logs',
        image=IMAGE,
        command=['python', '-m', 'ctr.join'],
        args=['--impressions', '/in/impressions', '--clicks', '/in/clicks.parquet', '--out', '/tmp/joined'],
        inputs=[
            Parameter(name='campaign', enum=['search', 'display', 'video', 'shopping']),
            Parameter(name='date'),
            S3Artifact(name='impressions', path='/in/impressions', bucket='{{workflow.parameters.raw_bucket}}',
                       key='impressions/dt={{inputs.parameters.date}}/campaign={{inputs.parameters.campaign}}/',
                       endpoint='s3.amazonaws.com'),
            S3Artifact(name='clicks', path='/in/clicks.parquet', bucket='example-ads-clicks',
                       key='clicks/dt={{inputs.parameters.date}}/{{inputs.parameters.campaign}}.parquet',
                       endpoint='s3.amazonaws.com'),
        ],
        outputs=[Artifact(name='joined', path='/tmp/joined')],
    )

    features = Script(
        name='build-features',
        image='ghcr.io/example/ctr-features:5.1.0',
        command=['python'],
        inputs=[Parameter(name='campaign'), Parameter(name='date'), Parameter(name='feature_root'),
                Artifact(name='joined', path='/in/joined')],
        source=(
            'import ctr.features as F\n'
            'vocab = F.load_vocab("{{inputs.parameters.feature_root}}/vocab/{{inputs.parameters.campaign}}.json")\n'
            'df = F.transform("/in/joined", vocab)\n'
            'df.to_parquet("{{inputs.parameters.feature_root}}/dt={{inputs.parameters.date}}/'
            'campaign={{inputs.parameters.campaign}}/part-0.parquet")\n'
        ),
    )

    train = Container(
        name='train-ctr',
        image=IMAGE,
        command=['python', '-m', 'ctr.train'],
        args=['--features', '{{workflow.parameters.feature_root}}/dt={{workflow.parameters.date}}/',
              '--warm-start', 's3://example-ads-models/ctr/{{inputs.parameters.baseline_run}}/model.pt',
              '--out', '/tmp/model'],
        inputs=[Parameter(name='baseline_run')],
        outputs=[S3Artifact(name='model', path='/tmp/model', bucket='example-ads-models',
                            key='ctr/{{workflow.parameters.date}}/model/', endpoint='s3.amazonaws.com')],
    )

    evaluate = Container(
        name='evaluate-ctr',
        image=IMAGE,
        command=['python', '-m', 'ctr.evaluate'],
        args=['--model', '/in/model', '--eval', '/in/eval', '--split', '{{inputs.parameters.split}}'],
        inputs=[
            Parameter(name='split', default='holdout', enum=['holdout', 'backtest']),
            Artifact(name='model', path='/in/model'),
            S3Artifact(name='eval', path='/in/eval', bucket='example-ads-clicks',
                       key='eval/{{inputs.parameters.split}}/dt={{workflow.parameters.date}}/',
                       endpoint='s3.amazonaws.com'),
        ],
    )

    with DAG(name='campaign-features', inputs=[Parameter(name='campaign'), Parameter(name='date')]) as per_campaign:
        j = join(name='join', arguments={'campaign': '{{inputs.parameters.campaign}}',
                                         'date': '{{inputs.parameters.date}}'})
        fe = features(name='features', arguments=[
            Parameter(name='campaign', value='{{inputs.parameters.campaign}}'),
            Parameter(name='date', value='{{inputs.parameters.date}}'),
            Parameter(name='feature_root', value='{{workflow.parameters.feature_root}}'),
            j.get_artifact('joined').with_name('joined'),
        ])
        j >> fe

    with DAG(name='main'):
        pb = pick(name='pick-baseline')
        camp = per_campaign(name='campaigns',
                            arguments={'campaign': '{{item}}', 'date': '{{workflow.parameters.date}}'},
                            with_param='{{workflow.parameters.campaigns}}')
        tr = train(name='train', arguments={'baseline_run': '{{workflow.outputs.parameters.baseline_run}}'})
        ev = evaluate(name='evaluate', arguments=[tr.get_artifact('model').with_name('model')])
        [pb, camp] >> tr >> ev

if __name__ == '__main__':
    with open(os.path.splitext(__file__)[0] + '.yaml', 'w') as f:
        f.write(wt.to_yaml())
