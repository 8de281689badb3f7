# ruff: noqa
"""Motor-claims fraud scoring (KFP v1 SDK -> Argo Workflow).

The claims-analytics team's nightly run: pull recent motor claims and the
policy book from the claims lake, join ZIP-level risk, retrain the XGBoost
fraud model, and when it is good enough score the open claims and hand the
worst ones to the special investigations unit (SIU). A Teams notification
always goes out.

Compile (kfp 1.8.24): python kfp1_b54_claims_fraud.py -> kfp1_b54_claims_fraud.yaml
"""
import os

import kfp
from kfp import dsl
from kfp.aws import use_aws_secret
from kfp.components import InputPath, OutputPath, create_component_from_func, load_component_from_text
from kubernetes.client.models import V1EnvVar, V1EnvVarSource, V1SecretKeySelector


def extract_claims(claims_uri: str, policies_uri: str, lookback_days: int,
                   claims_out: OutputPath('Parquet')):
    """Recent claims joined to the policy book (both read from S3 with s3fs)."""
    import pandas as pd
    claims = pd.read_parquet(claims_uri)
    policies = pd.read_parquet(policies_uri, columns=['policy_id', 'product', 'inception_date', 'sum_insured'])
    claims['loss_date'] = pd.to_datetime(claims['loss_date'])
    cutoff = claims['loss_date'].max() - pd.Timedelta(days=lookback_days)
    recent = claims[claims['loss_date'] >= cutoff].merge(policies, on='policy_id', how='left')
    recent.to_parquet(claims_out, index=False)


def score_open_claims(open_claims_uri: str, model_uri: str, threshold: float, scores_prefix: str) -> int:
    """Score open claims with the freshly trained model; return how many are flagged."""
    import boto3
    import pandas as pd
    import xgboost as xgb
    bucket, key = model_uri[len('s3://'):].split('/', 1)
    boto3.client('s3').download_file(bucket, key, '/tmp/model.json')
    booster = xgb.Booster()
    booster.load_model('/tmp/model.json')
    open_claims = pd.read_parquet(open_claims_uri)
    feats = open_claims.drop(columns=['claim_id', 'policy_id'])
    open_claims['fraud_score'] = booster.predict(xgb.DMatrix(feats))
    open_claims[['claim_id', 'fraud_score']].to_parquet(f'{scores_prefix}/scores.parquet', index=False)
    return int((open_claims['fraud_score'] > threshold).sum())


extract_op = create_component_from_func(
    extract_claims, base_image='python:3.10-slim',
    packages_to_install=['pandas==2.1.4', 'pyarrow==14.0.2', 's3fs==2023.12.2'])
score_op = create_component_from_func(
    score_open_claims, base_image='python:3.10-slim',
    packages_to_install=['pandas==2.1.4', 'pyarrow==14.0.2', 's3fs==2023.12.2', 'boto3==1.34.14', 'xgboost==2.0.3'])

enrich_op = load_component_from_text("""
name: Enrich with geo risk
description: Joins claims with ZIP-level catastrophe and theft risk scores.
inputs:
- {name: claims, type: Parquet}
- {name: geo_risk_uri, type: String, description: 'CSV of risk scores per ZIP code (S3)'}
outputs:
- {name: enriched, type: Parquet}
implementation:
  container:
    image: ghcr.io/acme-ins/claims-features:3.2.1
    command: [python, -m, claims_features.enrich]
    args: [--claims, {inputPath: claims}, --geo-risk, {inputValue: geo_risk_uri}, --out, {outputPath: enriched}]
""")

AWS = use_aws_secret('aws-secret', 'AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY')


@dsl.pipeline(name='motor-claims-fraud', description='Nightly motor-claims fraud model and SIU referral')
def claims_fraud_pipeline(claims_bucket: str = 'acme-insurance-claims',
                          as_of: str = '2024-06-30',
                          lookback_days: int = 90,
                          fraud_threshold: float = 0.35):
    notify = dsl.ContainerOp(
        name='notify-teams', image='curlimages/curl:8.5.0', command=['sh', '-c'],
        arguments=['curl -fsS -X POST "$TEAMS_WEBHOOK" -H "Content-Type: application/json" '
                   '-d "{\\"text\\": \\"motor-claims-fraud {{workflow.name}} finished: {{workflow.status}}\\"}"'])
    notify.add_env_variable(V1EnvVar(name='TEAMS_WEBHOOK', value_from=V1EnvVarSource(
        secret_key_ref=V1SecretKeySelector(name='teams-webhook', key='url'))))

    with dsl.ExitHandler(notify):
        extract = extract_op(
            claims_uri=f's3://{claims_bucket}/raw/motor-claims/as_of={as_of}/',
            policies_uri=f's3://{claims_bucket}/reference/policies/policies.parquet',
            lookback_days=lookback_days).apply(AWS)
        extract.set_memory_request('8G')

        enrich = enrich_op(claims=extract.outputs['claims_out'],
                           geo_risk_uri='s3://acme-insurance-ref/geo/zip_risk_2024.csv').apply(AWS)

        train = dsl.ContainerOp(
            name='train-fraud-model',
            image='ghcr.io/acme-ins/fraud-xgb:5.0.2',
            command=['python', '/app/train.py'],
            arguments=['--features', dsl.InputArgumentPath(enrich.outputs['enriched']),
                       '--model-dir', f's3://acme-insurance-models/fraud/{dsl.RUN_ID_PLACEHOLDER}/',
                       '--auc-file', '/tmp/outputs/auc.txt',
                       '--model-uri-file', '/tmp/outputs/model_uri.txt'],
            file_outputs={'auc': '/tmp/outputs/auc.txt', 'model_uri': '/tmp/outputs/model_uri.txt'})
        train.apply(AWS)
        train.set_retry(2)
        train.set_memory_limit('16G')

        metrics = dsl.ContainerOp(
            name='publish-metrics', image='amazon/aws-cli:2.15.30', command=['sh', '-c'],
            arguments=['printf \'{"auc": %s, "as_of": "%s"}\' "$0" "$1" > /tmp/metrics.json && '
                       'aws s3 cp /tmp/metrics.json "s3://acme-insurance-mlops/metrics/fraud/$1/metrics.json"',
                       train.outputs['auc'], as_of])
        metrics.apply(AWS)

        with dsl.Condition(train.outputs['auc'] > 0.82):
            score = score_op(
                open_claims_uri=f's3://{claims_bucket}/open/motor-claims/as_of={as_of}/open_claims.parquet',
                model_uri=train.outputs['model_uri'],
                threshold=fraud_threshold,
                scores_prefix=f's3://{claims_bucket}/scores/fraud/{dsl.RUN_ID_PLACEHOLDER}').apply(AWS)
            score.after(metrics)

            with dsl.Condition(score.output > 50):
                siu = dsl.ContainerOp(
                    name='open-siu-cases', image='curlimages/curl:8.5.0', command=['sh', '-c'],
                    arguments=['curl -fsS -X POST https://siu.acme-ins.internal/api/v2/batches '
                               '-H "Authorization: Bearer $SIU_TOKEN" '
                               '-d "{\\"flagged\\": $0, \\"run_id\\": \\"$1\\"}"',
                               score.output, dsl.RUN_ID_PLACEHOLDER])
                siu.add_env_variable(V1EnvVar(name='SIU_TOKEN', value_from=V1EnvVarSource(
                    secret_key_ref=V1SecretKeySelector(name='siu-api', key='token'))))
                siu.set_retry(3)


if __name__ == '__main__':
    kfp.compiler.Compiler().compile(claims_fraud_pipeline, os.path.splitext(__file__)[0] + '.yaml')
