# ruff: noqa
"""Churn uplift modeling (KFP v1): a YAML CLI component for the feature join,
lightweight components reading with os.path.join over an input and boto3 by keyword,
a loop over a JSON-list parameter of learners, a condition, an exit handler."""
import kfp
from kfp import dsl
from kfp.components import create_component_from_func, load_component_from_text

join_features_op = load_component_from_text('''
name: Join features
inputs:
- {name: crm_snapshot, type: String}
- {name: usage_root, type: String}
- {name: features_out, type: String}
implementation:
  container:
    image: ghcr.io/acme-telco/uplift:2.0.1
    command: [python, -m, uplift.join]
    args:
    - --crm-snapshot
    - {inputValue: crm_snapshot}
    - --usage-root
    - {inputValue: usage_root}
    - --features-out
    - {inputValue: features_out}
''')


def train_uplift(features: str, campaign_root: str, learner: str, model_bucket: str) -> str:
    import os
    import boto3
    import pandas as pd
    X = pd.read_parquet(features)
    treat = pd.read_csv(os.path.join(campaign_root, 'treatment_assignment.csv'))
    key = f'uplift/{learner}/model.pkl'
    X.merge(treat, on='msisdn').to_pickle('/tmp/model.pkl')
    boto3.client('s3').upload_file(Filename='/tmp/model.pkl', Bucket=model_bucket, Key=key)
    return f's3://{model_bucket}/{key}'


def qini_report(campaign_root: str, holdout_key: str) -> float:
    import boto3
    s3 = boto3.client('s3')
    bucket, prefix = campaign_root[len('s3://'):].split('/', 1)
    s3.download_file(Bucket=bucket, Key=prefix.rstrip('/') + '/' + holdout_key, Filename='/tmp/holdout.csv')
    return 0.12


train_op = create_component_from_func(train_uplift, base_image='ghcr.io/acme-telco/uplift:2.0.1')
qini_op = create_component_from_func(qini_report, base_image='ghcr.io/acme-telco/uplift:2.0.1')


def target_op(score_table: str, uplift_threshold: str):
    return dsl.ContainerOp(
        name='build-target-list',
        image='ghcr.io/acme-telco/uplift:2.0.1',
        command=['python', '/app/target.py'],
        arguments=['--scores', score_table, '--threshold', uplift_threshold,
                   '--output', 's3://acme-telco-campaigns/retention-q2/targets.csv'])


def notify_op():
    return dsl.ContainerOp(name='notify-crm', image='curlimages/curl:8.10.1',
                           command=['sh', '-c', 'curl -fsS -X POST http://crm-hooks.telco.svc/uplift-done'])


@dsl.pipeline(name='churn-uplift')
def churn_uplift(crm_snapshot: str = 's3://acme-telco-crm/snapshots/2025-03-31/customers.parquet',
                 usage_root: str = 's3://acme-telco-usage/cdr/2025-03/',
                 features_out: str = 's3://acme-telco-features/uplift/2025-03/features.parquet',
                 campaign_root: str = 's3://acme-telco-campaigns/retention-q1/',
                 learners: str = '["s_learner", "t_learner", "x_learner"]',
                 model_bucket: str = 'acme-telco-models',
                 uplift_threshold: str = '0.03'):
    with dsl.ExitHandler(notify_op()):
        j = join_features_op(crm_snapshot=crm_snapshot, usage_root=usage_root, features_out=features_out)
        with dsl.ParallelFor(learners) as learner:
            t = train_op(features=features_out, campaign_root=campaign_root,
                         learner=learner, model_bucket=model_bucket).after(j)
        q = qini_op(campaign_root=campaign_root, holdout_key='holdout/responses.csv').after(t)
        with dsl.Condition(q.output > 0.05):
            target_op('s3://acme-telco-scores/uplift/2025-03/scores.parquet', uplift_threshold)


if __name__ == '__main__':
    import os
    kfp.compiler.Compiler().compile(churn_uplift, os.path.splitext(__file__)[0] + '.yaml')
