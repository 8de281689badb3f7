# ruff: noqa
"""Lookalike audience expansion for advertisers (KFP v1 SDK -> Argo).

PySpark in a ContainerOp (`python3 -c` script, s3a:// read, partitionBy
write) with an existing scratch PVC for spark.local.dir, a ParallelFor over a
JSON-list parameter (withParam) per advertiser (smart_open seed read and
jsonl write, then scoring against a Lance vector table with pandas
partition_cols output), Ray Data embeddings over a list of parquet paths,
a Lance table build, a DuckDB overlap report (glob over what the loop wrote,
COPY TO S3), an append to a Delta registry (read + write of the same
table), and a gated s3fs get before the push to the DSP.

Compile (kfp 1.8.x): python kfp1_b52_lookalike_audiences.py  -> kfp1_b52_lookalike_audiences.yaml
"""
import os

import kfp
from kfp import dsl, onprem
from kfp.components import create_component_from_func

IMAGE = 'ghcr.io/adsci/lookalike:4.1.0'

SPARK_JOB = '''
import sys
from pyspark.sql import SparkSession, functions as F
src, dst, since = sys.argv[1], sys.argv[2], sys.argv[3]
spark = (SparkSession.builder.appName("lookalike-events")
         .config("spark.local.dir", "/scratch/spark").getOrCreate())
ev = spark.read.parquet(src)
ev = ev.where(F.col("date") >= since).select("user_id", "advertiser_id", "event", "category", "date")
ev.write.mode("overwrite").partitionBy("advertiser_id", "date").parquet(dst)
'''


def load_seeds(advertiser: str, dmp_root: str) -> str:
    import json
    import smart_open
    src = f"{dmp_root}/seeds/{advertiser}/seed_users.csv.gz"
    dst = f"{dmp_root}/lookalike/seeds/{advertiser}.jsonl"
    n = 0
    with smart_open.open(src) as fin, smart_open.open(dst, "w") as fout:
        next(fin)
        for line in fin:
            fout.write(json.dumps({"user_id": line.split(",")[0]}) + "\n")
            n += 1
    return dst


def embed_users(events_uri: str, profiles_uri: str, out_uri: str):
    import ray
    from lookalike.embed import UserEncoder
    ds = ray.data.read_parquet([events_uri, profiles_uri])
    emb = ds.map_batches(UserEncoder, concurrency=8, num_gpus=1, batch_size=4096)
    emb.write_parquet(out_uri)


def build_index(embeddings_uri: str, table_uri: str):
    import lance
    import pyarrow.dataset as ds
    tbl = ds.dataset(embeddings_uri, format="parquet").to_table()
    lt = lance.write_dataset(tbl, table_uri, mode="overwrite")
    lt.create_index("vector", index_type="IVF_PQ", num_partitions=1024, num_sub_vectors=32)


def score_advertiser(advertiser: str, seeds_uri: str, table_uri: str, out_root: str) -> int:
    import lance
    import numpy as np
    import pandas as pd
    seeds = pd.read_json(seeds_uri, lines=True)
    users = lance.dataset(table_uri)
    seed_vecs = users.to_table(filter=f"user_id IN {tuple(seeds.user_id.tolist())}", columns=["vector"])
    centroid = np.stack(seed_vecs["vector"].to_numpy(zero_copy_only=False)).mean(axis=0)
    hits = users.to_table(nearest={"column": "vector", "q": centroid, "k": 200000}).to_pandas()
    hits["tier"] = pd.qcut(hits["_distance"], 4, labels=["t1", "t2", "t3", "t4"])
    hits["advertiser"] = advertiser
    hits[["user_id", "advertiser", "tier", "_distance"]].to_parquet(
        f"{out_root}/{advertiser}/", partition_cols=["tier"], index=False)
    return len(hits)


