# ruff: noqa
"""Store replenishment proposal for one region (Argo Workflow DAG, Hera).

The supply-chain data-science team's daily run. The store list for the region
is read from the shared feature-store claim (a workflow-level volume,
read-only); each store's POS files are synced onto a volumeClaimTemplate; the
inventory snapshot location comes from the platform ConfigMap (env
configMapKeyRef, not part of this file); supplier lead times are an S3 input
artifact. The forecast runs on the GPU pool (nodeSelector, tolerations,
affinity, podSpecPatch for priority); the order optimiser reads the service
level policy from S3 with boto3; proposed orders are published to S3 when the
optimiser says ok; buyers are notified on exit.

Generate: python argo_b59_store_replenishment.py  -> argo_b59_store_replenishment.yaml
"""
import os

from hera.workflows import (DAG, ConfigMapEnv, Container, EmptyDirVolume, Env, ExistingVolume, FieldEnv,
                            Parameter, S3Artifact, Script, SecretEnv, SecretEnvFrom, Workflow)
from hera.workflows import models as m

AWS_IMAGE = 'amazon/aws-cli:2.15.30'
DS_IMAGE = 'registry.acme-retail.internal/supply/replenish:3.4.0'

FEATURES = m.VolumeMount(name='feature-store', mount_path='/features', read_only=True)
STAGE = m.VolumeMount(name='stage', mount_path='/stage')
AWS_ENV = [SecretEnv(name='AWS_ACCESS_KEY_ID', secret_name='supply-aws', secret_key='access_key'),
           SecretEnv(name='AWS_SECRET_ACCESS_KEY', secret_name='supply-aws', secret_key='secret_key')]
ETL_POOL = {'acme.io/pool': 'etl'}

