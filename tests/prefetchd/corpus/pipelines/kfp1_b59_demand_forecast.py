# ruff: noqa
"""Weekly regional demand forecast (KFP v1 SDK -> Argo Workflow).

The merchandising-analytics team's weekly run. A per-run RWX workspace
(VolumeOp) collects POS sales (pipeline parameter), the promotions calendar
(location from the data-platform ConfigMap, exported as an env var) and a
weather history pulled from the internal weather API. The feature join also
reads the holiday calendars on a shared reference PVC (read-only, sub-path)
and spills to an emptyDir. One GPU model per region (static ParallelFor),
a reconciliation gate, and an S3 publish; the staging prefix is wiped in the
exit handler.

Compile (kfp 1.8.x): python kfp1_b59_demand_forecast.py  -> kfp1_b59_demand_forecast.yaml
"""
import os

import kfp
from kfp import dsl
from kfp.aws import use_aws_secret
from kubernetes.client import (V1ConfigMapKeySelector, V1EmptyDirVolumeSource, V1EnvVar, V1EnvVarSource,
                               V1ObjectFieldSelector, V1PersistentVolumeClaimVolumeSource,
                               V1LocalObjectReference, V1SecretKeySelector, V1Toleration, V1Volume,
                               V1VolumeMount)

FORECAST_IMAGE = 'registry.acme-retail.internal/merch/demand-forecast:2024.27.0'
AWS_IMAGE = 'amazon/aws-cli:2.15.30'


@dsl.pipeline(name='weekly-demand-forecast',
              description='Regional demand forecast from POS, promotions and weather.')
