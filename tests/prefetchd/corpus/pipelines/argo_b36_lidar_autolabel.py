# ruff: noqa
"""Nightly lidar auto-labelling for one drive date (Argo Workflow via Hera).

A `data` template lists the day's drive manifests in the raw-sweep bucket and
filters them with an expression; a resource template creates a scratch PVC
(its name read back with a jqFilter); per drive, a bash script syncs the
lidar sensors of the drive (a bash array over sensor names); a `case` picks
the rig calibration prefix from the sensor-kit parameter; CenterPoint
auto-labels all frames on GPUs (semaphore on the GPU pool, retries on OOM
kills through a retryStrategy expression); a QA step downloads the day's
golden labels with a `while read` loop over `aws s3 ls`, and has an exit hook
that notifies the review queue; passing labels are published; the scratch
PVC is deleted on exit. The main DAG runs at most 4 tasks at a time.

Generate: python argo_b36_lidar_autolabel.py  -> argo_b36_lidar_autolabel.yaml
"""
# ruff: noqa
import os

from hera.workflows import (DAG, Container, Data, ExistingVolume, Parameter, Resource, RetryStrategy, S3Artifact,
                            Script, Task, Workflow)
from hera.workflows import models as m

AWS = 'amazon/aws-cli:2.15.30'
AL = 'ghcr.io/example/centerpoint-autolabel:7.0.2'

PVC_MANIFEST = """apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: '{{workflow.name}}-frames'
  labels:
    app: lidar-autolabel
spec:
  accessModes: [ReadWriteMany]
  storageClassName: fsx-lustre
  resources:
    requests:
      storage: 2Ti
"""

DECODE = r'''set -euo pipefail
KEY="{{inputs.parameters.manifest}}"
DRIVE_PREFIX="s3://av-raw-sweeps/${KEY%/manifest.json}"
DRIVE="$(basename "${DRIVE_PREFIX}")"
SENSORS=(lidar_top lidar_front_left lidar_front_right)
for s in "${SENSORS[@]}"; do
  aws s3 sync --only-show-errors "${DRIVE_PREFIX}/${s}/" "/frames/${DRIVE}/${s}/"
done
echo "${DRIVE}: ${#SENSORS[@]} sensors synced" >&2
'''

CALIB = r'''set -euo pipefail
case "{{workflow.parameters.sensor_kit}}" in
  v4) CALIB_URI="s3://av-calib/sensor-rigs/rig-v4/" ;;
  v5) CALIB_URI="s3://av-calib/sensor-rigs/rig-v5/" ;;
  *)  echo "unknown sensor kit {{workflow.parameters.sensor_kit}}" >&2; exit 2 ;;
esac
aws s3 cp --recursive --only-show-errors "$CALIB_URI" /frames/calib/
'''

QA = r'''set -euo pipefail
GOLDEN="s3://av-labels-review/golden/{{workflow.parameters.drive_date}}/"
mkdir -p /tmp/golden
aws s3 ls "$GOLDEN" | awk '{print $4}' | while read -r f; do
  [ -n "$f" ] && aws s3 cp --only-show-errors "${GOLDEN}${f}" "/tmp/golden/${f}"
done
python -m autolabel.compare --golden /tmp/golden --pred /frames/labels --min-iou 0.7 --verdict /tmp/verdict
'''

