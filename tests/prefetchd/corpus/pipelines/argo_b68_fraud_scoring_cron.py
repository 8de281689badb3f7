# ruff: noqa
"""Hourly card-fraud scoring as an Argo CronWorkflow (Hera), steps syntax.

- `artifactRepositoryRef` names a repository in ConfigMap fraud-artifact-repos;
  key-only artifacts resolve against it (bucket not in the YAML).
- `extract-window` has an init container that copies a reference table from
  S3 into a template-level emptyDir; the main container reads the hour of
  transactions named by {{workflow.scheduledTime}} (runtime-only).
- `score` mounts an existing PVC (workflow-level volume) with subPath and
  readOnly, has a sidecar that keeps a champion model folder in sync from S3,
  a `podSpecPatch`, a retryStrategy, a key-only input artifact and an output
  artifact with archive none to an explicit bucket.
- `alert` is a bash `script` under `when`; `notify` is the onExit handler.
- Workflow-level semaphore from a ConfigMap.

Generate: python argo_b68_fraud_scoring_cron.py  -> argo_b68_fraud_scoring_cron.yaml
"""
import os

from hera.workflows import (
    Artifact,
    Container,
    CronWorkflow,
    Env,
    NoneArchiveStrategy,
    Parameter,
    RetryStrategy,
    S3Artifact,
    Script,
    Steps,
)
from hera.workflows import models as m

IMAGE = 'ghcr.io/example/fraud-scorer:5.2.0'

with CronWorkflow(
    name='fraud-scoring-hourly',
    schedules=['15 * * * *'],
    timezone='Europe/Amsterdam',
    concurrency_policy='Forbid',
    starting_deadline_seconds=600,
    entrypoint='score-hour',
    on_exit='notify',
    service_account_name='fraud-runner',
    artifact_repository_ref=m.ArtifactRepositoryRef(config_map='fraud-artifact-repos', key='s3-fraud-v2'),
    synchronization=m.Synchronization(
        semaphores=[m.SemaphoreRef(config_map_key_ref=m.ConfigMapKeySelector(name='fraud-sync', key='hourly-scoring'))]
    ),
    arguments=[
        Parameter(name='threshold', value='0.92'),
        Parameter(name='score_mem', value='24Gi'),
        Parameter(name='model_version', value='v17'),
    ],
    volumes=[
        m.Volume(name='models', persistent_volume_claim=m.PersistentVolumeClaimVolumeSource(claim_name='fraud-models')),
        m.Volume(name='rules', config_map=m.ConfigMapVolumeSource(name='fraud-rules')),
    ],
) as cw:
    extract = Container(
        name='extract-window',
        image=IMAGE,
        command=['python', '-m', 'fraud.extract'],
        args=[
            '--transactions', 's3://fraud-raw/transactions/hour={{workflow.scheduledTime}}/',
            '--merchant-risk', '/work/merchant_risk.parquet',
            '--out', '/work/window.parquet',
        ],
        init_containers=[
            m.UserContainer(
                name='fetch-reference',
                image='amazon/aws-cli:2.15.30',
                command=['aws', 's3', 'cp'],
                args=['s3://fraud-features/reference/merchant_risk.parquet', '/work/merchant_risk.parquet'],
                volume_mounts=[m.VolumeMount(name='work', mount_path='/work')],
            )
        ],
        volumes=[m.Volume(name='work', empty_dir=m.EmptyDirVolumeSource())],
        volume_mounts=[m.VolumeMount(name='work', mount_path='/work')],
        outputs=[Artifact(name='window', path='/work/window.parquet')],
    )

    score = Container(
        name='score',
        image=IMAGE,
        command=['python', '-m', 'fraud.score'],
        args=[
            '--window', '/in/window.parquet',
            '--chargebacks', '/in/chargebacks.parquet',
            '--model', '/models/xgb',
            '--hot-model', '/hot/champion',
            '--rules', '/etc/fraud/rules.yaml',
            '--out', '/out/scores.parquet',
        ],
        inputs=[
            Artifact(name='window', path='/in/window.parquet'),
            S3Artifact(name='chargebacks', path='/in/chargebacks.parquet', key='reference/chargebacks/2024.parquet'),
        ],
        outputs=[
            S3Artifact(
                name='scores',
                path='/out/scores.parquet',
                bucket='fraud-scores',
                key='hourly/{{workflow.scheduledTime}}/scores.parquet',
                archive=NoneArchiveStrategy(),
            ),
            Parameter(name='max_score', value_from=m.ValueFrom(path='/out/max_score.txt')),
        ],
        volume_mounts=[
            m.VolumeMount(name='models', mount_path='/models/xgb', sub_path='xgb/{{workflow.parameters.model_version}}',
                          read_only=True),
            m.VolumeMount(name='rules', mount_path='/etc/fraud'),
            m.VolumeMount(name='hot', mount_path='/hot'),
        ],
        volumes=[m.Volume(name='hot', empty_dir=m.EmptyDirVolumeSource())],
        sidecars=[
            m.UserContainer(
                name='model-sync',
                image='amazon/aws-cli:2.15.30',
                command=['sh', '-c'],
                args=['while true; do aws s3 sync s3://fraud-model-registry/xgb/champion/ /hot/champion; sleep 60; done'],
                volume_mounts=[m.VolumeMount(name='hot', mount_path='/hot')],
            )
        ],
        pod_spec_patch='{"containers":[{"name":"main","resources":{"limits":{"memory":"{{workflow.parameters.score_mem}}"}}}]}',
        retry_strategy=RetryStrategy(limit='3', retry_policy='Always',
                                     backoff=m.Backoff(duration='30s', factor='2')),
    )

    alert = Script(
        name='alert',
        image=IMAGE,
        command=['bash'],
        inputs=[Artifact(name='scores', path='/in/scores.parquet')],
        env=[Env(name='CASE_API', value='https://case-mgmt.fraud.example.com/api/v1/cases')],
        source='''set -euo pipefail
aws s3 cp s3://fraud-features/reference/allowlist.csv /tmp/allowlist.csv
python3 -m fraud.flag --scores /in/scores.parquet --allowlist /tmp/allowlist.csv \\
  --threshold {{workflow.parameters.threshold}} --out /tmp/cases.jsonl
aws s3 cp /tmp/cases.jsonl s3://fraud-alerts/queue/{{workflow.name}}.jsonl
curl -sf -X POST "$CASE_API" -H 'Content-Type: application/json' --data-binary @/tmp/cases.jsonl
''',
    )

    notify = Container(
        name='notify',
        image='curlimages/curl:8.8.0',
        command=['sh', '-c'],
        args=['curl -sf -X POST "$SLACK_WEBHOOK" -d "{\\"text\\": \\"fraud-scoring {{workflow.name}} {{workflow.status}}: '
              'scores at s3://fraud-scores/hourly/{{workflow.scheduledTime}}/\\"}"'],
        env=[m.EnvVar(name='SLACK_WEBHOOK', value_from=m.EnvVarSource(
            secret_key_ref=m.SecretKeySelector(name='fraud-slack', key='webhook')))],
    )

    with Steps(name='score-hour'):
        s_extract = extract(name='extract')
        s_score = score(
            name='score',
            arguments=[s_extract.get_artifact('window').with_name('window')],
        )
        alert(
            name='alert',
            arguments=[s_score.get_artifact('scores').with_name('scores')],
            when='{{steps.score.outputs.parameters.max_score}} > {{workflow.parameters.threshold}}',
        )

if __name__ == '__main__':
    with open(os.path.splitext(__file__)[0] + '.yaml', 'w') as f:
        f.write(cw.to_yaml())
