# ruff: noqa
"""KFP v2 (blind test): daily churn feature pipeline. Lightweight components that
build s3 URIs inside their code from several inputs (pandas.read_parquet with
storage_options, pyarrow.dataset with hive partitioning, boto3 download_file with
keyword arguments), a ParallelFor over a list pipeline parameter with parallelism,
dsl.Collected fan-in, pandas to_parquet + boto3 put_object writes, an env var set
with set_env_variable read through os.environ, a config map as env, an exit handler.

Compile: /tmp/kfp2/bin/python kfp2_blind_feature_store.py
"""
import os
from typing import List

from kfp import compiler, dsl, kubernetes

PY = 'python:3.11-slim'
PKGS = ['pandas==2.2.2', 'pyarrow==16.1.0', 's3fs==2024.3.1', 'boto3==1.34.131']


@dsl.component(base_image=PY, packages_to_install=PKGS)
def extract_customers(bucket: str, ds: str, customers: dsl.Output[dsl.Dataset]):
    import pandas as pd
    events = pd.read_parquet(f's3://{bucket}/events/dt={ds}/', storage_options={'anon': False})
    dim = pd.read_parquet('s3://acme-feature-store/dim/customers.parquet')
    df = events.merge(dim, on='customer_id', how='left')
    df.to_parquet(customers.path)


@dsl.component(base_image=PY, packages_to_install=PKGS)
def aggregate_region(bucket: str, region: str, ds: str, customers: dsl.Input[dsl.Dataset],
                     agg: dsl.Output[dsl.Dataset]):
    import pandas as pd
    import pyarrow.dataset as pads
    root = f's3://{bucket}/clickstream/region={region}/dt={ds}/'
    clicks = pads.dataset(root, format='parquet', partitioning='hive').to_table().to_pandas()
    cust = pd.read_parquet(customers.path)
    out = clicks.groupby('customer_id').agg(n_clicks=('url', 'count')).reset_index().merge(cust, on='customer_id')
    out.to_parquet(agg.path)


@dsl.component(base_image=PY, packages_to_install=PKGS)
def merge_features(parts: List[dsl.Dataset], ds: str, merged: dsl.Output[dsl.Dataset]) -> str:
    import boto3
    import pandas as pd
    df = pd.concat([pd.read_parquet(p.path) for p in parts])
    df.to_parquet(merged.path)
    target = f's3://acme-feature-store/features/churn/dt={ds}/features.parquet'
    df.to_parquet(target)
    boto3.client('s3').put_object(Bucket='acme-feature-store', Key=f'features/churn/dt={ds}/_SUCCESS', Body=b'')
    return target


@dsl.component(base_image=PY, packages_to_install=PKGS)
def validate_features(merged: dsl.Input[dsl.Dataset]) -> bool:
    import json
    import os

    import boto3
    import pandas as pd
    s3 = boto3.client('s3')
    s3.download_file(Bucket='acme-ml-config', Key='expectations/churn_features_v4.json', Filename='/tmp/suite.json')
    suite = json.load(open('/tmp/suite.json'))
    df = pd.read_parquet(merged.path)
    baseline = pd.read_parquet(os.environ['BASELINE_STATS_URI'])
    return set(suite['columns']) <= set(df.columns) and len(df) > 0.5 * baseline['rows'].iloc[0]


@dsl.container_component
def notify(channel: str):
    return dsl.ContainerSpec(image='curlimages/curl:8.8.0', command=['sh', '-c'],
                             args=['curl -s -X POST "$SLACK_WEBHOOK" -d "{\\"channel\\": \\"$0\\", \\"text\\": \\"churn features done\\"}"',
                                   channel])


@dsl.pipeline(name='churn-feature-daily')
def churn_features(bucket: str = 'acme-raw-events', ds: str = '2024-06-01',
                   regions: List[str] = ['us-east-1', 'eu-west-1', 'ap-south-1']):
    done = notify(channel='#ml-features')
    kubernetes.use_secret_as_env(done, secret_name='slack', secret_key_to_env={'webhook': 'SLACK_WEBHOOK'})
    with dsl.ExitHandler(done, name='features'):
        cust = extract_customers(bucket=bucket, ds=ds)
        kubernetes.use_config_map_as_env(cust, config_map_name='aws-region', config_map_key_to_env={'region': 'AWS_DEFAULT_REGION'})
        with dsl.ParallelFor(items=regions, parallelism=3) as region:
            agg = aggregate_region(bucket=bucket, region=region, ds=ds, customers=cust.outputs['customers'])
            agg.set_memory_limit('16G')
        merged = merge_features(parts=dsl.Collected(agg.outputs['agg']), ds=ds)
        val = validate_features(merged=merged.outputs['merged'])
        val.set_env_variable('BASELINE_STATS_URI', 's3://acme-feature-store/stats/churn/baseline.parquet')


if __name__ == '__main__':
    compiler.Compiler().compile(churn_features, os.path.splitext(__file__)[0] + '.yaml')