def overlap_report(audiences_glob: str, report_uri: str) -> float:
    import duckdb
    con = duckdb.connect()
    con.execute("INSTALL httpfs; LOAD httpfs;")
    con.execute(f"""
        CREATE TABLE aud AS SELECT * FROM read_parquet('{audiences_glob}', hive_partitioning = true);
        COPY (SELECT a.advertiser AS a, b.advertiser AS b, count(*) AS shared
              FROM aud a JOIN aud b USING (user_id) WHERE a.advertiser < b.advertiser GROUP BY 1, 2)
        TO '{report_uri}' (HEADER, DELIMITER ',');
    """)
    return con.execute("""SELECT max(shared) / (SELECT count(DISTINCT user_id) FROM aud)
                          FROM (SELECT count(*) AS shared FROM aud a JOIN aud b USING (user_id)
                                WHERE a.advertiser < b.advertiser GROUP BY a.advertiser, b.advertiser)""").fetchone()[0]


def register_audiences(registry_uri: str, run_date: str):
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake
    dt = DeltaTable(registry_uri)
    prev = dt.to_pyarrow_table(filters=[("status", "=", "active")])
    row = pa.table({"run_date": [run_date], "status": ["active"], "n_prev_active": [prev.num_rows]})
    write_deltalake(registry_uri, row, mode="append")


def push_to_dsp(audiences_uri: str, dsp_endpoint: str):
    import glob
    import requests
    import s3fs
    s3fs.S3FileSystem().get(audiences_uri, "/tmp/audiences/", recursive=True)
    for path in glob.glob("/tmp/audiences/**/*.parquet", recursive=True):
        with open(path, "rb") as f:
            requests.post(dsp_endpoint, data=f, timeout=60).raise_for_status()


seeds_op = create_component_from_func(load_seeds, base_image=IMAGE)
embed_op = create_component_from_func(embed_users, base_image=IMAGE)
index_op = create_component_from_func(build_index, base_image=IMAGE)
score_op = create_component_from_func(score_advertiser, base_image=IMAGE)
overlap_op = create_component_from_func(overlap_report, base_image=IMAGE)
register_op = create_component_from_func(register_audiences, base_image=IMAGE)
push_op = create_component_from_func(push_to_dsp, base_image=IMAGE)


@dsl.pipeline(name='lookalike-audiences')
def lookalike_pipeline(
    advertisers: list = ['4411', '5120', '7302'],
    events_root: str = 's3a://adtech-dmp/events/clickstream/',
    since: str = '2024-05-01',
    dmp_root: str = 's3://adtech-dmp',
    run_date: str = '2024-06-03',
):
    ev = dsl.ContainerOp(
        name='export-events',
        image='ghcr.io/adsci/spark-py:3.5.1-hadoop3',
        command=['python3', '-c', SPARK_JOB],
        arguments=[events_root, 's3a://adtech-dmp/lookalike/user_events/', since],
    ).apply(onprem.mount_pvc('spark-scratch', 'scratch', '/scratch'))
    emb = embed_op(events_uri='s3://adtech-dmp/lookalike/user_events/',
                   profiles_uri='s3://adtech-dmp/profiles/demographics/v7/',
                   out_uri=f'{dmp_root}/lookalike/embeddings/{run_date}/').after(ev)
    emb.set_gpu_limit(1)
    idx = index_op(embeddings_uri=f'{dmp_root}/lookalike/embeddings/{run_date}/',
                   table_uri='s3://adtech-dmp/lookalike/vectors.lance').after(emb)
    with dsl.ParallelFor(advertisers, parallelism=2) as adv:
        sd = seeds_op(advertiser=adv, dmp_root=dmp_root)
        sc = score_op(advertiser=adv, seeds_uri=sd.output, table_uri='s3://adtech-dmp/lookalike/vectors.lance',
                      out_root='s3://adtech-dmp/audiences/lookalike').after(idx)
    ov = overlap_op(audiences_glob='s3://adtech-dmp/audiences/lookalike/*/tier=*/*.parquet',
                    report_uri=f's3://adtech-reports/lookalike/overlap_{run_date}.csv').after(sc)
    register_op(registry_uri='s3://adtech-dmp/delta/audience_registry', run_date=run_date).after(sc)
    with dsl.Condition(ov.output < 0.35):
        push_op(audiences_uri='s3://adtech-dmp/audiences/lookalike/',
                dsp_endpoint='https://dsp.internal.example.com/v2/audiences/upload')


if __name__ == '__main__':
    kfp.compiler.Compiler().compile(lookalike_pipeline, os.path.splitext(__file__)[0] + '.yaml')
