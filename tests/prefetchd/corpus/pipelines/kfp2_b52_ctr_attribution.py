# ruff: noqa
"""Daily CTR model for a DSP bidder (KFP v2).

Per-day sessionisation in DuckDB (impressions parquet joined to click CSVs,
COPY ... TO S3), polars feature build over the collected session files plus
audience-segment files, pyarrow.dataset training over a hive-partitioned
feature folder with a filter, holdout evaluation, conditional publish and a
calibration table written with pandas partition_cols, an exit task that
removes the staging prefix. A DuckDB CLI container builds a bid landscape
next to it.

Compile: python kfp2_b52_ctr_attribution.py  -> kfp2_b52_ctr_attribution.yaml
"""
import os
from typing import List

from kfp import compiler, dsl, kubernetes
from kfp.dsl import Dataset, Input, Model, Output

IMAGE = 'ghcr.io/adsci/ctr-pipeline:2024.06.2'
S3_SECRET = {'AWS_ACCESS_KEY_ID': 'AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY': 'AWS_SECRET_ACCESS_KEY'}


@dsl.component(base_image=IMAGE)
def sessionize_day(logs_root: str, clicks_root: str, lake: str, day: str) -> str:
    import duckdb
    con = duckdb.connect()
    con.execute("INSTALL httpfs; LOAD httpfs; SET s3_region='us-east-1';")
    out = f"{lake}/staging/sessions/dt={day}/sessions.parquet"
    con.execute(f"""
        COPY (
          SELECT i.request_id, i.user_id, i.campaign_id, i.campaign_type, i.creative_id, i.placement,
                 i.ts AS imp_ts, c.ts AS click_ts, c.ts IS NOT NULL AS clicked, '{day}' AS dt
          FROM read_parquet('{logs_root}/dt={day}/*/*.parquet', hive_partitioning = true) i
          LEFT JOIN read_csv_auto('{clicks_root}/{day}/clicks-*.csv.gz') c USING (request_id)
        ) TO '{out}' (FORMAT PARQUET, COMPRESSION ZSTD)
    """)
    return out


@dsl.component(base_image=IMAGE)
def build_features(session_files: List[str], segments_root: str, lake: str):
    import polars as pl
    import pyarrow.dataset as ds
    sessions = pl.scan_parquet(session_files)
    segments = pl.scan_parquet([f"{segments_root}/segment={s}/part-0.parquet" for s in ("sports", "auto", "travel")])
    feats = (sessions.join(segments, on="user_id", how="left")
             .with_columns(pl.col("imp_ts").dt.hour().alias("hour"))
             .collect())
    ds.write_dataset(feats.to_arrow(), f"{lake}/features/v3", format="parquet",
                     partitioning=["campaign_type", "dt"], partitioning_flavor="hive",
                     existing_data_behavior="delete_matching")


@dsl.component(base_image=IMAGE)
def train_ctr(features_uri: str, model: Output[Model]):
    import json
    import pyarrow.dataset as ds
    import smart_open
    import xgboost as xgb
    with smart_open.open("s3://adtech-lake/ctr/vocab/placement_vocab.json") as f:
        vocab = json.load(f)
    dataset = ds.dataset(features_uri, format="parquet", partitioning="hive")
    tbl = dataset.to_table(filter=(ds.field("campaign_type") != "house") & (ds.field("dt") >= "2024-06-01"))
    df = tbl.to_pandas()
    df["placement"] = df["placement"].map(vocab).fillna(0)
    booster = xgb.train({"objective": "binary:logistic", "eta": 0.1, "max_depth": 8},
                        xgb.DMatrix(df.drop(columns=["clicked"]), label=df["clicked"]), 300)
    booster.save_model(model.path)