with Workflow(
    generate_name='store-replenishment-',
    entrypoint='replenish',
    service_account_name='supply-pipelines',
    pod_gc=m.PodGC(strategy='OnPodSuccess'),
    on_exit='notify-buyers',
    arguments=[Parameter(name='region', value='northeast'), Parameter(name='run_date', value='2024-07-08')],
    volumes=[m.Volume(name='feature-store', persistent_volume_claim=m.PersistentVolumeClaimVolumeSource(
        claim_name='retail-feature-store', read_only=True))],
    volume_claim_templates=[m.PersistentVolumeClaim(
        metadata=m.ObjectMeta(name='stage'),
        spec=m.PersistentVolumeClaimSpec(access_modes=['ReadWriteMany'], storage_class_name='efs-sc',
                                         resources=m.VolumeResourceRequirements(
                                             requests={'storage': m.Quantity('200Gi')})))],
) as w:
    list_stores = Script(
        name='list-stores', image='python:3.11-slim', command=['python'],
        source='import json\n'
               'with open("/features/stores/{{workflow.parameters.region}}.json") as f:\n'
               '    stores = json.load(f)\n'
               'print(json.dumps([s["store_id"] for s in stores if s["active"]]))\n',
        volume_mounts=[FEATURES],
    )
    pull_pos = Container(
        name='pull-pos', image=AWS_IMAGE, command=['aws', 's3', 'sync', '--only-show-errors'],
        args=['s3://acme-retail-pos/daily/region={{workflow.parameters.region}}/store={{inputs.parameters.store}}/',
              '/stage/pos/{{inputs.parameters.store}}/'],
        inputs=[Parameter(name='store')],
        env=AWS_ENV,
        volume_mounts=[STAGE],
        node_selector=ETL_POOL,
    )
    pull_inventory = Container(
        name='pull-inventory', image=AWS_IMAGE, command=['sh', '-c'],
        args=['aws s3 sync "$INVENTORY_SNAPSHOT_URI" /stage/inventory/ --exclude "*" --include "*.parquet"'],
        env=[ConfigMapEnv(name='INVENTORY_SNAPSHOT_URI', config_map_name='supply-data-sources',
                          config_map_key='inventory_snapshot_uri')],
        env_from=[SecretEnvFrom(name='supply-aws-env')],
        volume_mounts=[STAGE],
        node_selector=ETL_POOL,
    )
    pull_leadtimes = Container(
        name='pull-leadtimes', image='busybox:1.36', command=['sh', '-c'],
        args=['mkdir -p /stage/suppliers && cp /in/leadtimes.parquet /stage/suppliers/leadtimes.parquet'],
        inputs=[S3Artifact(name='leadtimes', path='/in/leadtimes.parquet', bucket='acme-retail-suppliers',
                           key='leadtimes/2024-07/leadtimes.parquet', endpoint='s3.us-east-1.amazonaws.com',
                           access_key_secret=m.SecretKeySelector(name='supply-aws', key='access_key'),
                           secret_key_secret=m.SecretKeySelector(name='supply-aws', key='secret_key'))],
        volume_mounts=[STAGE],
    )
    forecast = Container(
        name='forecast-demand', image=DS_IMAGE, command=['python', '-m', 'replenish.forecast'],
        args=['--pos', '/stage/pos', '--inventory', '/stage/inventory',
              '--store-features', '/features/stores/{{workflow.parameters.region}}/',
              '--horizon-days', '21', '--out', '/stage/forecast/'],
        env=[FieldEnv(name='NODE_NAME', field_path='spec.nodeName'),
             Env(name='OMP_NUM_THREADS', value='8')],
        volume_mounts=[STAGE, FEATURES],
        volumes=[EmptyDirVolume(name='dshm', mount_path='/dev/shm', medium='Memory', size_limit='16Gi')],
        resources=m.ResourceRequirements(limits={'nvidia.com/gpu': m.Quantity('1'), 'memory': m.Quantity('64Gi')}),
        node_selector={'acme.io/pool': 'gpu-l4'},
        tolerations=[m.Toleration(key='nvidia.com/gpu', operator='Exists', effect='NoSchedule')],
        affinity=m.Affinity(node_affinity=m.NodeAffinity(
            preferred_during_scheduling_ignored_during_execution=[m.PreferredSchedulingTerm(
                weight=50, preference=m.NodeSelectorTerm(match_expressions=[m.NodeSelectorRequirement(
                    key='topology.kubernetes.io/zone', operator='In', values=['us-east-1a'])]))])),
        security_context=m.SecurityContext(run_as_user=1001, run_as_non_root=True),
        pod_spec_patch='{"priorityClassName": "batch-high", "terminationGracePeriodSeconds": 120}',
        retry_strategy=m.RetryStrategy(limit=2, retry_policy='OnError'),
    )
    optimize = Script(
        name='optimize-orders', image=DS_IMAGE, command=['python'],
        source='import boto3, json, subprocess\n'
               's3 = boto3.client("s3")\n'
               's3.download_file("acme-retail-policies", "replenishment/service-levels/v5.csv", "/tmp/sl.csv")\n'
               'subprocess.run(["python", "-m", "replenish.optimize", "--forecast", "/stage/forecast/",\n'
               '                "--leadtimes", "/stage/suppliers/leadtimes.parquet", "--service-levels", "/tmp/sl.csv",\n'
               '                "--out", "/stage/orders/"], check=True)\n'
               'summary = json.load(open("/stage/orders/summary.json"))\n'
               'print("ok" if summary["infeasible_skus"] == 0 else "hold")\n',
        env=AWS_ENV,
        volume_mounts=[STAGE],
    )
    publish = Container(
        name='publish-orders', image=AWS_IMAGE, command=['aws', 's3', 'cp', '--recursive'],
        args=['/stage/orders/',
              's3://acme-retail-orders/proposed/{{workflow.parameters.run_date}}/{{workflow.parameters.region}}/'],
        env=[SecretEnv(name='AWS_ACCESS_KEY_ID', secret_name='supply-aws-writer', secret_key='access_key'),
             SecretEnv(name='AWS_SECRET_ACCESS_KEY', secret_name='supply-aws-writer', secret_key='secret_key')],
        volume_mounts=[STAGE],
    )
    notify = Container(
        name='notify-buyers', image='curlimages/curl:8.8.0', command=['sh', '-c'],
        args=['curl -fsS -X POST -H "Content-Type: application/json" '
              '-d "{\\"text\\": \\"replenishment {{workflow.parameters.region}} {{workflow.status}}\\"}" '
              '"$SLACK_WEBHOOK_URL"'],
        env=[SecretEnv(name='SLACK_WEBHOOK_URL', secret_name='buyers-slack', secret_key='webhook_url')],
    )

    with DAG(name='replenish'):
        ls = list_stores(name='list-stores')
        pp = pull_pos(name='pull-pos', arguments={'store': '{{item}}'}, with_param=ls.result)
        inv = pull_inventory(name='pull-inventory')
        lt = pull_leadtimes(name='pull-leadtimes')
        fc = forecast(name='forecast')
        op = optimize(name='optimize')
        pub = publish(name='publish', when='{{tasks.optimize.outputs.result}} == ok')
        ls >> pp
        [pp, inv] >> fc
        [fc, lt] >> op
        op >> pub

if __name__ == '__main__':
    with open(os.path.splitext(__file__)[0] + '.yaml', 'w') as f:
        f.write(w.to_yaml())
