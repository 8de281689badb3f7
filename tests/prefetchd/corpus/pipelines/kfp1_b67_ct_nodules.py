# ruff: noqa
"""Lung-nodule detector on chest CT (KFP v1 SDK -> Argo Workflow).

The cohort is a pipeline parameter holding a JSON list of dicts (one per
site, each with a DICOM series URI); ParallelFor over it becomes Argo
withParam. DICOM conversion and training are components loaded from YAML
text ({inputValue}, {inputPath}, {outputPath}, {concat}, {if: isPresent});
the annotation URI is an f-string of two parameters; a VolumeOp work volume
is chained through pvolumes; registration of the model runs only when the
evaluation score clears a threshold.

Compile (kfp 1.8.x): python kfp1_b67_ct_nodules.py  -> kfp1_b67_ct_nodules.yaml
"""
import json
import os

import kfp
from kfp import dsl
from kfp.components import load_component_from_text
from kubernetes.client.models import V1EnvVar, V1EnvVarSource, V1SecretKeySelector

COHORT = [
    {'site': 'lidc', 'series': 's3://example-radiology/lidc-idri/dicom/'},
    {'site': 'nlst', 'series': 's3://example-radiology/nlst/ct-low-dose/dicom/'},
]

convert_op = load_component_from_text('''
name: Convert DICOM
inputs:
- {name: series_uri, type: String}
- {name: site, type: String}
- {name: spacing_mm, type: String, default: '1.0'}
implementation:
  container:
    image: ghcr.io/example/dicom2nifti:2.4.8
    command: [python, -m, ctprep.convert]
    args:
    - --series
    - {inputValue: series_uri}
    - --spacing
    - {inputValue: spacing_mm}
    - --out
    - concat: [/work/nifti/, {inputValue: site}]
''')

train_op = load_component_from_text('''
name: Train detector
inputs:
- {name: annotations, type: CSV}
- {name: pretrained_weights, type: String, optional: true}
- {name: resume_from, type: String, optional: true}
- {name: epochs, type: Integer, default: '60'}
outputs:
- {name: model, type: Model}
implementation:
  container:
    image: ghcr.io/example/nodule-det:0.11.0
    command: [python, -m, noduledet.train]
    args:
    - --images
    - /work/nifti
    - --annotations
    - {inputPath: annotations}
    - if:
        cond: {isPresent: pretrained_weights}
        then: [--pretrained, {inputValue: pretrained_weights}]
    - if:
        cond: {isPresent: resume_from}
        then: [--resume, {inputValue: resume_from}]
    - --epochs
    - {inputValue: epochs}
    - --model-out
    - {outputPath: model}
''')


@dsl.pipeline(name='ct-nodule-detector')
def nodule_pipeline(cohort: str = json.dumps(COHORT),
                    radiology_root: str = 's3://example-radiology/lidc-idri',
                    annotations_key: str = 'annotations/nodules_v2.csv',
                    pretrained_uri: str = 's3://example-models/nodule-det/imagenet-r50.pth',
                    registry_uri: str = 's3://example-models/nodule-det/releases/',
                    min_froc: float = 0.85):
    work = dsl.VolumeOp(name='create-workdir', resource_name='ct-work', size='200Gi',
                        modes=dsl.VOLUME_MODE_RWO)

    with dsl.ParallelFor(cohort) as site:
        conv = convert_op(series_uri=site.series, site=site.site)
        conv.add_pvolumes({'/work': work.volume})

    ann = dsl.ContainerOp(
        name='fetch-annotations',
        image='amazon/aws-cli:2.15.30',
        command=['sh', '-c', 'aws s3 cp "$0" /tmp/annotations.csv'],
        arguments=[f'{radiology_root}/{annotations_key}'],
        file_outputs={'annotations': '/tmp/annotations.csv'},
    )

    tr = train_op(annotations=ann.outputs['annotations'], pretrained_weights=pretrained_uri)
    tr.add_pvolumes({'/work': work.volume})
    tr.after(conv)
    tr.container.add_env_variable(V1EnvVar(
        name='WANDB_API_KEY',
        value_from=V1EnvVarSource(secret_key_ref=V1SecretKeySelector(name='wandb', key='api-key'))))
    tr.set_gpu_limit(2)

    ev = dsl.ContainerOp(
        name='evaluate',
        image='ghcr.io/example/nodule-det:0.11.0',
        command=['python', '-m', 'noduledet.evaluate'],
        arguments=['--model', dsl.InputArgumentPath(tr.outputs['model']),
                   '--holdout', 's3://example-radiology/lidc-idri/holdout/fold5/',
                   '--froc-out', '/tmp/froc.txt'],
        file_outputs={'froc': '/tmp/froc.txt'},
    )

    with dsl.Condition(ev.outputs['froc'] > min_froc):
        dsl.ContainerOp(
            name='register-model',
            image='amazon/aws-cli:2.15.30',
            command=['sh', '-c', 'aws s3 cp "$0" "$1"'],
            arguments=[dsl.InputArgumentPath(tr.outputs['model']), f'{registry_uri}candidate.pt'],
        )


if __name__ == '__main__':
    kfp.compiler.Compiler().compile(nodule_pipeline, os.path.splitext(__file__)[0] + '.yaml')
