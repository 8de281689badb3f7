# ruff: noqa
"""ADMET triage of a newly synthesised compound batch (KFP v2 + kfp-kubernetes).

Assay read-outs for the batch are pulled from S3 with boto3 into a shared
assay cache PVC (claim name is a pipeline parameter); a GNN toxicity model is
registered with an importer (reimport, metadata) and scores the batch; the
verdict selects one of three branches (If / Elif / Else) whose messages are
merged with dsl.OneOf for the summary. A Slack notification runs as the exit
task whatever happens.

Compile: python kfp2_b53_admet_triage.py  -> kfp2_b53_admet_triage.yaml
"""
import os

from kfp import compiler, dsl, kubernetes
from kfp.dsl import Dataset, Input, Model, Output

IMAGE = 'ghcr.io/drugdisc/admet-gnn:5.2.1'


@dsl.container_component
def notify_slack(batch: str, channel: str):
    return dsl.ContainerSpec(
        image='curlimages/curl:8.10.1',
        command=['sh', '-c'],
        args=['curl -sf -X POST -H "Content-type: application/json" '
              '--data "{\\"channel\\": \\"$1\\", \\"text\\": \\"ADMET triage finished for $0\\"}" "$SLACK_WEBHOOK"',
              batch, channel])


@dsl.component(base_image=IMAGE)
def load_assays(assay_prefix: str, cache_dir: str, manifest: Output[Dataset]):
    import os
    import boto3
    s3 = boto3.client('s3', endpoint_url=os.environ.get('S3_ENDPOINT'))
    bucket, _, prefix = assay_prefix[len('s3://'):].partition('/')
    names = []
    for page in s3.get_paginator('list_objects_v2').paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get('Contents', []):
            local = os.path.join(cache_dir, os.path.basename(obj['Key']))
            s3.download_file(bucket, obj['Key'], local)
            names.append(local)
    with open(manifest.path, 'w') as f:
        f.write('\n'.join(names))


@dsl.component(base_image=IMAGE)
def predict_tox(model: Input[Model], manifest: Input[Dataset], tox_threshold: float) -> str:
    import pandas as pd
    from admet_gnn import load_model
    gnn = load_model(model.path)
    with open(manifest.path) as f:
        frames = [pd.read_parquet(p.strip()) for p in f if p.strip()]
    scores = gnn.predict(pd.concat(frames))
    worst = float(scores['herg_risk'].max())
    if worst < tox_threshold:
        return 'clean'
    if worst < 2 * tox_threshold:
        return 'flagged'
    return 'toxic'


@dsl.component(base_image=IMAGE)
def promote_compounds(assay_prefix: str, promoted_prefix: str) -> str:
    import os
    import boto3
    s3 = boto3.client('s3')
    src_bucket, _, src_key = assay_prefix[len('s3://'):].partition('/')
    dst_bucket, _, dst_key = promoted_prefix[len('s3://'):].partition('/')
    n = 0
    for page in s3.get_paginator('list_objects_v2').paginate(Bucket=src_bucket, Prefix=src_key):
        for obj in page.get('Contents', []):
            local = '/tmp/' + os.path.basename(obj['Key'])
            s3.download_file(src_bucket, obj['Key'], local)
            s3.upload_file(local, dst_bucket, dst_key + os.path.basename(obj['Key']))
            n += 1
    return f'promoted {n} assay files to {promoted_prefix}'


@dsl.container_component
def queue_for_review(batch: str, herg_panel_uri: str, message: dsl.OutputPath(str)):
    return dsl.ContainerSpec(image='ghcr.io/drugdisc/review-queue:0.9.2',
                             command=['python', '-m', 'review_queue.submit'],
                             args=['--batch', batch, '--herg-panel', herg_panel_uri, '--message-out', message])


@dsl.component(base_image=IMAGE)
def archive_rejects(batch: str, rejected_prefix: str) -> str:
    import s3fs
    fs = s3fs.S3FileSystem()
    with fs.open(rejected_prefix + 'REJECTED.txt', 'w') as f:
        f.write(batch)
    return f'batch {batch} archived as rejected'


@dsl.component(base_image='python:3.11-slim')
def summarize(decision: str, batch: str):
    print(f'[{batch}] {decision}')


@dsl.pipeline(name='admet-triage')
def admet_triage(compound_batch: str = 'CB-2024-1107',
                 assay_root: str = 's3://drugdisc-assays/admet',
                 gnn_model_uri: str = 's3://drugdisc-models/admet-gnn/v5.2/',
                 assay_cache_pvc: str = 'admet-assay-cache',
                 tox_threshold: float = 0.35):
    notify = notify_slack(batch=compound_batch, channel='#chem-admet')
    kubernetes.use_secret_as_env(notify, secret_name='admet-slack', secret_key_to_env={'webhook': 'SLACK_WEBHOOK'})
    with dsl.ExitHandler(notify, name='triage'):
        gnn = dsl.importer(artifact_uri=gnn_model_uri, artifact_class=Model, reimport=True,
                           metadata={'framework': 'dgl', 'model_card': 'admet-gnn-v5.2', 'owner': 'comp-chem'})
        assays = load_assays(assay_prefix=f'{assay_root}/{compound_batch}/', cache_dir='/cache/assays')
        kubernetes.mount_pvc(assays, pvc_name=assay_cache_pvc, mount_path='/cache')
        kubernetes.use_secret_as_env(assays, secret_name='drugdisc-s3-creds',
                                     secret_key_to_env={'access_key': 'AWS_ACCESS_KEY_ID',
                                                        'secret_key': 'AWS_SECRET_ACCESS_KEY'})
        kubernetes.use_config_map_as_env(assays, config_map_name='drugdisc-s3-endpoint',
                                         config_map_key_to_env={'endpoint': 'S3_ENDPOINT'})
        pred = predict_tox(model=gnn.output, manifest=assays.outputs['manifest'], tox_threshold=tox_threshold)
        kubernetes.mount_pvc(pred, pvc_name=assay_cache_pvc, mount_path='/cache')
        pred.set_caching_options(False)
        with dsl.If(pred.output == 'clean', name='clean'):
            promote = promote_compounds(assay_prefix=f'{assay_root}/{compound_batch}/',
                                        promoted_prefix=f'{assay_root}/promoted/{compound_batch}/')
        with dsl.Elif(pred.output == 'flagged', name='flagged'):
            review = queue_for_review(batch=compound_batch,
                                      herg_panel_uri='s3://drugdisc-reference/tox/herg_reference_panel_2024.csv')
            review.set_env_variable('REVIEW_QUEUE', 'admet-medchem')
        with dsl.Else(name='toxic'):
            reject = archive_rejects(batch=compound_batch,
                                     rejected_prefix=f'{assay_root}/rejected/{compound_batch}/')
        summarize(decision=dsl.OneOf(promote.output, review.outputs['message'], reject.output),
                  batch=compound_batch)


if __name__ == '__main__':
    compiler.Compiler().compile(admet_triage, os.path.splitext(__file__)[0] + '.yaml')
