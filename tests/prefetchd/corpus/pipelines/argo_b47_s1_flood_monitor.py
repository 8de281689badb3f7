# ruff: noqa
"""Sentinel-1 flood monitoring per area of interest (Argo Workflow via Hera).

The areas of interest are a workflow parameter whose default is a JSON list of
{aoi, orbit} maps (withParam on a DAG task). Each AOI runs a steps template
that loops again over the polarisations (withItems), downloading the GRD stack
as an S3 input artifact whose key is built from {{inputs.parameters.aoi}},
the orbit, the year and the polarisation; the per-polarisation scene counts
are aggregated by the speckle-filter step. Water detection runs per shard
(withSequence with format "shard-%03d"), each shard reading its JRC
surface-water reference tile; the shard results are aggregated by a script.

Generate: python argo_b47_s1_flood_monitor.py  -> argo_b47_s1_flood_monitor.yaml
"""
import os

from hera.workflows import DAG, Container, Parameter, S3Artifact, Script, Steps, Workflow
from hera.workflows import models as m

SAR_IMAGE = 'ghcr.io/eo-flood/sarflow:0.14.2'
ENDPOINT = 's3.eu-central-1.amazonaws.com'
CREDS = dict(access_key_secret=m.SecretKeySelector(name='eo-s3-creds', key='accessKey'),
             secret_key_secret=m.SecretKeySelector(name='eo-s3-creds', key='secretKey'))
SCRATCH = m.VolumeMount(name='scratch', mount_path='/scratch')

