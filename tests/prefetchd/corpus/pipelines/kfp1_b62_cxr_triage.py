# ruff: noqa
"""Daily chest X-ray triage: batch scoring of new studies with the production model (KFP v1 SDK -> Argo).

The day's studies are synced from the PACS export bucket onto an existing
inference-cache PVC, de-identified in place and scored with the production
model (downloaded by its own step). If any study survived de-identification,
urgent findings are written to the radiology worklist bucket per pathology
(static ParallelFor) and the score distribution is checked against the
reference. An exit handler purges the PHI from the cache volume.

Compile (kfp 1.8.x): python kfp1_b62_cxr_triage.py  -> kfp1_b62_cxr_triage.yaml
"""
import os

import kfp
from kfp import dsl, onprem
from kfp.components import InputPath, OutputPath, create_component_from_func

IMAGE = 'ghcr.io/acme/cxr-infer:1.9.0'
CACHE_PVC = 'cxr-inference-cache'
REFERENCE_SCORES_URI = 's3://acme-med-monitoring/cxr/score-reference/densenet-v12.parquet'
PATHOLOGIES = ['pneumothorax', 'effusion', 'consolidation']


def fetch_model(model_uri: str, model: OutputPath('PyTorch')):
    import subprocess
    subprocess.run(['aws', 's3', 'cp', model_uri, model], check=True)


def deidentify(study_dir: str) -> int:
    import subprocess
    out = subprocess.run(['python', '-m', 'cxr_infer.deid', '--in-place', study_dir],
                         check=True, capture_output=True, text=True)
    return int(out.stdout.strip())


def score_studies(study_dir: str, model: InputPath('PyTorch'), scores: OutputPath('CSV')):
    import subprocess
    subprocess.run(['python', '-m', 'cxr_infer.score', '--studies', study_dir, '--model', model,
                    '--out', scores], check=True)


def flag_findings(scores: InputPath('CSV'), pathology: str, threshold: float, worklist_uri: str):
    import pandas as pd
    df = pd.read_csv(scores)
    urgent = df[df[pathology] >= threshold][['study_uid', pathology]]
    urgent.to_csv(f'{worklist_uri}{pathology}.csv', index=False)


def check_score_drift(scores: InputPath('CSV'), reference_uri: str) -> str:
    import pandas as pd
    from scipy.stats import ks_2samp
    cur = pd.read_csv(scores)
    ref = pd.read_parquet(reference_uri)
    worst = max(ks_2samp(cur[c], ref[c]).statistic for c in ref.columns if c in cur.columns)
    return 'drift' if worst > 0.2 else 'ok'


def publish_summary(drift: str, summary_uri: str):
    import json, subprocess
    with open('/tmp/summary.json', 'w') as f:
        json.dump({'drift': drift}, f)
    subprocess.run(['aws', 's3', 'cp', '/tmp/summary.json', summary_uri], check=True)


fetch_model_op = create_component_from_func(fetch_model, base_image='ghcr.io/acme/cxr-tools:0.6.2')
deid_op = create_component_from_func(deidentify, base_image='ghcr.io/acme/cxr-tools:0.6.2')
score_op = create_component_from_func(score_studies, base_image=IMAGE)
flag_op = create_component_from_func(flag_findings, base_image=IMAGE)
drift_op = create_component_from_func(check_score_drift, base_image=IMAGE)
summary_op = create_component_from_func(publish_summary, base_image='ghcr.io/acme/cxr-tools:0.6.2')


@dsl.pipeline(name='cxr-daily-triage')
def triage_pipeline(studies_uri: str = 's3://acme-pacs-export/cxr/incoming/2024-07-01/',
                    model_uri: str = 's3://acme-med-models/cxr-densenet/production/v12/model.pt',
                    run_date: str = '2024-07-01',
                    urgent_threshold: float = 0.7):
    purge = dsl.ContainerOp(name='purge-cache', image='busybox:1.36', command=['sh', '-c'],
                            arguments=['find /cache/incoming -mindepth 1 -maxdepth 1 -exec rm -rf {} +'])
    purge.apply(onprem.mount_pvc(pvc_name=CACHE_PVC, volume_name='cache', volume_mount_path='/cache'))

    with dsl.ExitHandler(purge):
        fetch = dsl.ContainerOp(name='fetch-studies', image='amazon/aws-cli:2.15.30',
                                command=['aws', 's3', 'sync', '--only-show-errors'],
                                arguments=[studies_uri, '/cache/incoming/%s' % run_date])
        fetch.apply(onprem.mount_pvc(pvc_name=CACHE_PVC, volume_name='cache', volume_mount_path='/cache'))

        model = fetch_model_op(model_uri=model_uri)

        deid = deid_op(study_dir='/cache/incoming/%s' % run_date).after(fetch)
        deid.apply(onprem.mount_pvc(pvc_name=CACHE_PVC, volume_name='cache', volume_mount_path='/cache'))

        with dsl.Condition(deid.output > 0):
            score = score_op(study_dir='/cache/incoming/%s' % run_date, model=model.outputs['model'])
            score.apply(onprem.mount_pvc(pvc_name=CACHE_PVC, volume_name='cache', volume_mount_path='/cache'))
            score.set_gpu_limit(1)

            with dsl.ParallelFor(PATHOLOGIES) as pathology:
                flag_op(scores=score.outputs['scores'], pathology=pathology, threshold=urgent_threshold,
                        worklist_uri='s3://acme-radiology-worklists/cxr/%s/' % run_date)

            drift = drift_op(scores=score.outputs['scores'], reference_uri=REFERENCE_SCORES_URI)
            summary_op(drift=drift.output,
                       summary_uri='s3://acme-radiology-reports/cxr-triage/%s/summary.json' % run_date)


if __name__ == '__main__':
    kfp.compiler.Compiler().compile(triage_pipeline, os.path.splitext(__file__)[0] + '.yaml')
