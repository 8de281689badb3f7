# ruff: noqa
"""Telco churn retrain and per-region scoring (KFP v1 SDK -> Argo).

- `S3 Download` is a component loaded from YAML text and used twice (CRM
  snapshot and the labelled holdout): the second instance is s3-download-2.
- `Train Churn` is loaded from text too; build-features is a ContainerOp
  that takes the holiday calendar from a ConfigMap env var (ConfigMap not
  shipped with the pipeline).
- Scoring fans out with dsl.ParallelFor over the JSON-list pipeline
  parameter `regions`; each item reads that region's usage partition with
  pandas.
- aggregate-scores uses .after() on the loop's op (no data passed), and
  refresh-dashboard .after(aggregate-scores).

Compile (kfp 1.8.x): python kfp1_b72_churn_regions.py -> kfp1_b72_churn_regions.yaml
"""
import os

import kfp
from kfp import components, dsl
from kfp.components import InputPath, func_to_container_op
from kubernetes.client.models import V1ConfigMapKeySelector, V1EnvVar, V1EnvVarSource

s3_download = components.load_component_from_text('''
name: S3 Download
description: Copy an S3 prefix to a local folder.
inputs:
- {name: src, type: String}
outputs:
- {name: data, type: Directory}
implementation:
  container:
    image: amazon/aws-cli:2.15.30
    command: [aws, s3, cp, --recursive, --only-show-errors, {inputValue: src}, {outputPath: data}]
''')

train_churn = components.load_component_from_text('''
name: Train Churn
inputs:
- {name: features, type: Directory}
- {name: holdout, type: Directory}
- {name: max_depth, type: Integer, default: '8'}
outputs:
- {name: model, type: Model}
implementation:
  container:
    image: ghcr.io/telco-ml/churn:4.1.0
    command: [python, -m, churn.train]
    args: [--features, {inputPath: features}, --holdout, {inputPath: holdout},
           --max-depth, {inputValue: max_depth}, --model-out, {outputPath: model}]
''')


def score_region(region: str, month: str, model_path: InputPath('Model'), scores_root: str):
    import boto3
    import pandas as pd
    from churn.model import load, predict
    usage = pd.read_parquet(f's3://telco-lake/usage/region={region}/month={month}/')
    scored = predict(load(model_path), usage)
    scored.to_parquet('/tmp/scores.parquet')
    bucket, prefix = scores_root[len('s3://'):].split('/', 1)
    boto3.client('s3').upload_file('/tmp/scores.parquet', bucket, f'{prefix}/{month}/{region}.parquet')


def aggregate_scores(scores_root: str, month: str, summary_uri: str):
    import pandas as pd
    import s3fs
    fs = s3fs.S3FileSystem()
    parts = [pd.read_parquet(f's3://{p}') for p in fs.glob(f'{scores_root}/{month}/*.parquet')]
    df = pd.concat(parts)
    df.groupby('segment').churn_prob.mean().to_csv(summary_uri)


score_op = func_to_container_op(score_region, base_image='ghcr.io/telco-ml/churn:4.1.0')
aggregate_op = func_to_container_op(aggregate_scores, base_image='ghcr.io/telco-ml/churn:4.1.0')


@dsl.pipeline(name='telco-churn-regions')
def churn_regions(crm_snapshot: str = 's3://telco-lake/crm/snapshots/2025-02-28/',
                  holdout_uri: str = 's3://telco-ml-data/churn/holdout/2025q1/',
                  regions: str = '["emea", "apac", "amer"]',
                  month: str = '2025-02',
                  scores_root: str = 's3://telco-ml-scores/churn'):
    crm = s3_download(src=crm_snapshot)
    hold = s3_download(src=holdout_uri)

    feats = dsl.ContainerOp(
        name='build-features', image='ghcr.io/telco-ml/churn:4.1.0',
        command=['sh', '-c'],
        arguments=['aws s3 cp "$HOLIDAY_CALENDAR_URI" /tmp/holidays.csv && '
                   'python -m churn.features --crm "$0" --holidays /tmp/holidays.csv --out /out/features',
                   dsl.InputArgumentPath(crm.outputs['data'])],
        file_outputs={'features': '/out/features'},
    )
    feats.container.add_env_variable(V1EnvVar(
        name='HOLIDAY_CALENDAR_URI',
        value_from=V1EnvVarSource(config_map_key_ref=V1ConfigMapKeySelector(name='telco-calendars',
                                                                           key='holidays_uri'))))

    model = train_churn(features=feats.outputs['features'], holdout=hold.outputs['data'], max_depth=10)

    with dsl.ParallelFor(regions) as region:
        sc = score_op(region=region, month=month, model=model.outputs['model'], scores_root=scores_root)

    agg = aggregate_op(scores_root=scores_root, month=month,
                       summary_uri='s3://telco-ml-scores/churn/summary/latest.csv').after(sc)
    dsl.ContainerOp(
        name='refresh-dashboard', image='curlimages/curl:8.8.0',
        command=['curl', '-sf', '-X', 'POST', 'https://dash.telco.example.com/api/refresh/churn'],
    ).after(agg)


if __name__ == '__main__':
    kfp.compiler.Compiler().compile(churn_regions, os.path.splitext(__file__)[0] + '.yaml')