with Workflow(
    generate_name='s1-flood-monitor-',
    entrypoint='main',
    arguments=[
        Parameter(name='aois', value='[{"aoi": "rhine-delta", "orbit": "037"}, {"aoi": "po-valley", "orbit": "117"}]'),
        Parameter(name='year', value='2024'),
        Parameter(name='n_shards', value='4'),
    ],
    volume_claim_templates=[m.PersistentVolumeClaim(
        metadata=m.ObjectMeta(name='scratch'),
        spec=m.PersistentVolumeClaimSpec(access_modes=['ReadWriteMany'], storage_class_name='cephfs',
                                         resources=m.VolumeResourceRequirements(requests={'storage': m.Quantity('400Gi')})))],
) as w:
    fetch_dem = Container(
        name='fetch-dem', image='ghcr.io/osgeo/gdal:ubuntu-small-3.9.1', command=['gdal_translate'],
        args=['-of', 'COG', '/in/dem.tif', '/out/dem.tif'],
        inputs=[S3Artifact(name='dem', path='/in/dem.tif', bucket='eo-ref', key='copernicus/dem-glo30/europe-30m.tif',
                           endpoint=ENDPOINT, **CREDS)],
        outputs=[m.Artifact(name='dem', path='/out/dem.tif')],
    )
    ingest_pol = Container(
        name='ingest-pol', image=SAR_IMAGE, command=['python', '-m', 'sarflow.calibrate'],
        args=['--grd', '/in/grd', '--aoi', '{{inputs.parameters.aoi}}', '--pol', '{{inputs.parameters.pol}}',
              '--out', '/scratch/{{inputs.parameters.aoi}}/sigma0/{{inputs.parameters.pol}}',
              '--count-file', '/tmp/n_scenes'],
        inputs=[Parameter(name='aoi'), Parameter(name='orbit'), Parameter(name='pol'),
                S3Artifact(name='grd', path='/in/grd', bucket='eo-sar-archive',
                           key='s1-grd/{{inputs.parameters.aoi}}/{{inputs.parameters.orbit}}/{{workflow.parameters.year}}/{{inputs.parameters.pol}}/',
                           endpoint=ENDPOINT, **CREDS)],
        outputs=[Parameter(name='n-scenes', value_from=m.ValueFrom(path='/tmp/n_scenes'))],
        volume_mounts=[SCRATCH],
    )
    speckle = Container(
        name='speckle-filter', image=SAR_IMAGE, command=['python', '-m', 'sarflow.speckle'],
        args=['--stack', '/scratch/{{inputs.parameters.aoi}}/sigma0', '--filter', 'refined-lee',
              '--expect-scenes', '{{inputs.parameters.scene-counts}}',
              '--out', '/scratch/{{inputs.parameters.aoi}}/filtered'],
        inputs=[Parameter(name='aoi'), Parameter(name='scene-counts')],
        volume_mounts=[SCRATCH],
    )
    terrain = Container(
        name='terrain-flatten', image=SAR_IMAGE, command=['python', '-m', 'sarflow.terrain'],
        args=['--dem', '/in/dem.tif', '--root', '/scratch', '--out', '/scratch/flattened'],
        inputs=[m.Artifact(name='dem', path='/in/dem.tif')],
        volume_mounts=[SCRATCH],
    )
    detect = Container(
        name='detect-water', image=SAR_IMAGE, command=['python', '-m', 'sarflow.water'],
        args=['--model', '/models/model.onnx', '--reference', '/ref/occurrence.tif',
              '--tiles', '/scratch/flattened', '--shard', '{{inputs.parameters.shard}}',
              '--out', '/scratch/water/{{inputs.parameters.shard}}.tif', '--frac-file', '/tmp/water_frac'],
        inputs=[Parameter(name='shard'),
                S3Artifact(name='reference', path='/ref/occurrence.tif', bucket='eo-ref',
                           key='jrc-gsw/occurrence-v1.4/{{inputs.parameters.shard}}.tif', endpoint=ENDPOINT, **CREDS),
                S3Artifact(name='model', path='/models/model.onnx', bucket='eo-models',
                           key='unet-s1-water/v3/model.onnx', endpoint=ENDPOINT, **CREDS)],
        outputs=[Parameter(name='water-frac', value_from=m.ValueFrom(path='/tmp/water_frac'))],
        volume_mounts=[SCRATCH],
    )
    merge = Script(
        name='merge-masks', image='ghcr.io/osgeo/gdal:ubuntu-small-3.9.1', command=['python3'],
        source=(
            'import json, subprocess\n'
            'fracs = [float(x) for x in json.loads(\'{{inputs.parameters.fractions}}\')]\n'
            'subprocess.run("gdalbuildvrt /tmp/water.vrt /scratch/water/*.tif", shell=True, check=True)\n'
            'subprocess.run(["gdal_translate", "-of", "COG", "/tmp/water.vrt", "/out/flood.tif"], check=True)\n'
            'open("/tmp/max_frac", "w").write(str(max(fracs)))\n'),
        inputs=[Parameter(name='fractions')],
        outputs=[Parameter(name='max-frac', value_from=m.ValueFrom(path='/tmp/max_frac')),
                 S3Artifact(name='flood-map', path='/out/flood.tif', bucket='eo-flood-products',
                            key='maps/{{workflow.parameters.year}}/{{workflow.name}}/flood.tif',
                            endpoint=ENDPOINT, archive=m.ArchiveStrategy(none=m.NoneStrategy()), **CREDS)],
        volume_mounts=[SCRATCH],
    )
    publish = Container(
        name='publish-stac', image='curlimages/curl:8.8.0', command=['sh', '-c'],
        args=['curl -fsS -X POST https://stac.eo-flood.internal/collections/s1-flood/items '
              '-H "Content-Type: application/json" '
              '-d "{\\"href\\": \\"s3://eo-flood-products/maps/{{workflow.parameters.year}}/{{workflow.name}}/flood.tif\\"}"'],
    )

    with Steps(name='aoi-stack', inputs=[Parameter(name='aoi'), Parameter(name='orbit')]) as aoi_stack:
        ingest_pol(name='ingest', arguments={'aoi': '{{inputs.parameters.aoi}}', 'orbit': '{{inputs.parameters.orbit}}',
                                             'pol': '{{item}}'},
                   with_items=['VV', 'VH'])
        speckle(name='speckle', arguments={'aoi': '{{inputs.parameters.aoi}}',
                                           'scene-counts': '{{steps.ingest.outputs.parameters.n-scenes}}'})

    with DAG(name='main'):
        d = fetch_dem(name='fetch-dem')
        a = aoi_stack(name='per-aoi', arguments={'aoi': '{{item.aoi}}', 'orbit': '{{item.orbit}}'},
                      with_param='{{workflow.parameters.aois}}')
        t = terrain(name='terrain-flatten',
                    arguments=[m.Artifact(name='dem', from_='{{tasks.fetch-dem.outputs.artifacts.dem}}')])
        x = detect(name='detect-water', arguments={'shard': '{{item}}'},
                   with_sequence=m.Sequence(count='{{workflow.parameters.n_shards}}', format='shard-%03d'))
        g = merge(name='merge-masks', arguments={'fractions': '{{tasks.detect-water.outputs.parameters.water-frac}}'})
        p = publish(name='publish-stac', when='{{tasks.merge-masks.outputs.parameters.max-frac}} > 0.05')
        [d, a] >> t >> x >> g >> p


if __name__ == '__main__':
    with open(os.path.splitext(__file__)[0] + '.yaml', 'w') as f:
        f.write(w.to_yaml())
