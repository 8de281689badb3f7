"""Forest-change detection on Sentinel-2 scenes as an Argo Workflow DAG (Hera).

How the datasets are named here:
- fetch-aoi: S3 input artifact on an in-cluster MinIO (endpoint minio.minio.svc:9000,
  insecure), key with spaces.
- pull-scenes: withItems over dicts carrying bucket, key and epoch separately; the container
  joins them as s3://{{inputs.parameters.bucket}}/{{inputs.parameters.key}} for `aws s3 sync`.
- detect-change: HTTP input artifact whose URL is a virtual-hosted-style S3 URL (an object-store
  read), an existing read-only PVC read at a path joined from two workflow parameters, and the
  volumeClaimTemplate work volume.
- reference-labels: script globbing s3://eo-labels/deforestation/2024/*.gpkg through s3fs with
  client_kwargs endpoint_url from a workflow parameter (MinIO).
- annotate-places: HTTP artifact from download.geonames.org (a web server, not a dataset).
- publish (when): S3 output artifact (a write); notify is the onExit handler.

Generate: python argo_b64_eo_change.py  -> argo_b64_eo_change.yaml
"""
# ruff: noqa
import os

from hera.workflows import DAG, Container, HTTPArtifact, Parameter, S3Artifact, Script, Workflow
from hera.workflows import models as m

IMAGE = 'ghcr.io/example/eo-change:0.9.1'
WORK = m.VolumeMount(name='eo-work', mount_path='/work')
ARCHIVE = m.VolumeMount(name='archive', mount_path='/archive', read_only=True)
MINIO_CREDS = dict(access_key_secret=m.SecretKeySelector(name='minio-creds', key='accesskey'),
                   secret_key_secret=m.SecretKeySelector(name='minio-creds', key='secretkey'))

