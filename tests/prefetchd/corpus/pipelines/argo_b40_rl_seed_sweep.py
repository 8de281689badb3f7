# ruff: noqa
"""Robot-grasping PPO seed sweep with shared node-local cache (Argo via Hera).

Workflow-level volumes (shm emptyDir, simulator configMap, hostPath NVMe
cache) are mounted by several templates; templateDefaults sets retries and a
timeout; a suspend step waits for GPU nodes to scale up; rollouts fan out
with withSequence over a parameter count; the score's output parameter
(valueFrom.path) gates promotion; an http template notifies the team; an
exit handler writes the run status.

Compile: python argo_b40_rl_seed_sweep.py -> argo_b40_rl_seed_sweep.yaml
"""
import os

from hera.workflows import (HTTP, Artifact, ConfigMapVolume, Container, EmptyDirVolume, HostPathVolume,
                            Parameter, S3Artifact, Step, Steps, Suspend, Workflow, models as m)

IMAGE = 'ghcr.io/example/robo-rl:0.14.2'
SHM = m.VolumeMount(name='shm', mount_path='/dev/shm')
CFG = m.VolumeMount(name='sim-config', mount_path='/etc/sim', read_only=True)
CACHE = m.VolumeMount(name='sim-cache', mount_path='/cache')

with Workflow(
    generate_name='grasp-ppo-seeds-',
    entrypoint='sweep',
    on_exit='report-status',
    arguments=[Parameter(name='n_seeds', value='4'),
               Parameter(name='robot', value='franka-v2')],
    volumes=[EmptyDirVolume(name='shm', medium='Memory', size_limit='8Gi'),
             ConfigMapVolume(name='sim-config'),
             HostPathVolume(name='sim-cache', path='/mnt/nvme/sim-cache', type='DirectoryOrCreate')],
    template_defaults=m.Template(timeout='4h', retry_strategy=m.RetryStrategy(limit='2', retry_policy='OnError')),
) as w:
    fetch = Container(
        name='fetch-assets', image='amazon/aws-cli:2.15.30',
        command=['sh', '-c'], args=['cp -r /in/assets/. /cache/assets/'],
        inputs=[S3Artifact(name='assets', path='/in/assets', bucket='example-robotics',
                           key='sim-assets/{{workflow.parameters.robot}}/', endpoint='s3.amazonaws.com')],
        volume_mounts=[CACHE])
    wait = Suspend(name='wait-for-gpus', duration='2m')
    rollout = Container(
        name='rollout', image=IMAGE,
        command=['python', '-m', 'robo_rl.collect'],
        args=['--assets', '/cache/assets', '--config', '/etc/sim/grasp.yaml', '--seed', '{{inputs.parameters.seed}}',
              '--out', '/cache/rollouts/seed-{{inputs.parameters.seed}}'],
        inputs=[Parameter(name='seed')],
        volume_mounts=[SHM, CFG, CACHE])
    score = Container(
        name='score', image=IMAGE,
        command=['python', '-m', 'robo_rl.score'],
        args=['--rollouts', '/cache/rollouts', '--best-out', '/tmp/best.txt'],
        outputs=[Parameter(name='best_return', value_from=m.ValueFrom(path='/tmp/best.txt'))],
        volume_mounts=[CFG, CACHE])
    promote = Container(
        name='promote', image=IMAGE,
        command=['python', '-m', 'robo_rl.promote'],
        args=['--baseline', '/in/baseline', '--rollouts', '/cache/rollouts',
              '--out', 's3://example-robotics/policies/promoted/{{workflow.parameters.robot}}/'],
        inputs=[S3Artifact(name='baseline', path='/in/baseline', bucket='example-robotics',
                           key='policies/ppo-base/v4/', endpoint='s3.amazonaws.com')],
        volume_mounts=[CACHE])
    notify = HTTP(
        name='notify', url='https://hooks.example.com/robotics/sweep-done', method='POST',
        body='{"workflow": "{{workflow.name}}"}', success_condition='response.statusCode == 200')
    report = Container(
        name='report-status', image='curlimages/curl:8.8.0',
        command=['sh', '-c'],
        args=['echo {{workflow.status}} > /cache/last-status'],
        volume_mounts=[CACHE])
    with Steps(name='sweep'):
        fetch(name='fetch')
        wait(name='wait-gpus')
        rollout(name='rollout', arguments={'seed': '{{item}}'},
                with_sequence=m.Sequence(count='{{workflow.parameters.n_seeds}}', start='1'))
        score(name='score')
        promote(name='promote', when='{{steps.score.outputs.parameters.best_return}} > 200')
        notify(name='notify')


if __name__ == '__main__':
    w.to_file(os.path.dirname(os.path.abspath(__file__)), name=os.path.splitext(os.path.basename(__file__))[0])
