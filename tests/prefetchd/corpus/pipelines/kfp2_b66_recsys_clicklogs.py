# ruff: noqa
"""Two-tower recommender from click logs on MinIO (KFP v2).

pick-partition lists the click-log prefix with an fsspec S3 filesystem (custom
endpoint from a pipeline parameter) and returns the newest dt= partition as a
URI: sessionize scans it with Polars, so that read is known only at run time.
A bot-list glob arrives as a constant env var (fsspec.open_files over
*.json.gz). join-catalog reads Hive-partitioned impressions with DuckDB
(`**/*.parquet`, bucket and day are separate parameters) and a product
catalog whose URI is a required pipeline parameter (pq.read_table). Training
(gated by dsl.If on the joined row count) reads item embeddings through a
`simplecache::` chained URL and writes the model to a dated prefix. An exit
task posts a message that mentions an S3 prefix (a log line, not a read).

Compile: python kfp2_b66_recsys_clicklogs.py  -> kfp2_b66_recsys_clicklogs.yaml
"""
import os

from kfp import compiler, dsl
from kfp.dsl import Dataset, Input, Output

IMAGE = 'ghcr.io/example/recsys-etl:1.6.2'


@dsl.component(base_image=IMAGE)
def pick_partition(bucket: str, endpoint: str) -> str:
    import fsspec
    fs = fsspec.filesystem('s3', client_kwargs={'endpoint_url': endpoint})
    days = sorted(p for p in fs.ls(f'{bucket}/clicks/') if '/dt=' in p)
    print('partitions:', days[-3:])
    return f's3://{days[-1]}/'


@dsl.component(base_image=IMAGE)
def sessionize(partition_uri: str, endpoint: str, sessions: Output[Dataset]) -> int:
    import gzip, json, os
    import fsspec
    import polars as pl
    bots = set()
    for of in fsspec.open_files(os.environ['BOTLIST_GLOB'], 'rb', client_kwargs={'endpoint_url': endpoint}):
        with of as raw, gzip.open(raw, 'rt') as f:
            bots.update(json.load(f)['user_ids'])
    lf = pl.scan_parquet(partition_uri + '*.parquet', storage_options={'aws_endpoint_url': endpoint})
    df = (lf.filter(~pl.col('user_id').is_in(list(bots)))
            .sort('ts').group_by('user_id').agg(pl.col('item_id')).collect())
    df.write_parquet(sessions.path)
    return df.height


@dsl.component(base_image=IMAGE)
def join_catalog(sessions: Input[Dataset], catalog_uri: str, bucket: str, day: str, endpoint: str,
                 training_set: Output[Dataset]) -> int:
    import duckdb
    import pyarrow.parquet as pq
    con = duckdb.connect()
    con.execute('INSTALL httpfs; LOAD httpfs;')
    host = endpoint.split('://', 1)[1]
    con.execute(f"SET s3_endpoint='{host}'; SET s3_use_ssl=false; SET s3_url_style='path';")
    imps = con.execute(
        f"SELECT user_id, item_id, position FROM read_parquet('s3://{bucket}/impressions/dt={day}/**/*.parquet', "
        "hive_partitioning=true)").arrow()
    catalog = pq.read_table(catalog_uri, columns=['item_id', 'category', 'price'])
    con.register('imps', imps)
    con.register('catalog', catalog)
    con.register('sess', pq.read_table(sessions.path))
    out = con.execute('SELECT * FROM sess JOIN imps USING (user_id) JOIN catalog USING (item_id)').arrow()
    pq.write_table(out, training_set.path)
    return out.num_rows


@dsl.component(base_image='ghcr.io/example/recsys-train:1.6.2')
def train_two_tower(training_set: Input[Dataset], day: str):
    import fsspec
    import pandas as pd
    from recsys.two_tower import fit
    emb = pd.read_parquet('simplecache::s3://example-recsys-features/item-embeddings/v7/embeddings.parquet',
                          storage_options={'s3': {'anon': False}})
    model = fit(pd.read_parquet(training_set.path), item_embeddings=emb)
    out = f's3://example-recsys-models/two-tower/dt={day}/model.pt'
    with fsspec.open(out, 'wb') as f:
        model.save(f)
    print('saved', out)


@dsl.container_component
def notify(webhook: str, message: str):
    return dsl.ContainerSpec(image='curlimages/curl:8.8.0', command=['curl', '-sS', '-X', 'POST'],
                             args=['--data', message, webhook])


@dsl.pipeline(name='recsys-clicklog-two-tower')
def recsys(catalog_uri: str,
           logs_bucket: str = 'example-recsys-logs',
           day: str = '2024-06-01',
           s3_endpoint: str = 'http://minio.ml-data.svc:9000'):
    bye = notify(webhook='https://hooks.example.com/services/recsys-alerts',
                 message='two-tower run finished; models under s3://example-recsys-models/two-tower/')
    with dsl.ExitHandler(bye, name='clicklog-run'):
        pp = pick_partition(bucket=logs_bucket, endpoint=s3_endpoint)
        ss = sessionize(partition_uri=pp.output, endpoint=s3_endpoint)
        ss.set_env_variable('BOTLIST_GLOB', 's3://example-recsys-logs/botlists/2024-*.json.gz')
        jc = join_catalog(sessions=ss.outputs['sessions'], catalog_uri=catalog_uri, bucket=logs_bucket, day=day,
                          endpoint=s3_endpoint)
        with dsl.If(jc.outputs['Output'] > 10000, name='enough-rows'):
            train_two_tower(training_set=jc.outputs['training_set'], day=day)


if __name__ == '__main__':
    compiler.Compiler().compile(recsys, os.path.splitext(__file__)[0] + '.yaml')
