# ruff: noqa
"""Nginx access-log sessionization, adapted from the KFP v1 "Data passing in
Python components", "Parallel loops", "Control flow" (flip-coin) and "Exit
handler" samples (KFP v1 SDK -> Argo).

One parse step per day (static ParallelFor) writes parsed Parquet to the
curated bucket; sessionize reads that prefix back; enrich-sessions reads the
GeoIP database from S3 next to the crawler list the sample fetched from
GitHub over https. The lightweight component still carries the sample's S3
default for `geoip_uri`; the pipeline passes the team's value. `es_host` is
unused.

Compile (kfp 1.8.x): python kfp1_b58_weblogs_sessions.py  -> kfp1_b58_weblogs_sessions.yaml
"""
import os

import kfp
from kfp import dsl
from kfp.components import InputPath, OutputPath, create_component_from_func, load_component_from_text

IMAGE = 'ghcr.io/acme-web/logtools:2.4.1'

parse_op = load_component_from_text('''
name: Parse access logs
description: Parse nginx combined logs of one day into Parquet.
inputs:
- {name: Logs uri, type: String}
- {name: Output uri, type: String}
- {name: Log format, type: String, default: combined}
implementation:
  container:
    image: ghcr.io/acme-web/logtools:2.4.1
    command: [python, -m, logtools.parse]
    args: [--input, {inputValue: Logs uri}, --format, {inputValue: Log format}, --output, {inputValue: Output uri}]
''')

publish_op = load_component_from_text('''
name: Publish blocklist
inputs:
- {name: Enriched, type: Parquet}
- {name: Blocklist uri, type: String}
implementation:
  container:
    image: ghcr.io/acme-web/logtools:2.4.1
    command:
    - sh
    - -exc
    - python -m logtools.blocklist --sessions "$0" --out /tmp/bots.txt && aws s3 cp /tmp/bots.txt "$1"
    - {inputPath: Enriched}
    - {inputValue: Blocklist uri}
''')


def sessionize(parsed_uri: str, gap_minutes: int, sessions_path: OutputPath('Parquet')):
    import pandas as pd
    df = pd.read_parquet(parsed_uri)  # s3fs
    df = df.sort_values(['client_ip', 'ts'])
    gap = df.groupby('client_ip')['ts'].diff().dt.total_seconds().gt(gap_minutes * 60)
    df['session'] = gap.groupby(df['client_ip']).cumsum()
    df.to_parquet(sessions_path)


def enrich_sessions(sessions_path: InputPath('Parquet'), crawlers_url: str, enriched_path: OutputPath('Parquet'),
                    geoip_uri: str = 's3://ml-pipeline-playground/geoip/GeoLite2-City.mmdb'):
    import json, subprocess, urllib.request
    import pandas as pd
    crawlers = json.load(urllib.request.urlopen(crawlers_url))
    subprocess.run(['aws', 's3', 'cp', geoip_uri, '/tmp/geo.mmdb'], check=True)
    df = pd.read_parquet(sessions_path)
    df['is_crawler'] = df['user_agent'].str.contains('|'.join(c['pattern'] for c in crawlers), regex=True)
    df.to_parquet(enriched_path)


def detect_bots(enriched_path: InputPath('Parquet')) -> float:
    import pandas as pd
    df = pd.read_parquet(enriched_path)
    return float(df['is_crawler'].mean())


def flip_coin() -> str:
    import random
    return 'heads' if random.randint(0, 1) == 0 else 'tails'


def print_msg(msg: str):
    print(msg)


sessionize_op = create_component_from_func(sessionize, base_image=IMAGE, packages_to_install=['s3fs==2023.12.2'])
enrich_op = create_component_from_func(enrich_sessions, base_image=IMAGE)
bots_op = create_component_from_func(detect_bots, base_image=IMAGE)
flip_op = create_component_from_func(flip_coin, base_image='python:3.9')
print_op = create_component_from_func(print_msg, base_image='python:3.9')

DAYS = ['2024-05-01', '2024-05-02', '2024-05-03']


@dsl.pipeline(name='weblogs-sessions', description='Daily nginx sessionization')
def weblogs_pipeline(logs_root: str = 's3://acme-weblogs-raw/nginx/prod',
                     curated_root: str = 's3://acme-weblogs-curated/v2',
                     crawlers_url: str = 'https://raw.githubusercontent.com/monperrus/crawler-user-agents/master/crawler-user-agents.json',
                     geoip_uri: str = 's3://acme-weblogs-ref/geoip/GeoLite2-City-2024-05.mmdb',
                     blocklist_uri: str = 's3://acme-edge-config/blocklist/bots.txt',
                     es_host: str = 'http://elasticsearch.logging:9200'):
    bye = print_op(msg='weblogs-sessions finished')
    with dsl.ExitHandler(bye):
        flip = flip_op()
        with dsl.Condition(flip.output == 'heads'):
            dsl.ContainerOp(name='whalesay', image='docker/whalesay:latest', command=['cowsay'],
                            arguments=['heads, parsing logs'])

        with dsl.ParallelFor(DAYS) as day:
            parse = parse_op(logs_uri=f'{logs_root}/dt={day}/', output_uri=f'{curated_root}/parsed/dt={day}/')

        sess = sessionize_op(parsed_uri=f'{curated_root}/parsed/', gap_minutes=30).after(parse)
        sess.execution_options.caching_strategy.max_cache_staleness = 'P0D'
        enr = enrich_op(sessions=sess.outputs['sessions'], crawlers_url=crawlers_url, geoip_uri=geoip_uri)
        bots = bots_op(enr.outputs['enriched'])
        with dsl.Condition(bots.output > 0.3):
            publish_op(enriched=enr.outputs['enriched'], blocklist_uri=blocklist_uri)


if __name__ == '__main__':
    kfp.compiler.Compiler().compile(weblogs_pipeline, os.path.splitext(__file__)[0] + '.yaml')
