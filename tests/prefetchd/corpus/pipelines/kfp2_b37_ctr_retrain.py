# ruff: noqa
"""Daily click-through-rate model retrain for the ads ranker (KFP v2 + kfp-kubernetes).

root  ctr-daily-retrain
  pull-logs, pull-logs-2          one component reused for impressions and clicks (f-string URIs on `date`)
  join-labels
  feature-build                   <- nested pipeline: ParallelFor(advertisers) build-features
                                     (existing PVC named by the nested pipeline's input) -> merge-features
  importer                        last production model
  dsl.If / dsl.Elif / dsl.Else on train_mode (the default 'incremental' decides the branch)
    train-ctr | train-ctr-2 | train-ctr-3   one component, three argument sets
  evaluate-ctr                    OneOf(model)
  dsl.If(evaluate-ctr.auc >= 0.78)
    shadow-deploy                 <- nested pipeline with its own ExitHandler(release-lock)
      push-shadow, replay-traffic

Compile: python kfp2_b37_ctr_retrain.py  -> kfp2_b37_ctr_retrain.yaml
"""
import os
from typing import List, NamedTuple

from kfp import compiler, dsl, kubernetes
from kfp.dsl import Dataset, Input, Model, Output

IMG = 'registry.adsplatform.io/ctr/trainer:5.2.0'


@dsl.component(base_image='ghcr.io/adsplatform/logtools:2.3.1')
def pull_logs(log_uri: str, kind: str, events: Output[Dataset]):
    import subprocess
    subprocess.run(['python', '-m', 'logtools.pull', '--src', log_uri, '--kind', kind, '--out', events.path],
                   check=True)


@dsl.component(base_image='ghcr.io/adsplatform/logtools:2.3.1')
def join_labels(impressions: Input[Dataset], clicks: Input[Dataset], window_h: int, joined: Output[Dataset]):
    import subprocess
    subprocess.run(['python', '-m', 'logtools.attribute', '--imp', impressions.path, '--clk', clicks.path,
                    '--window-h', str(window_h), '--out', joined.path], check=True)


@dsl.component(base_image=IMG)
def build_features(events: Input[Dataset], advertiser: str, catalog_uri: str, features: Output[Dataset]):
    import subprocess
    subprocess.run(['python', '-m', 'ctr.features', '--events', events.path, '--advertiser', advertiser,
                    '--catalog', catalog_uri, '--store', '/features', '--out', features.path], check=True)


@dsl.component(base_image=IMG)
def merge_features(parts: List[Dataset], merged: Output[Dataset]):
    import subprocess
    subprocess.run(['python', '-m', 'ctr.merge', '--out', merged.path] + [p.path for p in parts], check=True)


@dsl.pipeline(name='feature-build')
def feature_build(events: Input[Dataset], advertisers: List[str], feature_pvc: str) -> Dataset:
    with dsl.ParallelFor(advertisers) as adv:
        bf = build_features(events=events, advertiser=adv,
                            catalog_uri=f's3://ads-catalog/advertisers/{adv}/campaigns.parquet')
        kubernetes.mount_pvc(bf, pvc_name=feature_pvc, mount_path='/features', sub_path='ctr/v4')
    mg = merge_features(parts=dsl.Collected(bf.outputs['features']))
    return mg.outputs['merged']


@dsl.component(base_image=IMG)
def train_ctr(features: Input[Dataset], history_uri: str, epochs: int, lr: float, model: Output[Model],
              init_model: Input[Model] = None):
    import subprocess
    args = ['python', '-m', 'ctr.train', '--arch', 'dcnv2', '--features', features.path, '--epochs', str(epochs),
            '--lr', str(lr), '--out', model.path]
    if history_uri:
        args += ['--history', history_uri]
    if init_model is not None:
        args += ['--init', init_model.path]
    subprocess.run(args, check=True)


