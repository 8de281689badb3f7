# ruff: noqa
"""CTR training-set backfill and model refresh for sponsored ads (KFP v1 SDK -> Argo Workflow).

ExitHandler(publish-run-metrics) around:
  sync-campaign-meta
  ParallelFor(dates)                        (JSON list pipeline parameter -> withParam)
    extract-events, extract-events-2        one component reused (impressions / clicks)
    join-events                             (existing PVC with the feature cache)
    ParallelFor(SLOTS)                      (static dicts -> withItems; loop of loops)
      negative-sample
  build-training-set
  Condition(retrain == 'yes')
    Condition(model_family == 'deepfm')     train-deepfm
    Condition(model_family == 'wide_deep')  train-wide-deep
    Condition(model_family == 'lr')         train-lr
    evaluate-auc (after the three branches)
    Condition(evaluate-auc.Output > 0.75)
      ParallelFor(REGIONS)                  push-model

Compile (kfp 1.8.x): python kfp1_b37_ctr_backfill.py  -> kfp1_b37_ctr_backfill.yaml
"""
import os

import kfp
from kfp import dsl, onprem
from kfp.components import create_component_from_func

IMG = 'registry.adsplatform.io/ctr/backfill:2.8.3'
TRAIN_IMG = 'registry.adsplatform.io/ctr/trainer:5.2.0'

SLOTS = [
    {'slot': 'feed', 'neg_rate': '0.05'},
    {'slot': 'search', 'neg_rate': '0.10'},
]
REGIONS = ['us-east', 'eu-west', 'ap-south']


def sync_campaign_meta(meta_uri: str):
    import subprocess
    subprocess.run(['aws', 's3', 'cp', meta_uri, '/cache/meta/campaigns.parquet'], check=True)


def extract_events(events_uri: str, kind: str, date: str):
    import pyarrow.dataset as ds
    t = ds.dataset(events_uri, format='parquet').to_table()
    t.to_pandas().to_parquet(f'/cache/{date}/{kind}.parquet')


def join_events(date: str, window_h: int):
    import subprocess
    subprocess.run(['python', '-m', 'ctr_backfill.join', '--dir', f'/cache/{date}', '--window-h', str(window_h)],
                   check=True)


def negative_sample(date: str, slot: str, neg_rate: str):
    import subprocess
    subprocess.run(['python', '-m', 'ctr_backfill.negsample', '--dir', f'/cache/{date}', '--slot', slot,
                    '--rate', neg_rate,
                    '--suppression', f's3://ads-meta/suppression/{slot}/advertisers.txt'], check=True)


def build_training_set(dates: str, archive_uri: str):
    import subprocess
    subprocess.run(['python', '-m', 'ctr_backfill.assemble', '--dates', dates, '--cache', '/cache',
                    '--out', '/cache/train-set'], check=True)
    subprocess.run(['aws', 's3', 'sync', '/cache/train-set', archive_uri], check=True)


def train_model(family: str, train_dir: str, embeddings_uri: str, epochs: int):
    import subprocess
    args = ['python', '-m', 'ctr.train', '--arch', family, '--train', train_dir, '--epochs', str(epochs),
            '--out', '/cache/models/latest']
    if embeddings_uri:
        args += ['--embeddings', embeddings_uri]
    subprocess.run(args, check=True)


def evaluate_auc(holdout_uri: str) -> float:
    import json, subprocess
    out = subprocess.run(['python', '-m', 'ctr.evaluate', '--model', '/cache/models/latest', '--holdout', holdout_uri],
                         check=True, capture_output=True, text=True)
    return float(json.loads(out.stdout)['auc'])


def push_model(region: str, dest_uri: str):
    import subprocess
    subprocess.run(['aws', 's3', 'sync', '/cache/models/latest', dest_uri, '--region', region], check=True)


