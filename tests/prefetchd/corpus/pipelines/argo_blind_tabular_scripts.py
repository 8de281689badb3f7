# ruff: noqa
"""Monthly card-fraud XGBoost retrain as an Argo Workflow (Hera, steps).

Python script templates that read S3 through pandas and boto3 with locations
coming from `{{inputs.parameters.*}}`; a `withSequence` whose start/end come
from workflow parameters and whose items are zero-padded by `format`; an
existing PVC declared at workflow level with `readOnly: true` on the volume
source; a Spark step with `s3a://` URIs; an S3 output artifact with
`archive: none` (a write); memoization; a mutex; a `when`-guarded promotion
that copies the model; a workflow-level exit hook (`hooks.exit`).

Generate: python argo_blind_tabular_scripts.py  -> argo_blind_tabular_scripts.yaml
"""
import os

from hera.workflows import (Artifact, Container, NoneArchiveStrategy, Parameter, S3Artifact, Script, Steps,
                            Workflow)
from hera.workflows import models as m

PY = 'ghcr.io/example/fraud-py:3.2.0'

with Workflow(
    generate_name='fraud-xgb-',
    entrypoint='main',
    arguments=[
        Parameter(name='transactions', value='s3://example-fraud/transactions/2024-09/'),
        Parameter(name='first-shard', value='1'),
        Parameter(name='last-shard', value='4'),
        Parameter(name='holdout', value='s3://example-fraud/holdout/2024-08.parquet'),
    ],
    volumes=[m.Volume(name='feature-cache', persistent_volume_claim=m.PersistentVolumeClaimVolumeSource(
        claim_name='fraud-feature-cache', read_only=True))],
    hooks={'exit': m.LifecycleHook(template='notify')},
) as w:
    validate = Script(
        name='validate', image=PY, command=['python'],
        inputs=[Parameter(name='transactions', value='{{workflow.parameters.transactions}}')],
        source=(
            'import pandas as pd\n'
            'df = pd.read_parquet("{{inputs.parameters.transactions}}")\n'
            'codes = pd.read_csv("s3://example-fraud/reference/merchant_codes.csv")\n'
            'bad = (~df["mcc"].isin(codes["mcc"])).mean()\n'
            'assert bad < 0.01, bad\n'
            'print(len(df))\n'
        ),
    )
    featurize = Script(
        name='featurize', image=PY, command=['python'],
        inputs=[Parameter(name='shard')],
        volume_mounts=[m.VolumeMount(name='feature-cache', mount_path='/cache')],
        memoize=m.Memoize(key='fraud-2024-09-{{inputs.parameters.shard}}', max_age='72h',
                          cache=m.Cache(config_map=m.LocalObjectReference(name='fraud-memo'))),
        source=(
            'import boto3\n'
            'import pandas as pd\n'
            '\n'
            's3 = boto3.client("s3")\n'
            's3.download_file("example-fraud", "transactions/2024-09/part-{{inputs.parameters.shard}}.parquet", "/tmp/in.parquet")\n'
            'df = pd.read_parquet("/tmp/in.parquet")\n'
            'emb = pd.read_parquet("/cache/merchant-embeddings/v5.parquet")\n'
            'out = df.merge(emb, on="merchant_id", how="left")\n'
            'out.to_parquet("/tmp/out.parquet")\n'
            's3.upload_file("/tmp/out.parquet", "example-fraud", "features/2024-09/part-{{inputs.parameters.shard}}.parquet")\n'
        ),
    )
    label_join = Container(
        name='label-join', image='ghcr.io/example/spark-fraud:3.5.1',
        command=['/opt/spark/bin/spark-submit', '--master', 'k8s://https://kubernetes.default.svc',
                 '--conf', 'spark.executor.instances=8', 'local:///opt/jobs/label_join.py'],
        args=['--labels', 's3a://example-fraud/labels/chargebacks-2024-09.csv',
              '--transactions', '{{workflow.parameters.transactions}}',
              '--output', 's3a://example-fraud/labels/joined/2024-09/'],
        synchronization=m.Synchronization(mutexes=[m.Mutex(name='fraud-labels')]),
    )
    train = Script(
        name='train-xgb', image=PY, command=['python'],
        inputs=[Parameter(name='features'), Parameter(name='labels')],
        outputs=[S3Artifact(name='model', path='/tmp/model.json', bucket='example-fraud-models',
                            key='xgb/2024-09/model.json', endpoint='s3.amazonaws.com',
                            archive=NoneArchiveStrategy())],
        resources=m.ResourceRequirements(requests={'cpu': m.Quantity('30'), 'memory': m.Quantity('120Gi')}),
        source=(
            'import pandas as pd\n'
            'import xgboost as xgb\n'
            '\n'
            'X = pd.read_parquet("{{inputs.parameters.features}}")\n'
            'y = pd.read_parquet("{{inputs.parameters.labels}}")\n'
            'd = xgb.DMatrix(X.drop(columns=["txn_id"]), label=X[["txn_id"]].merge(y, on="txn_id")["fraud"])\n'
            'booster = xgb.train({"max_depth": 8, "eta": 0.05, "tree_method": "hist"}, d, 800)\n'
            'booster.save_model("/tmp/model.json")\n'
        ),
    )
    evaluate = Script(
        name='evaluate', image=PY, command=['python'],
        inputs=[Parameter(name='holdout', value='{{workflow.parameters.holdout}}'),
                Artifact(name='model', path='/model/model.json')],
        source=(
            'import pandas as pd\n'
            'import xgboost as xgb\n'
            'from sklearn.metrics import roc_auc_score\n'
            '\n'
            'df = pd.read_parquet("{{inputs.parameters.holdout}}")\n'
            'b = xgb.Booster()\n'
            'b.load_model("/model/model.json")\n'
            'p = b.predict(xgb.DMatrix(df.drop(columns=["txn_id", "fraud"])))\n'
            'print(round(roc_auc_score(df["fraud"], p), 4))\n'
        ),
    )
    promote = Container(
        name='promote', image='amazon/aws-cli:2.15.30', command=['aws', 's3', 'cp'],
        args=['s3://example-fraud-models/xgb/2024-09/model.json',
              's3://example-fraud-models/xgb/production/model.json'],
    )
    notify = Container(
        name='notify', image='curlimages/curl:8.8.0', command=['sh', '-c'],
        args=['curl -sf -X POST -d "{\\"text\\": \\"fraud-xgb {{workflow.name}}: {{workflow.status}}\\"}" $SLACK_URL'],
        env=[m.EnvVar(name='SLACK_URL', value_from=m.EnvVarSource(
            secret_key_ref=m.SecretKeySelector(name='slack-webhook', key='url')))],
    )
    with Steps(name='main') as s:
        validate(name='validate')
        with s.parallel():
            featurize(name='featurize', arguments={'shard': '{{item}}'},
                      with_sequence=m.Sequence(start='{{workflow.parameters.first-shard}}',
                                               end='{{workflow.parameters.last-shard}}', format='%03d'))
            label_join(name='label-join')
        train(name='train-xgb', arguments={'features': 's3://example-fraud/features/2024-09/',
                                           'labels': 's3://example-fraud/labels/joined/2024-09/'})
        evaluate(name='evaluate', arguments=[Artifact(name='model', from_='{{steps.train-xgb.outputs.artifacts.model}}')])
        promote(name='promote', when='{{steps.evaluate.outputs.result}} > 0.92')

if __name__ == '__main__':
    with open(os.path.splitext(__file__)[0] + '.yaml', 'w') as fh:
        fh.write(w.to_yaml())