@dsl.component(base_image=IMG)
def evaluate_ctr(model: Input[Model], holdout_uri: str) -> NamedTuple('EvalOut', [('auc', float), ('logloss', float)]):
    import json, subprocess
    from collections import namedtuple
    out = subprocess.run(['python', '-m', 'ctr.evaluate', '--model', model.path, '--holdout', holdout_uri],
                         check=True, capture_output=True, text=True)
    m = json.loads(out.stdout)
    return namedtuple('EvalOut', ['auc', 'logloss'])(m['auc'], m['logloss'])


@dsl.component(base_image=IMG)
def push_shadow(model: Input[Model], serving_uri: str):
    import subprocess
    subprocess.run(['aws', 's3', 'sync', model.path, serving_uri], check=True)


@dsl.container_component
def replay_traffic(replay_uri: str, endpoint: str):
    return dsl.ContainerSpec(image='ghcr.io/adsplatform/replayer:0.9.4', command=['replayer'],
                             args=['--requests', replay_uri, '--target', endpoint, '--qps', '400'])


@dsl.container_component
def release_lock(lock_name: str):
    return dsl.ContainerSpec(image='ghcr.io/adsplatform/deploy-lock:1.1.0', command=['deploy-lock', 'release'],
                             args=['--name', lock_name])


@dsl.pipeline(name='shadow-deploy')
def shadow_deploy(model: Input[Model], date: str):
    unlock = release_lock(lock_name='ctr-shadow')
    with dsl.ExitHandler(unlock):
        ps = push_shadow(model=model, serving_uri=f's3://ads-serving/ctr/shadow/{date}/')
        replay_traffic(replay_uri='s3://ads-logs/replay/sample-1pct/latest/',
                       endpoint='http://ctr-shadow.ranker.svc:8080').after(ps)


@dsl.pipeline(name='ctr-daily-retrain')
def ctr_daily_retrain(date: str = '2024-06-14',
                      train_mode: str = 'incremental',
                      advertisers: List[str] = ['retail', 'travel', 'gaming'],
                      feature_pvc: str = 'ctr-feature-store'):
    imp = pull_logs(log_uri=f's3://ads-logs/impressions/dt={date}/', kind='impressions')
    clk = pull_logs(log_uri=f's3://ads-logs/clicks/dt={date}/', kind='clicks')
    jn = join_labels(impressions=imp.outputs['events'], clicks=clk.outputs['events'], window_h=24)
    fb = feature_build(events=jn.outputs['joined'], advertisers=advertisers, feature_pvc=feature_pvc)
    base = dsl.importer(artifact_uri='s3://ads-models/ctr/dcnv2/prod/2024-06-07/', artifact_class=Model,
                        reimport=False)
    with dsl.If(train_mode == 'full'):
        t_full = train_ctr(features=fb.output, history_uri='s3://ads-warehouse/ctr/history-90d/2024-06-13/',
                           epochs=8, lr=0.001)
    with dsl.Elif(train_mode == 'incremental'):
        t_inc = train_ctr(features=fb.output, history_uri='', epochs=1, lr=0.0002, init_model=base.output)
    with dsl.Else():
        t_warm = train_ctr(features=fb.output, history_uri='s3://ads-warehouse/ctr/history-30d/2024-06-13/',
                           epochs=3, lr=0.0005, init_model=base.output)
    ev = evaluate_ctr(model=dsl.OneOf(t_full.outputs['model'], t_inc.outputs['model'], t_warm.outputs['model']),
                      holdout_uri=f's3://ads-warehouse/ctr/holdout/dt={date}/')
    with dsl.If(ev.outputs['auc'] >= 0.78):
        shadow_deploy(model=dsl.OneOf(t_full.outputs['model'], t_inc.outputs['model'], t_warm.outputs['model']),
                      date=date)


if __name__ == '__main__':
    compiler.Compiler().compile(ctr_daily_retrain, os.path.splitext(__file__)[0] + '.yaml')