@dsl.component(base_image=IMAGE)
def eval_ctr(model: Input[Model], holdout_uri: str, predictions: Output[Dataset]) -> float:
    import pandas as pd
    import xgboost as xgb
    from sklearn.metrics import roc_auc_score
    hold = pd.read_parquet(holdout_uri, columns=None)
    booster = xgb.Booster(model_file=model.path)
    hold["p"] = booster.predict(xgb.DMatrix(hold.drop(columns=["clicked"])))
    hold[["placement", "p", "clicked"]].to_parquet(predictions.path)
    return float(roc_auc_score(hold["clicked"], hold["p"]))


@dsl.container_component
def bid_landscape(bids_glob: str, out_uri: str):
    return dsl.ContainerSpec(
        image='ghcr.io/adsci/duckdb-cli:1.0.0',
        command=['duckdb', '-c'],
        args=[f"INSTALL httpfs; LOAD httpfs; COPY (SELECT placement, approx_quantile(clearing_price, [0.1, 0.5, 0.9]) AS q "
              f"FROM read_parquet('{bids_glob}') GROUP BY placement) TO '{out_uri}' (FORMAT PARQUET)"],
    )


@dsl.component(base_image=IMAGE)
def publish_model(model: Input[Model], dest: str):
    import s3fs
    s3fs.S3FileSystem().put(model.path, dest + "model.json")


@dsl.component(base_image=IMAGE)
def write_calibration(predictions: Input[Dataset], out_root: str):
    import pandas as pd
    df = pd.read_parquet(predictions.path)
    df["bucket"] = (df["p"] * 20).astype(int)
    calib = df.groupby(["placement", "bucket"], as_index=False).agg(p=("p", "mean"), ctr=("clicked", "mean"))
    calib.to_parquet(out_root, partition_cols=["placement"], index=False)


@dsl.component(base_image=IMAGE)
def cleanup_staging(prefix: str):
    import s3fs
    fs = s3fs.S3FileSystem()
    if fs.exists(prefix):
        fs.rm(prefix, recursive=True)


@dsl.pipeline(name='dsp-ctr-daily')
def ctr_pipeline(
    logs_root: str = 's3://adtech-raw-logs/impressions',
    clicks_root: str = 's3://adtech-raw-logs/clicks',
    lake: str = 's3://adtech-lake/ctr',
    days: List[str] = ['2024-06-01', '2024-06-02', '2024-06-03'],
    holdout_uri: str = 's3://adtech-lake/ctr/holdout/dt=2024-06-04/',
    bids_glob: str = 's3://adtech-raw-logs/bids/dt=2024-06-0[1-3]/*.parquet',
    run_date: str = '2024-06-03',
):
    clean = cleanup_staging(prefix=f'{lake}/staging/')
    with dsl.ExitHandler(clean, name='ctr-daily'):
        with dsl.ParallelFor(days, parallelism=2) as day:
            sess = sessionize_day(logs_root=logs_root, clicks_root=clicks_root, lake=lake, day=day)
            kubernetes.use_secret_as_env(sess, secret_name='adtech-s3-creds', secret_key_to_env=S3_SECRET)
        feat = build_features(session_files=dsl.Collected(sess.output),
                              segments_root='s3://adtech-dmp/segments/v12', lake=lake)
        train = train_ctr(features_uri=f'{lake}/features/v3').after(feat)
        train.set_cpu_limit('16').set_memory_limit('64G')
        kubernetes.add_toleration(train, key='workload', operator='Equal', value='batch-highmem', effect='NoSchedule')
        ev = eval_ctr(model=train.outputs['model'], holdout_uri=holdout_uri)
        bid_landscape(bids_glob=bids_glob, out_uri=f'{lake}/bid_landscape/{run_date}.parquet')
        with dsl.If(ev.outputs['Output'] >= 0.74, name='auc-gate'):
            publish_model(model=train.outputs['model'], dest=f's3://adtech-models/ctr/xgb/{run_date}/')
            write_calibration(predictions=ev.outputs['predictions'], out_root=f'{lake}/calibration/')


if __name__ == '__main__':
    compiler.Compiler().compile(ctr_pipeline, os.path.splitext(__file__)[0] + '.yaml')