def demand_pipeline(sales_uri: str = 's3://acme-retail-dw/exports/pos_sales/year=2024/week=27/',
                    publish_uri: str = 's3://acme-retail-forecasts/weekly/2024-W27/',
                    horizon_weeks: int = 8):
    cleanup = dsl.ContainerOp(
        name='cleanup-staging', image=AWS_IMAGE,
        command=['aws', 's3', 'rm', '--recursive'],
        arguments=['s3://acme-retail-staging/demand-forecast/tmp/'],
    ).apply(use_aws_secret('retail-aws', 'AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY', 'us-east-1'))

    with dsl.ExitHandler(cleanup):
        ws = dsl.VolumeOp(name='create-workspace', resource_name='demand-ws', size='100Gi',
                          modes=dsl.VOLUME_MODE_RWM, storage_class='efs-sc')

        sales = dsl.ContainerOp(
            name='extract-sales', image=AWS_IMAGE,
            command=['aws', 's3', 'sync', '--no-progress'],
            arguments=[sales_uri, '/ws/raw/sales/'],
            pvolumes={'/ws': ws.volume},
        ).apply(use_aws_secret('retail-aws', 'AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY', 'us-east-1'))
        sales.add_node_selector_constraint('acme.io/pool', 'etl')

        promos = dsl.ContainerOp(
            name='extract-promotions', image=AWS_IMAGE,
            command=['sh', '-c'],
            arguments=['aws s3 sync "$PROMO_CALENDAR_URI" /ws/raw/promotions/ --exclude "_SUCCESS"'],
            pvolumes={'/ws': ws.volume},
        ).apply(use_aws_secret('retail-aws', 'AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY', 'us-east-1'))
        promos.container.add_env_variable(V1EnvVar(
            name='PROMO_CALENDAR_URI',
            value_from=V1EnvVarSource(config_map_key_ref=V1ConfigMapKeySelector(
                name='retail-data-sources', key='promo_calendar_uri'))))
        promos.add_node_selector_constraint('acme.io/pool', 'etl')

        weather = dsl.ContainerOp(
            name='fetch-weather', image='curlimages/curl:8.8.0',
            command=['sh', '-c'],
            arguments=['mkdir -p /ws/raw/weather && curl -fsS -H "X-Api-Key: $WEATHER_API_KEY" '
                       '"https://weather-api.acme-retail.internal/v2/history?weeks=104&grain=store" '
                       '-o /ws/raw/weather/history.json'],
            pvolumes={'/ws': ws.volume},
        )
        weather.container.add_env_variable(V1EnvVar(
            name='WEATHER_API_KEY',
            value_from=V1EnvVarSource(secret_key_ref=V1SecretKeySelector(name='weather-api', key='api_key'))))

        join = dsl.ContainerOp(
            name='feature-join', image=FORECAST_IMAGE,
            command=['python', '-m', 'demand.features'],
            arguments=['--sales', '/ws/raw/sales', '--promotions', '/ws/raw/promotions',
                       '--weather', '/ws/raw/weather/history.json',
                       '--holidays', '/reference/calendars/holidays_us.csv',
                       '--spill', '/spill', '--out', '/ws/features'],
            pvolumes={'/ws': ws.volume},
        ).after(sales, promos, weather)
        join.add_volume(V1Volume(name='reference-data', persistent_volume_claim=V1PersistentVolumeClaimVolumeSource(
            claim_name='retail-reference-data', read_only=True)))
        join.container.add_volume_mount(V1VolumeMount(name='reference-data', mount_path='/reference/calendars',
                                                      sub_path='calendars', read_only=True))
        join.add_volume(V1Volume(name='spill', empty_dir=V1EmptyDirVolumeSource(size_limit='50Gi')))
        join.container.add_volume_mount(V1VolumeMount(name='spill', mount_path='/spill'))
        join.container.add_env_variable(V1EnvVar(
            name='NODE_NAME', value_from=V1EnvVarSource(field_ref=V1ObjectFieldSelector(field_path='spec.nodeName'))))
        join.container.set_cpu_limit('8').set_memory_limit('48Gi')

        with dsl.ParallelFor(['northeast', 'southeast', 'midwest', 'west']) as region:
            train = dsl.ContainerOp(
                name='train-region', image=FORECAST_IMAGE,
                command=['python', '-m', 'demand.train'],
                arguments=['--features', '/ws/features', '--region', region,
                           '--horizon', horizon_weeks, '--model-dir', '/ws/models'],
                pvolumes={'/ws': join.pvolume},
            )
            train.container.set_gpu_limit(1)
            train.container.set_memory_limit('32Gi')
            train.add_toleration(V1Toleration(key='nvidia.com/gpu', operator='Exists', effect='NoSchedule'))
            train.add_node_selector_constraint('cloud.google.com/gke-accelerator', 'nvidia-l4')
            train.set_retry(2, policy='OnError', backoff_duration='2m')
            train.add_pod_label('team', 'merch-analytics')

        rec = dsl.ContainerOp(
            name='reconcile', image=FORECAST_IMAGE,
            command=['python', '-m', 'demand.reconcile'],
            arguments=['--models', '/ws/models', '--forecasts', '/ws/forecasts', '--gate-file', '/tmp/gate'],
            pvolumes={'/ws': ws.volume},
            file_outputs={'gate': '/tmp/gate'},
        ).after(train)
        rec.set_timeout(3600)

        with dsl.Condition(rec.outputs['gate'] == 'pass'):
            pub = dsl.ContainerOp(
                name='publish-forecast', image=AWS_IMAGE,
                command=['aws', 's3', 'sync', '--delete'],
                arguments=['/ws/forecasts/', publish_uri],
                pvolumes={'/ws': ws.volume},
            ).apply(use_aws_secret('retail-aws-writer', 'AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY', 'us-east-1'))
            pub.add_pod_annotation('acme.io/owner', 'merch-analytics')

    conf = dsl.get_pipeline_conf()
    conf.set_image_pull_secrets([V1LocalObjectReference(name='acme-retail-registry')])
    conf.set_ttl_seconds_after_finished(86400)


if __name__ == '__main__':
    kfp.compiler.Compiler().compile(demand_pipeline, os.path.splitext(__file__)[0] + '.yaml')
