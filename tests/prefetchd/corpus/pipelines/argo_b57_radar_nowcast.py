# ruff: noqa
"""Hourly radar precipitation nowcast (Hera -> Argo Workflow).

Radar composites are synced from S3 into a workflow-scoped fusecache claim
(volumeClaimTemplate); a climatology archive sits on an existing claim named
by a workflow parameter, mounted read-only with a sub-path; the NWP boundary
field comes in as an S3 input artifact; one forecast per lead time
(withItems); a blend step reads every forecast; a verification step reads
gauge data from S3; products are published to S3 when verification passes.

Generate: python argo_b57_radar_nowcast.py  -> argo_b57_radar_nowcast.yaml
"""
import os

from hera.workflows import DAG, Container, Parameter, S3Artifact, Script, Workflow
from hera.workflows import models as m

IMAGE = 'ghcr.io/umbrella-met/nowcast:2024.6.1'
WORK = m.VolumeMount(name='radar-work', mount_path='/work')
CLIM = m.VolumeMount(name='climatology', mount_path='/clim', sub_path='dwd-radolan/2013-2023', read_only=True)

with Workflow(
    generate_name='radar-nowcast-',
    entrypoint='nowcast',
    arguments=[Parameter(name='radar-uri', value='s3://umbrella-radar/radolan/rw/latest-6h/'),
               Parameter(name='climatology-claim', value='radar-climatology'),
               Parameter(name='gauges-uri', value='s3://umbrella-obs/gauges/de/last-24h.parquet')],
    volume_claim_templates=[m.PersistentVolumeClaim(
        metadata=m.ObjectMeta(name='radar-work'),
        spec=m.PersistentVolumeClaimSpec(access_modes=['ReadWriteMany'], storage_class_name='fusecache-s3',
                                         resources=m.VolumeResourceRequirements(requests={'storage': m.Quantity('40Gi')})))],
    volumes=[m.Volume(name='climatology', persistent_volume_claim=m.PersistentVolumeClaimVolumeSource(
        claim_name='{{workflow.parameters.climatology-claim}}', read_only=True))],
) as w:
    sync = Container(
        name='sync-radar', image='amazon/aws-cli:2.15.30', command=['aws', 's3', 'sync'],
        args=['{{workflow.parameters.radar-uri}}', '/work/radar/'], volume_mounts=[WORK])
    nwp = Container(
        name='stage-nwp', image=IMAGE, command=['python', '-m', 'nowcast.stage_nwp'],
        args=['--grib', '/in/icon-d2.grib2', '--out', '/work/nwp/'],
        inputs=[S3Artifact(name='icon', path='/in/icon-d2.grib2', bucket='umbrella-nwp',
                           key='icon-d2/latest/tot_prec.grib2', endpoint='s3.eu-central-1.amazonaws.com')],
        volume_mounts=[WORK])
    forecast = Container(
        name='forecast-lead', image=IMAGE, command=['python', '-m', 'nowcast.pysteps_run'],
        args=['--radar', '/work/radar/', '--nwp', '/work/nwp/', '--clim', '/clim/monthly_means.nc',
              '--lead', '{{inputs.parameters.lead}}', '--out', '/work/fc/{{inputs.parameters.lead}}.nc'],
        inputs=[Parameter(name='lead')], volume_mounts=[WORK, CLIM])
    blend = Container(
        name='blend', image=IMAGE, command=['python', '-m', 'nowcast.blend'],
        args=['--forecasts', '/work/fc/', '--clim', '/clim/monthly_means.nc', '--out', '/work/blend.nc'],
        volume_mounts=[WORK, CLIM])
    verify = Script(
        name='verify', image=IMAGE, command=['python'],
        source='import pandas as pd, xarray as xr\n'
               'g = pd.read_parquet("{{workflow.parameters.gauges-uri}}")\n'
               'f = xr.open_dataset("/work/blend.nc")\n'
               'print("ok" if len(g) > 0 and f.sizes["time"] > 0 else "bad")\n',
        volume_mounts=[WORK])
    publish = Container(
        name='publish', image='amazon/aws-cli:2.15.30', command=['aws', 's3', 'cp'],
        args=['/work/blend.nc', 's3://umbrella-products/nowcast/de/latest.nc'], volume_mounts=[WORK])
    with DAG(name='nowcast'):
        a = sync(name='sync-radar')
        b = nwp(name='stage-nwp')
        c = forecast(name='forecast', arguments={'lead': '{{item}}'}, with_items=['30', '60', '90', '120'])
        d = blend(name='blend')
        e = verify(name='verify')
        f = publish(name='publish', when='{{tasks.verify.outputs.result}} == ok')
        [a, b] >> c >> d >> e >> f

if __name__ == '__main__':
    with open(os.path.splitext(__file__)[0] + '.yaml', 'w') as fh:
        fh.write(w.to_yaml())