def publish_run_metrics(pushgateway: str):
    import urllib.request
    urllib.request.urlopen(urllib.request.Request(pushgateway, data=b'ctr_backfill_done 1', method='POST'))


sync_op = create_component_from_func(sync_campaign_meta, base_image='amazon/aws-cli:2.15.30')
extract_op = create_component_from_func(extract_events, base_image=IMG)
join_op = create_component_from_func(join_events, base_image=IMG)
negs_op = create_component_from_func(negative_sample, base_image=IMG)
build_op = create_component_from_func(build_training_set, base_image=IMG)
deepfm_op = create_component_from_func(train_model, base_image=TRAIN_IMG)
evaluate_op = create_component_from_func(evaluate_auc, base_image=TRAIN_IMG)
push_op = create_component_from_func(push_model, base_image='amazon/aws-cli:2.15.30')
metrics_op = create_component_from_func(publish_run_metrics, base_image='python:3.11-slim')


def _cache(op):
    return op.apply(onprem.mount_pvc(pvc_name='ctr-feature-cache', volume_name='feature-cache',
                                     volume_mount_path='/cache'))


@dsl.pipeline(name='ctr-backfill-refresh')
def ctr_backfill(dates: str = '["2024-06-10", "2024-06-11", "2024-06-12"]',
                 retrain: str = 'yes',
                 model_family: str = 'deepfm',
                 train_set_uri: str = 's3://ads-warehouse/ctr/train-sets/backfill-2024-06-12/'):
    done = metrics_op(pushgateway='http://pushgateway.monitoring.svc:9091/metrics/job/ctr-backfill')
    with dsl.ExitHandler(done):
        meta = _cache(sync_op(meta_uri='s3://ads-meta/campaigns/snapshot/latest.parquet'))
        with dsl.ParallelFor(dates) as d:
            imp = _cache(extract_op(events_uri=f's3://ads-logs/impressions/dt={d}/', kind='impressions', date=d))
            clk = _cache(extract_op(events_uri=f's3://ads-logs/clicks/dt={d}/', kind='clicks', date=d))
            imp.after(meta)
            clk.after(meta)
            jn = _cache(join_op(date=d, window_h=24)).after(imp, clk)
            with dsl.ParallelFor(SLOTS) as s:
                ns = _cache(negs_op(date=d, slot=s.slot, neg_rate=s.neg_rate)).after(jn)
        bt = _cache(build_op(dates=dates, archive_uri=train_set_uri)).after(ns)
        with dsl.Condition(retrain == 'yes', name='retrain'):
            with dsl.Condition(model_family == 'deepfm', name='deepfm'):
                t1 = _cache(deepfm_op(family='deepfm', train_dir='/cache/train-set',
                               embeddings_uri='s3://ads-models/embeddings/item2vec/v5/', epochs=4)).after(bt)
                t1.set_display_name('train-deepfm')
            with dsl.Condition(model_family == 'wide_deep', name='wide-deep'):
                t2 = _cache(deepfm_op(family='wide_deep', train_dir='/cache/train-set', embeddings_uri='',
                                     epochs=6)).after(bt)
                t2.set_display_name('train-wide-deep')
            with dsl.Condition(model_family == 'lr', name='lr'):
                t3 = _cache(deepfm_op(family='lr', train_dir='/cache/train-set', embeddings_uri='', epochs=2)).after(bt)
                t3.set_display_name('train-lr')
            ev = _cache(evaluate_op(holdout_uri='s3://ads-warehouse/ctr/holdout/2024-06-13/')).after(t1, t2, t3)
            with dsl.Condition(ev.output > 0.75, name='auc-gate'):
                with dsl.ParallelFor(REGIONS) as region:
                    _cache(push_op(region=region, dest_uri=f's3://ads-serving/ctr/{region}/candidate/'))


if __name__ == '__main__':
    kfp.compiler.Compiler().compile(ctr_backfill, os.path.splitext(__file__)[0] + '.yaml')
