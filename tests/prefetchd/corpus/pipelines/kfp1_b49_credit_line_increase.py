# ruff: noqa
"""Quarterly credit-line-increase (CLI) campaign for the cards portfolio (KFP v1 SDK -> Argo).

Account-management analytics pipeline, still on the v1 SDK. The bureau
snapshot to use is named by a _LATEST pointer object; tradelines are
extracted from that snapshot; card accounts come from the warehouse export;
a PD scorecard (model file named by an env var) scores every account; a
limit optimiser applies the policy JSON (passed as a file) and a macro
overlay; decisions are published only when the approval rate is inside risk
appetite; an audit record is written whatever happens.

Compile (kfp 1.8.x): python kfp1_b49_credit_line_increase.py  -> kfp1_b49_credit_line_increase.yaml
"""
import os

import kfp
from kfp import dsl
from kfp.aws import use_aws_secret
from kfp.components import InputPath, OutputPath, create_component_from_func
from kubernetes.client.models import V1EnvVar

IMAGE = 'ghcr.io/acme-bank/cards-analytics/cli:2.8.0'


def load_accounts(accounts_uri: str, accounts_path: OutputPath('Parquet')) -> int:
    import pandas as pd
    df = pd.read_parquet(accounts_uri)
    df = df[df['status'] == 'open']
    df.to_parquet(accounts_path)
    return len(df)


load_accounts_op = create_component_from_func(load_accounts, base_image=IMAGE,
                                              packages_to_install=['s3fs==2024.6.1'])


@dsl.pipeline(name='cards-cli-campaign', description='Credit line increase decisions for the cards book')
def cli_campaign(
    run_month: str = '2024-10',
    accounts_uri: str = 's3://cards-dw-exports/accounts/2024-10/open_accounts.parquet',
    policy_json: str = '{"max_increase_pct": 25, "min_months_on_book": 6, "max_dti": 0.43}',
):
    audit = dsl.ContainerOp(
        name='audit-trail', image='amazon/aws-cli:2.15.30', command=['sh', '-c'],
        arguments=['echo "{\\"run\\": \\"$0\\", \\"pipeline\\": \\"cards-cli-campaign\\"}" > /tmp/audit.json && '
                   'aws s3 cp /tmp/audit.json s3://credit-audit/kfp-runs/cli/$0.json',
                   dsl.RUN_ID_PLACEHOLDER],
    ).apply(use_aws_secret('credit-audit-writer', 'AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY'))

    with dsl.ExitHandler(audit):
        resolve = dsl.ContainerOp(
            name='resolve-snapshot', image='amazon/aws-cli:2.15.30', command=['sh', '-c'],
            arguments=['aws s3 cp s3://credit-bureau-raw/equifax/_LATEST - | tr -d "\\n" > /tmp/prefix.txt'],
            file_outputs={'prefix': '/tmp/prefix.txt'},
        ).apply(use_aws_secret('bureau-reader', 'AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY'))

        extract = dsl.ContainerOp(
            name='extract-tradelines', image=IMAGE, command=['python', '-m', 'cli.extract_tradelines'],
            arguments=['--snapshot', resolve.outputs['prefix'], '--out', '/out/tradelines.parquet',
                       '--rows', '/out/rows.txt'],
            file_outputs={'tradelines': '/out/tradelines.parquet', 'rows': '/out/rows.txt'},
        ).apply(use_aws_secret('bureau-reader', 'AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY'))

        accounts = load_accounts_op(accounts_uri=accounts_uri)
        accounts.apply(use_aws_secret('dw-reader', 'AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY'))

        score = dsl.ContainerOp(
            name='score-pd', image=IMAGE, command=['python', '-m', 'cli.score'],
            arguments=['--tradelines', '/in/tradelines.parquet', '--accounts', '/in/accounts.parquet',
                       '--out', '/out/scores.parquet'],
            artifact_argument_paths=[
                dsl.InputArgumentPath(extract.outputs['tradelines'], path='/in/tradelines.parquet'),
                dsl.InputArgumentPath(accounts.outputs['accounts'], path='/in/accounts.parquet'),
            ],
            file_outputs={'scores': '/out/scores.parquet'},
        )
        score.container.add_env_variable(V1EnvVar(name='SCORECARD_URI',
                                                   value='s3://credit-model-registry/pd-scorecard/v7/model.pkl'))
        score.apply(use_aws_secret('model-registry-reader', 'AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY'))

        optimize = dsl.ContainerOp(
            name='optimize-limits', image=IMAGE, command=['python', '-m', 'cli.optimize'],
            arguments=['--scores', '/in/scores.parquet', '--policy', '/config/policy.json',
                       '--macro-overlay', 's3://credit-risk-config/limits/macro-overlay-2024q4.json',
                       '--out', '/out/decisions.csv', '--approval-rate', '/out/approval_rate.txt'],
            artifact_argument_paths=[
                dsl.InputArgumentPath(score.outputs['scores'], path='/in/scores.parquet'),
                dsl.InputArgumentPath(policy_json, path='/config/policy.json'),
            ],
            file_outputs={'decisions': '/out/decisions.csv', 'approval_rate': '/out/approval_rate.txt'},
        ).apply(use_aws_secret('risk-config-reader', 'AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY'))

        with dsl.Condition(optimize.outputs['approval_rate'] < 0.4, name='within-appetite'):
            dsl.ContainerOp(
                name='publish-decisions', image='amazon/aws-cli:2.15.30', command=['aws', 's3', 'cp'],
                arguments=['/in/decisions.csv', f's3://credit-decisioning/cli/{run_month}/decisions.csv'],
                artifact_argument_paths=[dsl.InputArgumentPath(optimize.outputs['decisions'],
                                                               path='/in/decisions.csv')],
            ).apply(use_aws_secret('decisioning-writer', 'AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY'))


if __name__ == '__main__':
    kfp.compiler.Compiler().compile(cli_campaign, os.path.splitext(__file__)[0] + '.yaml')
