# ruff: noqa
"""Argo (Hera, blind test r4): `change-detect-lib`, a WorkflowTemplate for aerial-imagery
change detection (NAIP tiles of two years over an area of interest), used on its own and
through a step-level templateRef by argo_r4_change_run.yaml.

Idioms: a DAG template whose two fetch tasks reach the tile fetcher through a templateRef to
this same WorkflowTemplate (a templateRef chain once the run refers to the DAG), s5cmd with a
global option and a glob built from three inputs, output artifacts to the default artifact
repository passed on with `from`, a script input whose default is a workflow parameter and
whose value is opened with fsspec, `--aoi-geojson` / `--output-geoparquet`,
activeDeadlineSeconds, podSpecPatch.

Generate: /tmp/hera/bin/python argo_r4_change_lib.py -> argo_r4_change_lib.yaml
"""
import os

from hera.workflows import DAG, Artifact, Container, Parameter, Script, Task, WorkflowTemplate
from hera.workflows import models as m

GEO = 'ghcr.io/acme-geo/change-detect:2.3.0'

DETECT = '''
import fsspec
import torch
from changedet.infer import predict_mask  # shared helper in the image

with fsspec.open("{{inputs.parameters.model-uri}}", "rb") as f:
    model = torch.jit.load(f, map_location="cuda")
predict_mask(model, before="/in/before", after="/in/after", out="/out/mask.tif",
             aoi="{{inputs.parameters.aoi}}", threshold=0.45)
'''

with WorkflowTemplate(
    name='change-detect-lib',
    entrypoint='main',
    arguments=[
        Parameter(name='state', value='ca'),
        Parameter(name='aoi', value='sonoma'),
        Parameter(name='year-a', value='2020'),
        Parameter(name='year-b', value='2022'),
        Parameter(name='model-uri', value='s3://acme-aerial-models/changeformer/v2/model.pt'),
    ],
) as w:
    fetch_tiles = Container(
        name='fetch-tiles', image='peakcom/s5cmd:v2.2.2',
        inputs=[Parameter(name='state'), Parameter(name='year'), Parameter(name='aoi')],
        command=['/s5cmd'],
        args=['--numworkers', '16', 'cp',
              's3://acme-aerial/naip/{{inputs.parameters.state}}/{{inputs.parameters.year}}/{{inputs.parameters.aoi}}/*.tif',
              '/scratch/tiles/'],
        outputs=[Artifact(name='tiles', path='/scratch/tiles')],
        volume_mounts=[m.VolumeMount(name='scratch', mount_path='/scratch')],
        volumes=[m.Volume(name='scratch', empty_dir=m.EmptyDirVolumeSource(size_limit='200Gi'))],
        active_deadline_seconds=5400,
    )
    detect = Script(
        name='detect-changes', image=GEO, command=['python'], source=DETECT,
        inputs=[Artifact(name='before', path='/in/before'), Artifact(name='after', path='/in/after'),
                Parameter(name='aoi'),
                Parameter(name='model-uri', default='{{workflow.parameters.model-uri}}')],
        outputs=[Artifact(name='mask', path='/out/mask.tif')],
        pod_spec_patch='{"nodeSelector": {"acme.io/gpu-class": "a10g"}}',
        resources=m.ResourceRequirements(limits={'nvidia.com/gpu': m.Quantity('1')}),
    )
    vectorize = Container(
        name='vectorize', image=GEO,
        inputs=[Artifact(name='mask', path='/in/mask.tif'), Parameter(name='aoi')],
        command=['python', '-m', 'changedet.vectorize'],
        args=['--mask', '/in/mask.tif',
              '--aoi-geojson', 's3://acme-aerial/aoi/{{inputs.parameters.aoi}}.geojson',
              '--min-area-m2', '50',
              '--output-geoparquet',
              's3://acme-aerial-derived/changes/{{workflow.parameters.year-b}}/{{inputs.parameters.aoi}}.parquet'],
    )
    with DAG(name='change-pipeline', inputs=[Parameter(name='state'), Parameter(name='aoi')]) as pipeline:
        fa = Task(name='fetch-a', template_ref=m.TemplateRef(name='change-detect-lib', template='fetch-tiles'),
                  arguments={'state': '{{inputs.parameters.state}}', 'year': '{{workflow.parameters.year-a}}',
                             'aoi': '{{inputs.parameters.aoi}}'})
        fb = Task(name='fetch-b', template_ref=m.TemplateRef(name='change-detect-lib', template='fetch-tiles'),
                  arguments={'state': '{{inputs.parameters.state}}', 'year': '{{workflow.parameters.year-b}}',
                             'aoi': '{{inputs.parameters.aoi}}'})
        d = detect(name='detect', arguments=[
            m.Artifact(name='before', from_='{{tasks.fetch-a.outputs.artifacts.tiles}}'),
            m.Artifact(name='after', from_='{{tasks.fetch-b.outputs.artifacts.tiles}}'),
            Parameter(name='aoi', value='{{inputs.parameters.aoi}}')])
        v = vectorize(name='vectorize', arguments=[
            m.Artifact(name='mask', from_='{{tasks.detect.outputs.artifacts.mask}}'),
            Parameter(name='aoi', value='{{inputs.parameters.aoi}}')])
        [fa, fb] >> d >> v
    with DAG(name='main'):
        pipeline(name='change', arguments={'state': '{{workflow.parameters.state}}', 'aoi': '{{workflow.parameters.aoi}}'})

if __name__ == '__main__':
    with open(os.path.splitext(__file__)[0] + '.yaml', 'w') as f:
        f.write(w.to_yaml())