with Workflow(
    generate_name='eo-forest-change-',
    entrypoint='main',
    on_exit='notify',
    arguments=[Parameter(name='region', value='cascadia'),
               Parameter(name='baseline_year', value='2019'),
               Parameter(name='s3_endpoint', value='http://minio.minio.svc:9000'),
               Parameter(name='labels_glob', value='s3://eo-labels/deforestation/2024/*.gpkg')],
    volumes=[m.Volume(name='archive', persistent_volume_claim=m.PersistentVolumeClaimVolumeSource(
        claim_name='eo-archive', read_only=True))],
    volume_claim_templates=[m.PersistentVolumeClaim(
        metadata=m.ObjectMeta(name='eo-work'),
        spec=m.PersistentVolumeClaimSpec(access_modes=['ReadWriteOnce'],
                                         resources=m.VolumeResourceRequirements(requests={'storage': m.Quantity('300Gi')})))],
) as w:
    fetch_aoi = Container(
        name='fetch-aoi', image='busybox:1.36', command=['sh', '-c'],
        args=['cp /in/aoi.geojson /work/aoi.geojson'],
        inputs=[S3Artifact(name='aoi', path='/in/aoi.geojson', bucket='eo-aoi',
                           key='regions/Pacific Northwest/aoi.geojson', endpoint='minio.minio.svc:9000',
                           insecure=True, **MINIO_CREDS)],
        volume_mounts=[WORK],
    )
    pull_scene = Container(
        name='pull-scene', image='amazon/aws-cli:2.15.30', command=['aws', 's3', 'sync', '--no-sign-request',
                                                                     '--region', 'us-west-2'],
        args=['s3://{{inputs.parameters.bucket}}/{{inputs.parameters.key}}',
              '/work/scenes/{{inputs.parameters.epoch}}'],
        inputs=[Parameter(name='bucket'), Parameter(name='key'), Parameter(name='epoch')],
        volume_mounts=[WORK],
    )
    detect = Script(
        name='detect-change', image=IMAGE, command=['python'],
        inputs=[HTTPArtifact(name='dem', path='/in/dem.tif',
                             url='https://copernicus-dem-30m.s3.eu-central-1.amazonaws.com/'
                                 'Copernicus_DSM_COG_10_N47_00_W122_00_DEM/Copernicus_DSM_COG_10_N47_00_W122_00_DEM.tif')],
        source=(
            'import os\n'
            'from eo_change import detect\n'
            'baseline = os.path.join("/archive", "{{workflow.parameters.region}}", "{{workflow.parameters.baseline_year}}")\n'
            'detect(before="/work/scenes/2023", after="/work/scenes/2024", baseline=baseline,\n'
            '       aoi="/work/aoi.geojson", dem="/in/dem.tif", out="/work/masks")\n'
        ),
        volume_mounts=[WORK, ARCHIVE],
    )
    ref_labels = Script(
        name='reference-labels', image=IMAGE, command=['python'],
        source=(
            'import os, s3fs\n'
            'fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": "{{workflow.parameters.s3_endpoint}}"})\n'
            'os.makedirs("/work/labels", exist_ok=True)\n'
            'for p in fs.glob("{{workflow.parameters.labels_glob}}"):\n'
            '    fs.get(p, os.path.join("/work/labels", os.path.basename(p)))\n'
        ),
        env=[m.EnvVar(name='AWS_ACCESS_KEY_ID', value_from=m.EnvVarSource(
                 secret_key_ref=m.SecretKeySelector(name='minio-creds', key='accesskey'))),
             m.EnvVar(name='AWS_SECRET_ACCESS_KEY', value_from=m.EnvVarSource(
                 secret_key_ref=m.SecretKeySelector(name='minio-creds', key='secretkey')))],
        volume_mounts=[WORK],
    )
    score = Script(
        name='score', image=IMAGE, command=['python'],
        source=(
            'from eo_change import f1\n'
            'print(round(f1("/work/masks", "/work/labels"), 3))\n'
        ),
        volume_mounts=[WORK],
    )
    annotate = Container(
        name='annotate-places', image=IMAGE, command=['python', '-m', 'eo_change.annotate'],
        args=['--masks', '/work/masks', '--gazetteer', '/in/cities15000.zip', '--out', '/work/report'],
        inputs=[HTTPArtifact(name='gazetteer', path='/in/cities15000.zip',
                             url='https://download.geonames.org/export/dump/cities15000.zip')],
        volume_mounts=[WORK],
    )
    publish = Container(
        name='publish', image='busybox:1.36', command=['sh', '-c'],
        args=['mkdir -p /out && cp -r /work/masks /work/report /out/'],
        outputs=[S3Artifact(name='products', path='/out', bucket='eo-products',
                            key='forest-change/{{workflow.parameters.region}}/{{workflow.name}}.tgz',
                            endpoint='s3.us-west-2.amazonaws.com', region='us-west-2')],
        volume_mounts=[WORK],
    )
    notify = Container(
        name='notify', image='curlimages/curl:8.8.0', command=['sh', '-c'],
        args=['echo eo-forest-change {{workflow.status}}'],
    )
    with DAG(name='main'):
        a = fetch_aoi(name='fetch-aoi')
        p = pull_scene(name='pull-scenes',
                       arguments={'bucket': '{{item.bucket}}', 'key': '{{item.key}}', 'epoch': '{{item.epoch}}'},
                       with_items=[{'bucket': 'sentinel-cogs', 'key': 'sentinel-s2-l2a-cogs/10/T/EK/2023/7/',
                                    'epoch': '2023'},
                                   {'bucket': 'sentinel-cogs', 'key': 'sentinel-s2-l2a-cogs/10/T/EK/2024/7/',
                                    'epoch': '2024'}])
        d = detect(name='detect-change', depends='fetch-aoi && pull-scenes.Succeeded')
        r = ref_labels(name='reference-labels')
        s = score(name='score', depends='detect-change && reference-labels')
        n = annotate(name='annotate-places', depends='detect-change')
        publish(name='publish', depends='score && annotate-places',
                when='{{tasks.score.outputs.result}} > 0.7')

if __name__ == '__main__':
    with open(os.path.splitext(__file__)[0] + '.yaml', 'w') as f:
        f.write(w.to_yaml())