with Workflow(
    generate_name='lidar-autolabel-',
    entrypoint='main',
    on_exit='cleanup-scratch',
    arguments=[Parameter(name='drive_date', value='2024-06-14'),
               Parameter(name='sensor_kit', value='v5'),
               Parameter(name='label_model_key', value='autolabel/centerpoint-v7/'),
               Parameter(name='review_queue', value='lidar-qa')],
    service_account_name='av-pipelines',
) as w:
    frames = ExistingVolume(name='frames', claim_name='{{inputs.parameters.claim}}', mount_path='/frames')

    list_drives = Data(
        name='list-drives',
        source=S3Artifact(name='drives', bucket='av-raw-sweeps', key='drives/{{workflow.parameters.drive_date}}/',
                          endpoint='s3.amazonaws.com'),
        transformations=['filter(data, {# endsWith "manifest.json"})'],
    )
    create_scratch = Resource(
        name='create-scratch', action='create', manifest=PVC_MANIFEST,
        outputs=[Parameter(name='claim', value_from=m.ValueFrom(jq_filter='.metadata.name')),
                 Parameter(name='storage', value_from=m.ValueFrom(jq_filter='.spec.resources.requests.storage'))],
    )
    decode = Script(
        name='decode-drive', image=AWS, command=['bash'], source=DECODE,
        inputs=[Parameter(name='manifest'), Parameter(name='claim')], volumes=[frames],
    )
    calib = Script(
        name='fetch-calib', image=AWS, command=['bash'], source=CALIB,
        inputs=[Parameter(name='claim')], volumes=[frames],
    )
    autolabel = Container(
        name='autolabel', image=AL, command=['python', '-m', 'autolabel.run'],
        args=['--frames', '/frames', '--calib', '/frames/calib', '--model', '/model', '--out', '/frames/labels',
              '--batch-size', '8'],
        inputs=[Parameter(name='claim'),
                S3Artifact(name='model', path='/model', bucket='av-models',
                           key='{{workflow.parameters.label_model_key}}', endpoint='s3.amazonaws.com')],
        volumes=[frames],
        resources=m.ResourceRequirements(limits={'nvidia.com/gpu': '4'}),
        retry_strategy=RetryStrategy(limit=3, expression='asInt(lastRetry.exitCode) == 137',
                                     backoff=m.Backoff(duration='2m', factor=2)),
        synchronization=m.Synchronization(semaphores=[m.SemaphoreRef(
            config_map_key_ref=m.ConfigMapKeySelector(name='gpu-semaphores', key='a100-nodes'))]),
    )
    qa = Script(
        name='qa-sample', image=AL, command=['bash'], source=QA,
        inputs=[Parameter(name='claim')], volumes=[frames],
        outputs=[Parameter(name='verdict', value_from=m.ValueFrom(path='/tmp/verdict'))],
    )
    notify = Container(
        name='notify-qa', image='curlimages/curl:8.8.0', command=['sh', '-c'],
        args=['curl -sf -X POST "http://review-queue.av-tools.svc/api/v1/queues/'
              '{{workflow.parameters.review_queue}}/batches" -d "workflow={{workflow.name}}"'],
    )
    publish = Container(
        name='publish-labels', image=AWS, command=['aws', 's3', 'sync', '--only-show-errors'],
        args=['/frames/labels/', 's3://av-labels/autolabel/{{workflow.parameters.drive_date}}/'],
        inputs=[Parameter(name='claim')], volumes=[frames],
    )
    cleanup = Resource(
        name='cleanup-scratch', action='delete', flags=['--ignore-not-found'],
        manifest="apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: '{{workflow.name}}-frames'\n",
    )

    claim = {'claim': '{{tasks.create-scratch.outputs.parameters.claim}}'}
    with DAG(name='main', parallelism=4):
        t_list = list_drives(name='list-drives')
        t_pvc = create_scratch(name='create-scratch')
        # a Task object: calling a Script with a string source and with_param trips hera 7.1.0
        t_dec = Task(name='decode-drive', template=decode, arguments=dict(claim, manifest='{{item}}'),
                     with_param='{{tasks.list-drives.outputs.result}}')
        t_cal = calib(name='fetch-calib', arguments=claim)
        t_al = autolabel(name='autolabel', arguments=claim)
        t_qa = qa(name='qa-sample', arguments=claim,
                  hooks={'exit': m.LifecycleHook(template='notify-qa')})
        t_pub = publish(name='publish-labels', arguments=claim,
                        when='{{tasks.qa-sample.outputs.parameters.verdict}} == pass')
        [t_list, t_pvc] >> t_dec
        t_pvc >> t_cal
        [t_dec, t_cal] >> t_al >> t_qa >> t_pub

if __name__ == '__main__':
    with open(os.path.splitext(__file__)[0] + '.yaml', 'w') as f:
        f.write(w.to_yaml())
