# ruff: noqa
"""Regional weather downscaling (ERA5 -> 1 km) as an Argo Workflow DAG (Hera).

- `list-stations` is a `data` template: it only LISTS the station CSV keys
  under s3://wx-obs/stations/alps/ and filters them with an expression.
- `downscale` is a `resource` template that creates a batch/v1 Job from an
  inline manifest; the Job's container reads ERA5 and a DEM from S3 and writes
  to a fixed folder s3://wx-downscale/latest/alps/.
- `tile-qc` fans out with `withSequence` (count from a parameter, format
  `tile-%02d`) over tiles in that fixed folder; retryStrategy and
  activeDeadlineSeconds.
- `bias-correct` is a Python `script` looping with `withParam` over the keys the
  data template listed (input artifact with key `{{item}}`).
- `publish` runs under `when`; `cleanup-jobs` (onExit) is a `resource`
  delete by label selector.

Generate: python argo_b68_weather_downscale.py  -> argo_b68_weather_downscale.yaml
"""
import os

from hera.workflows import (
    DAG,
    Container,
    Data,
    Parameter,
    Resource,
    RetryStrategy,
    S3Artifact,
    Script,
    Task,
    Workflow,
)
from hera.workflows import models as m

IMAGE = 'ghcr.io/example/wx-downscale:2.4.1'

JOB_MANIFEST = """apiVersion: batch/v1
kind: Job
metadata:
  generateName: wx-downscale-
  labels:
    app: wx-downscale
    workflows.argoproj.io/workflow: "{{workflow.name}}"
spec:
  backoffLimit: 3
  template:
    spec:
      restartPolicy: Never
      serviceAccountName: wx-batch
      containers:
        - name: downscale
          image: ghcr.io/example/wx-downscale:2.4.1
          command: ["python", "-m", "wxds.run"]
          args:
            - --era5
            - "{{workflow.parameters.era5_root}}{{workflow.parameters.year}}/"
            - --dem
            - "s3://wx-static/dem/copernicus-glo30/{{workflow.parameters.region}}.tif"
            - --out
            - "s3://wx-downscale/latest/{{workflow.parameters.region}}/"
            - --tiles
            - "{{workflow.parameters.n_tiles}}"
          resources:
            limits:
              nvidia.com/gpu: 1
"""

with Workflow(
    generate_name='wx-downscale-',
    entrypoint='main',
    on_exit='cleanup-jobs',
    service_account_name='wx-runner',
    arguments=[
        Parameter(name='year', value='2023'),
        Parameter(name='region', value='alps'),
        Parameter(name='n_tiles', value='4'),
        Parameter(name='era5_root', value='s3://wx-era5/reanalysis/0.25deg/'),
        Parameter(name='publish', value='true'),
    ],
) as w:
    list_stations = Data(
        name='list-stations',
        source=m.ArtifactPaths(
            name='stations',
            s3=m.S3Artifact(
                bucket='wx-obs',
                key='stations/{{workflow.parameters.region}}/',
                endpoint='s3.eu-central-1.amazonaws.com',
            ),
        ),
        transformations=['filter(data, {# endsWith ".csv"})'],
    )

    downscale = Resource(
        name='downscale-job',
        action='create',
        set_owner_reference=True,
        success_condition='status.succeeded > 0',
        failure_condition='status.failed > 3',
        manifest=JOB_MANIFEST,
        outputs=[Parameter(name='job-name', value_from=m.ValueFrom(json_path='{.metadata.name}'))],
    )

    tile_qc = Container(
        name='tile-qc',
        image=IMAGE,
        command=['python', '-m', 'wxds.qc'],
        args=[
            '--tile', 's3://wx-downscale/latest/{{workflow.parameters.region}}/{{inputs.parameters.tile}}.zarr',
            '--report', '/tmp/qc.json',
        ],
        inputs=[Parameter(name='tile')],
        retry_strategy=RetryStrategy(limit='2', retry_policy='OnFailure'),
        active_deadline_seconds=1800,
    )

    bias_correct = Script(
        name='bias-correct',
        image='ghcr.io/example/wx-downscale:2.4.1',
        command=['python'],
        inputs=[
            Parameter(name='station-key'),
            S3Artifact(
                name='obs',
                path='/data/obs.csv',
                bucket='wx-obs',
                key='{{inputs.parameters.station-key}}',
                endpoint='s3.eu-central-1.amazonaws.com',
            ),
        ],
        source='''import pandas as pd
import xarray as xr

obs = pd.read_csv("/data/obs.csv", parse_dates=["time"])
grid = xr.open_zarr("s3://wx-downscale/latest/{{workflow.parameters.region}}/mosaic.zarr")
station = "{{inputs.parameters.station-key}}".rsplit("/", 1)[-1][:-4]
corr = (grid.t2m.sel(lat=obs.lat[0], lon=obs.lon[0], method="nearest") - obs.t2m.values).mean()
xr.Dataset({"offset": corr}).to_zarr(
    "s3://wx-downscale/corrected/{{workflow.parameters.region}}/{{workflow.name}}/" + station + ".zarr"
)
''',
    )

    publish = Container(
        name='publish',
        image=IMAGE,
        command=['python', '-m', 'wxds.publish'],
        args=[
            '--in', 's3://wx-downscale/corrected/{{workflow.parameters.region}}/{{workflow.name}}/',
            '--to', 's3://wx-products/downscaled/{{workflow.parameters.region}}/{{workflow.parameters.year}}/',
            '--stac-api', 'https://stac.wx.example.org/collections/downscaled-{{workflow.parameters.region}}/items',
        ],
    )

    cleanup = Resource(
        name='cleanup-jobs',
        action='delete',
        flags=['job', '--selector', 'app=wx-downscale,workflows.argoproj.io/workflow={{workflow.name}}',
               '--ignore-not-found'],
    )

    with DAG(name='main'):
        t_list = list_stations(name='list-stations')
        t_down = downscale(name='downscale')
        t_qc = tile_qc(
            name='tile-qc',
            arguments={'tile': '{{item}}'},
            with_sequence=m.Sequence(count='{{workflow.parameters.n_tiles}}', format='tile-%02d'),
            depends='downscale',
        )
        # Task(...) directly: hera's __call__ tries to introspect a string script source under with_param.
        t_bias = Task(
            name='bias-correct',
            template=bias_correct,
            arguments={'station-key': '{{item}}'},
            with_param='{{tasks.list-stations.outputs.result}}',
            depends='list-stations && tile-qc',
        )
        t_pub = publish(
            name='publish',
            when='{{workflow.parameters.publish}} == true',
            depends='bias-correct',
        )

if __name__ == '__main__':
    with open(os.path.splitext(__file__)[0] + '.yaml', 'w') as f:
        f.write(w.to_yaml())
