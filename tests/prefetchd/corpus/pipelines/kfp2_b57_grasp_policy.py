# ruff: noqa
"""Grasp-policy training for a UR5e arm on a fusecache scratch volume (KFP v2).

Robot episodes are synced from S3 into a per-run PVC of the caching storage
class, camera calibration comes from an existing claim named by a parameter
(mounted with a per-arm sub-path), a simulator rollout set is read straight
from S3, and the scratch claim is deleted at the end.

Compile: python kfp2_b57_grasp_policy.py  -> kfp2_b57_grasp_policy.yaml
"""
import os

from kfp import compiler, dsl, kubernetes
from kfp.dsl import Input, Metrics, Model, Output

IMAGE = 'ghcr.io/acme-robotics/grasp-train:2.4.1'


@dsl.container_component
def sync_episodes(episodes_uri: str):
    return dsl.ContainerSpec(image='amazon/aws-cli:2.15.30',
                             command=['aws', 's3', 'sync', '--only-show-errors'],
                             args=[episodes_uri, '/scratch/episodes/'])


@dsl.component(base_image=IMAGE)
def index_episodes(episodes_dir: str, calib_dir: str) -> int:
    import glob, json, os
    files = sorted(glob.glob(os.path.join(episodes_dir, '*.hdf5')))
    calib = json.load(open(os.path.join(calib_dir, 'intrinsics.json')))
    with open('/scratch/index.json', 'w') as f:
        json.dump({'episodes': files, 'fx': calib['fx']}, f)
    return len(files)


@dsl.component(base_image=IMAGE)
def train_policy(index_path: str, calib_dir: str, steps: int, policy: Output[Model]):
    import subprocess
    subprocess.run(['python', '-m', 'grasp.train', '--index', index_path, '--calib', calib_dir,
                    '--steps', str(steps), '--out', policy.path], check=True)


@dsl.component(base_image=IMAGE)
def sim_eval(policy: Input[Model], rollouts_uri: str, metrics: Output[Metrics]):
    import subprocess
    subprocess.run(['python', '-m', 'grasp.sim_eval', '--policy', policy.path,
                    '--rollouts', rollouts_uri], check=True)
    metrics.log_metric('success_rate', 0.0)


@dsl.component(base_image=IMAGE)
def real_eval(policy: Input[Model], episodes_dir: str) -> float:
    import subprocess
    subprocess.run(['python', '-m', 'grasp.replay_eval', '--policy', policy.path,
                    '--episodes', episodes_dir + '/holdout'], check=True)
    return 0.0


@dsl.pipeline(name='ur5e-grasp-policy')
def grasp_pipeline(episodes_uri: str = 's3://acme-robot-logs/grasp/ur5e/episodes/2024-06/',
                   calib_pvc: str = 'robot-calibration',
                   train_steps: int = 200000):
    scratch = kubernetes.CreatePVC(pvc_name_suffix='-grasp-scratch', access_modes=['ReadWriteOnce'],
                                   size='200Gi', storage_class_name='fusecache-s3')
    sync = sync_episodes(episodes_uri=episodes_uri)
    kubernetes.mount_pvc(sync, pvc_name=scratch.outputs['name'], mount_path='/scratch')

    idx = index_episodes(episodes_dir='/scratch/episodes', calib_dir='/calib').after(sync)
    kubernetes.mount_pvc(idx, pvc_name=scratch.outputs['name'], mount_path='/scratch')
    kubernetes.mount_pvc(idx, pvc_name=calib_pvc, mount_path='/calib', sub_path='ur5e/cam-wrist')

    tr = train_policy(index_path='/scratch/index.json', calib_dir='/calib', steps=train_steps).after(idx)
    kubernetes.mount_pvc(tr, pvc_name=scratch.outputs['name'], mount_path='/scratch')
    kubernetes.mount_pvc(tr, pvc_name=calib_pvc, mount_path='/calib', sub_path='ur5e/cam-wrist')
    tr.set_accelerator_type('nvidia.com/gpu').set_accelerator_limit(1)

    se = sim_eval(policy=tr.outputs['policy'], rollouts_uri='s3://acme-robot-sim/grasp/rollouts/ycb-v2/')
    re = real_eval(policy=tr.outputs['policy'], episodes_dir='/scratch/episodes')
    kubernetes.mount_pvc(re, pvc_name=scratch.outputs['name'], mount_path='/scratch')

    kubernetes.DeletePVC(pvc_name=scratch.outputs['name']).after(se, re)


if __name__ == '__main__':
    compiler.Compiler().compile(grasp_pipeline, os.path.splitext(__file__)[0] + '.yaml')
