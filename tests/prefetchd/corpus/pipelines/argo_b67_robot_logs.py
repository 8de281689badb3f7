# ruff: noqa
"""Robot-fleet log mining as an Argo Workflow (Hera): DAG -> steps -> container.

The bag prefix is a workflow parameter built from two others; a script
resolves the fleet's map version and exports it with globalName; the
per-robot steps template is fanned out with withParam over a JSON-list
parameter and forwards robot, sensor (enum, default) and map version to the
container templates, whose S3 input artifacts build their keys from those
inputs. The summary script reads an incident log whose URI is substituted
into its source and writes a report.

Generate: python argo_b67_robot_logs.py  -> argo_b67_robot_logs.yaml
"""
import os

from hera.workflows import (DAG, Artifact, Container, Parameter, S3Artifact, Script, Steps, Workflow)
from hera.workflows import models as m

IMAGE = 'ghcr.io/example/rosbag-tools:0.8.3'

with Workflow(
    generate_name='robot-log-mining-',
    entrypoint='main',
    arguments=[
        Parameter(name='fleet_bucket', value='example-robotics'),
        Parameter(name='fleet', value='warehouse-b'),
        Parameter(name='day', value='2024-07-01'),
        Parameter(name='bag_prefix', value='rosbags/{{workflow.parameters.fleet}}/{{workflow.parameters.day}}/'),
        Parameter(name='robots', value='["amr-01", "amr-07"]'),
    ],
) as w:
    resolve_map = Script(
        name='resolve-map-version',
        image='python:3.11-slim',
        command=['python'],
        inputs=[Parameter(name='fleet')],
        outputs=[Parameter(name='map_version', value_from=m.ValueFrom(path='/tmp/map_version'),
                           global_name='map_version')],
        source=(
            'versions = {"warehouse-a": "v41", "warehouse-b": "v42"}\n'
            'with open("/tmp/map_version", "w") as f:\n'
            '    f.write(versions["{{inputs.parameters.fleet}}"])\n'
        ),
    )

    decode = Container(
        name='decode-bag',
        image=IMAGE,
        command=['python', '-m', 'rosbag_tools.decode'],
        args=['--bag', '/data/in.bag', '--topic', '/{{inputs.parameters.sensor}}', '--out', '/tmp/frames'],
        inputs=[
            Parameter(name='robot'),
            Parameter(name='sensor', default='camera', enum=['lidar', 'imu', 'camera']),
            S3Artifact(name='bag', path='/data/in.bag', bucket='{{workflow.parameters.fleet_bucket}}',
                       key='{{workflow.parameters.bag_prefix}}{{inputs.parameters.robot}}/{{inputs.parameters.sensor}}.bag',
                       endpoint='s3.amazonaws.com'),
        ],
        outputs=[Artifact(name='frames', path='/tmp/frames')],
    )

    detect = Container(
        name='detect-anomalies',
        image=IMAGE,
        command=['python', '-m', 'rosbag_tools.anomalies'],
        args=['--frames', '/in/frames', '--map', '/in/map.pgm', '--robot', '{{inputs.parameters.robot}}',
              '--out', '/tmp/anomalies.json'],
        inputs=[
            Parameter(name='robot'),
            Parameter(name='map_version'),
            Artifact(name='frames', path='/in/frames'),
            S3Artifact(name='map', path='/in/map.pgm', bucket='{{workflow.parameters.fleet_bucket}}',
                       key='maps/{{workflow.parameters.fleet}}/{{inputs.parameters.map_version}}/occupancy.pgm',
                       endpoint='s3.amazonaws.com'),
        ],
        outputs=[Artifact(name='anomalies', path='/tmp/anomalies.json')],
    )

    summarize = Script(
        name='summarize',
        image='ghcr.io/example/pandas-s3:2.2.2',
        command=['python'],
        inputs=[
            Parameter(name='incidents_uri'),
            Parameter(name='report_uri', default='s3://example-robotics-reports/anomalies/latest.html'),
        ],
        source=(
            'import pandas as pd\n'
            'incidents = pd.read_json("{{inputs.parameters.incidents_uri}}", lines=True)\n'
            'html = incidents.groupby("robot").size().to_frame("n").to_html()\n'
            'pd.Series([html]).to_csv("{{inputs.parameters.report_uri}}", index=False, header=False)\n'
        ),
    )

    with Steps(name='per-robot', inputs=[Parameter(name='robot'), Parameter(name='map_version'),
                                         Parameter(name='sensor', default='lidar',
                                                   enum=['lidar', 'imu', 'camera'])]) as per_robot:
        d = decode(name='decode', arguments={'robot': '{{inputs.parameters.robot}}',
                                             'sensor': '{{inputs.parameters.sensor}}'})
        detect(name='detect', arguments=[
            Parameter(name='robot', value='{{inputs.parameters.robot}}'),
            Parameter(name='map_version', value='{{inputs.parameters.map_version}}'),
            d.get_artifact('frames').with_name('frames'),
        ])

    with DAG(name='main'):
        rm = resolve_map(name='resolve-map', arguments={'fleet': '{{workflow.parameters.fleet}}'})
        robots = per_robot(name='robots',
                           arguments={'robot': '{{item}}',
                                      'map_version': '{{workflow.outputs.parameters.map_version}}'},
                           with_param='{{workflow.parameters.robots}}')
        sm = summarize(name='summarize',
                       arguments={'incidents_uri': 's3://example-robotics/incidents/{{workflow.parameters.day}}.jsonl'})
        rm >> robots >> sm

if __name__ == '__main__':
    with open(os.path.splitext(__file__)[0] + '.yaml', 'w') as f:
        f.write(w.to_yaml())
