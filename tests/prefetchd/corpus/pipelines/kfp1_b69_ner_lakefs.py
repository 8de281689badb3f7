# ruff: noqa
"""German/French NER fine-tuning on lakeFS-versioned annotations (KFP v1 SDK -> Argo).

The annotation team versions the corpus in lakeFS (repository `ner-corpus`,
one branch/tag per release) and reads it through lakeFS's S3 gateway, so an
object is s3://<repo>/<ref>/<path> with the endpoint https://lakefs.acme.internal.
Word vectors are DVC-tracked in the assets repo with an S3 remote. A VolumeOp
gives the run a work volume; credentials come from Secrets via use_aws_secret.

Compile (kfp 1.8.x): python kfp1_b69_ner_lakefs.py  -> kfp1_b69_ner_lakefs.yaml
"""
import os

import kfp
from kfp import dsl
from kfp.aws import use_aws_secret
from kfp.components import create_component_from_func
from kubernetes.client.models import V1EnvVar

LAKEFS = 'https://lakefs.acme.internal'
NLP_IMAGE = 'ghcr.io/acme-nlp/ner-train:1.12.0'


def train_ner(repo: str, ref: str, lang: str, data_dir: str, model_dir: str) -> float:
    import json
    import os
    import pandas as pd
    from ner.train import fit_token_classifier
    gaz = pd.read_csv(f's3://{repo}/{ref}/gazetteers/{lang}/entities.csv',
                      storage_options={'client_kwargs': {'endpoint_url': os.environ['LAKEFS_S3_ENDPOINT']}})
    f1 = fit_token_classifier(
        train=os.path.join(data_dir, 'annotated', 'train.conll'),
        dev=os.path.join(data_dir, 'annotated', 'dev.conll'),
        vectors=os.path.join(data_dir, 'vectors', f'cc.{lang}.300.bin'),
        gazetteer=gaz, base='xlm-roberta-base', out=model_dir)
    with open(os.path.join(model_dir, 'train_metrics.json'), 'w') as f:
        json.dump({'dev_f1': f1}, f)
    return f1


train_ner_op = create_component_from_func(train_ner, base_image=NLP_IMAGE)


@dsl.pipeline(name='ner-lakefs-finetune', description='NER fine-tune on a lakeFS release of the annotations')
def ner_pipeline(lakefs_repo: str = 'ner-corpus', lakefs_ref: str = 'release-2026-11', lang: str = 'de',
                 assets_rev: str = 'v3.4.0'):
    vol = dsl.VolumeOp(name='ner-work', resource_name='ner-work', size='40Gi', modes=dsl.VOLUME_MODE_RWO)

    sync = dsl.ContainerOp(
        name='sync-annotations',
        image='amazon/aws-cli:2.15.30',
        command=['sh', '-c'],
        arguments=[
            f'aws s3 cp --recursive --endpoint-url {LAKEFS} '
            f's3://{lakefs_repo}/{lakefs_ref}/annotated/{lang}/ /data/annotated/ '
            f'&& aws s3 ls --endpoint-url {LAKEFS} s3://{lakefs_repo}/{lakefs_ref}/annotated/ > /data/annotated/_langs.txt'
        ],
        pvolumes={'/data': vol.volume},
    ).apply(use_aws_secret('lakefs-ner-creds', 'access_key_id', 'secret_access_key'))

    vectors = dsl.ContainerOp(
        name='pull-vectors',
        image='ghcr.io/acme-nlp/dvc:3.55.2',
        command=['bash', '-c'],
        arguments=[
            'set -euo pipefail; '
            f'git clone --depth 1 --branch {assets_rev} https://github.com/acme-nlp/ner-assets /src && cd /src && '
            'dvc remote add -d -f store s3://acme-dvc-store/ner-assets && '
            f'dvc pull vectors/cc.{lang}.300.bin.dvc && '
            'mkdir -p /data/vectors && cp vectors/*.bin /data/vectors/'
        ],
        pvolumes={'/data': sync.pvolume},
    ).apply(use_aws_secret('dvc-store-creds', 'AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY'))

    train = train_ner_op(repo=lakefs_repo, ref=lakefs_ref, lang=lang, data_dir='/data', model_dir='/data/model')
    train.add_pvolumes({'/data': vectors.pvolume})
    train.container.add_env_variable(V1EnvVar(name='LAKEFS_S3_ENDPOINT', value=LAKEFS))
    train.apply(use_aws_secret('lakefs-ner-creds', 'access_key_id', 'secret_access_key'))
    train.set_gpu_limit(1)

    evaluate = dsl.ContainerOp(
        name='evaluate-heldout',
        image=NLP_IMAGE,
        command=['python', '-m', 'ner.evaluate'],
        arguments=['--model', '/data/model',
                   '--test', f's3://{lakefs_repo}/main/heldout/{lang}/test.conll',
                   '--report', '/data/model/heldout.json'],
        pvolumes={'/data': train.pvolume},
    )
    evaluate.after(train)
    evaluate.container.add_env_variable(V1EnvVar(name='AWS_ENDPOINT_URL', value=LAKEFS))
    evaluate.apply(use_aws_secret('lakefs-ner-creds', 'access_key_id', 'secret_access_key'))

    export = dsl.ContainerOp(
        name='export-model',
        image='amazon/aws-cli:2.15.30',
        command=['aws', 's3', 'sync'],
        arguments=['/data/model/', f's3://acme-nlp-models/ner/{lang}/{lakefs_ref}/{dsl.RUN_ID_PLACEHOLDER}/'],
        pvolumes={'/data': evaluate.pvolume},
    ).apply(use_aws_secret('nlp-models-writer', 'AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY'))

    vol.delete().after(export)


if __name__ == '__main__':
    kfp.compiler.Compiler().compile(ner_pipeline, os.path.splitext(__file__)[0] + '.yaml')
