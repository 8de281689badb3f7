# ruff: noqa
"""KFP v1 (blind test): GPT pretraining data on Kubernetes volumes. A VolumeOp
scratch volume filled by `sh -c 'aws s3 cp --recursive "$0" ...' URI`, a
VolumeSnapshotOp of it, a second VolumeOp restored from the snapshot (data_source),
a tokenizer step on the restored volume, a ResourceOp that creates a PyTorchJob
mounting that claim, a dsl.Condition on a pipeline parameter around an eval step,
and a ResourceOp that deletes the restored PVC (VolumeOp.delete()).

Compile: /tmp/kfp1/bin/python kfp1_blind_wiki_snapshot.py
"""
import os

import kfp
from kfp import dsl

IMAGE = 'ghcr.io/acme-ml/lm-data:1.7.0'


@dsl.pipeline(name='gpt1b-wiki-pretrain')
def wiki_pretrain(wiki_uri: str = 's3://acme-nlp/wikipedia/20240601/en/', run_eval: str = 'true'):
    vop = dsl.VolumeOp(name='create-corpus-volume', resource_name='wiki-corpus', size='300Gi',
                       storage_class='gp3', modes=dsl.VOLUME_MODE_RWO)
    dl = dsl.ContainerOp(
        name='download-wiki', image='amazon/aws-cli:2.15.30',
        command=['sh', '-c'],
        arguments=['aws s3 cp --recursive "$0" /corpus/raw --exclude "*" --include "*.parquet" --only-show-errors',
                   wiki_uri],
        pvolumes={'/corpus': vop.volume})
    snap = dsl.VolumeSnapshotOp(name='snapshot-corpus', resource_name='wiki-corpus-snap',
                                volume=dl.pvolume, snapshot_class='ebs-csi-snapclass')
    restore = dsl.VolumeOp(name='restore-volume', resource_name='wiki-corpus-restored',
                           data_source=snap.snapshot, size='300Gi', storage_class='gp3',
                           modes=dsl.VOLUME_MODE_RWO)
    tok = dsl.ContainerOp(
        name='tokenize', image=IMAGE,
        command=['python', '-m', 'lmdata.tokenize'],
        arguments=['--tokenizer', 's3://acme-nlp/tokenizers/bpe-64k/', '--raw-dir', '/corpus/raw',
                   '--output-dir', '/corpus/tokens', '--seq-len', '2048'],
        pvolumes={'/corpus': restore.volume})

    job = {
        'apiVersion': 'kubeflow.org/v1',
        'kind': 'PyTorchJob',
        'metadata': {'generateName': 'gpt1b-pretrain-'},
        'spec': {'pytorchReplicaSpecs': {'Worker': {
            'replicas': 4,
            'template': {'spec': {
                'containers': [{
                    'name': 'pytorch', 'image': 'ghcr.io/acme-ml/lm-train:2.3.0',
                    'args': ['--data', '/corpus/tokens', '--save', 's3://acme-nlp/checkpoints/gpt-1b/'],
                    'volumeMounts': [{'name': 'corpus', 'mountPath': '/corpus'}]}],
                'volumes': [{'name': 'corpus', 'persistentVolumeClaim': {'claimName': str(restore.outputs['name'])}}]}}}}},
    }
    launch = dsl.ResourceOp(name='launch-pretrain', k8s_resource=job, action='create',
                            success_condition='status.replicaStatuses.Worker.succeeded == 4',
                            failure_condition='status.replicaStatuses.Worker.failed > 0',
                            attribute_outputs={'job_name': '{.metadata.name}'})
    launch.after(tok)

    with dsl.Condition(run_eval == 'true', name='eval-enabled'):
        ev = dsl.ContainerOp(
            name='evaluate-ppl', image='ghcr.io/acme-ml/lm-train:2.3.0',
            command=['python', '-m', 'lm.eval_ppl'],
            arguments=['--eval-file', 's3://acme-nlp/eval/wikitext-103/test.jsonl',
                       '--checkpoint', 's3://acme-nlp/checkpoints/gpt-1b/', '--job', launch.outputs['job_name']])

    rm = restore.delete()
    rm.after(launch)


if __name__ == '__main__':
    kfp.compiler.Compiler().compile(wiki_pretrain, os.path.splitext(__file__)[0] + '.yaml')
