# ruff: noqa
"""KFP v2 (blind test r4): imitation learning on teleoperated Franka kitchen episodes (HDF5).

Idioms: s5cmd sync of a glob onto an existing PVC in `sh -c` with "$0"/"$1", a component
reading `Path(os.environ["DATA_ROOT"]) / "raw"` where the env var is set on the task and the
claim mounted there, h5py over an s3fs file opened without a scheme, dsl.If/dsl.Else on a
string pipeline parameter choosing the policy family, `--init-from`, torch.hub
load_state_dict_from_url (https, a torchvision backbone), kubernetes.use_secret_as_volume,
gcsfs without a scheme, set_caching_options.

Compile: /tmp/kfp2/bin/python kfp2_r4_robot_imitation.py
"""
import os

from kfp import compiler, dsl, kubernetes

ROBO = 'ghcr.io/acme-robotics/imitation:0.9.1-cu121'
S5 = 'peakcom/s5cmd:v2.2.2'


@dsl.container_component
def stage_episodes(episodes_root: str, dest: str):
    return dsl.ContainerSpec(
        image=S5,
        command=['sh', '-c'],
        args=['/s5cmd --numworkers 32 sync "$0/*" "$1/"', episodes_root, dest],
    )


@dsl.component(base_image=ROBO, packages_to_install=['s3fs==2024.10.0'])
def convert_hdf5(calib_key: str, image_size: int, replay: dsl.Output[dsl.Dataset]):
    import os
    from pathlib import Path

    import h5py
    import s3fs
    import zarr
    from robo.data import episode_to_zarr  # shared helper in the image

    root = Path(os.environ["DATA_ROOT"]) / "raw"
    fs = s3fs.S3FileSystem()
    with fs.open(f"acme-robotics/calib/{calib_key}", "rb") as f:
        calib = h5py.File(f, "r")
        intrinsics = {cam: calib[cam]["K"][()] for cam in calib.keys()}
    store = zarr.DirectoryStore(replay.path)
    for ep in sorted(root.glob("episode_*.hdf5")):
        with h5py.File(ep, "r") as h:
            episode_to_zarr(h, store, intrinsics=intrinsics, image_size=image_size)


@dsl.container_component
def train_diffusion(replay: dsl.Input[dsl.Dataset], pretrained: str, horizon: int,
                    policy: dsl.Output[dsl.Model]):
    return dsl.ContainerSpec(
        image=ROBO,
        command=['python', '-m', 'robo.train.diffusion'],
        args=['--dataset', replay.path, '--init-from', pretrained, '--horizon', horizon,
              '--wandb-key-file', '/secrets/wandb/api_key', '--save-dir', policy.path],
    )


@dsl.component(base_image=ROBO, packages_to_install=['fsspec==2024.10.0', 's3fs==2024.10.0'])
def train_act(replay: dsl.Input[dsl.Dataset], norm_stats_uri: str, chunk_size: int,
              policy: dsl.Output[dsl.Model]):
    import fsspec
    import numpy as np
    import torch
    from robo.act import ACTPolicy, fit  # shared helper in the image

    backbone = torch.hub.load_state_dict_from_url(
        "https://download.pytorch.org/models/resnet18-f37072fd.pth", progress=False)
    with fsspec.open(norm_stats_uri, "rb") as f:
        stats = dict(np.load(f))
    net = ACTPolicy(chunk_size=chunk_size, backbone_state=backbone, norm_stats=stats)
    fit(net, replay.path)
    torch.save(net.state_dict(), policy.path)


@dsl.component(base_image=ROBO, packages_to_install=['gcsfs==2024.10.0'])
def sim_eval(policy: dsl.Input[dsl.Model], scenes_bucket: str, scene_set: str, episodes: int) -> float:
    import gcsfs
    from robo.sim import rollout_success_rate  # shared helper in the image

    gcs = gcsfs.GCSFileSystem()
    gcs.get(f"{scenes_bucket}/{scene_set}/", "/tmp/scenes/", recursive=True)
    return rollout_success_rate(policy.path, "/tmp/scenes", n=episodes)


@dsl.pipeline(name='franka-kitchen-imitation')
def robot_imitation(episodes_root: str = 's3://acme-robotics/teleop/franka-kitchen/2024-10',
                    episodes_claim: str = 'robot-episodes-rwx',
                    calib_key: str = 'franka-kitchen-cams-v2.h5',
                    policy_family: str = 'diffusion',
                    pretrained: str = 's3://acme-robotics-models/diffusion-policy/pretrain/pusht-epoch2000.ckpt',
                    norm_stats_uri: str = 's3://acme-robotics/teleop/franka-kitchen/stats/action-norm-v1.npz',
                    scenes_bucket: str = 'acme-robotics-sim',
                    scene_set: str = 'kitchen-v2'):
    stage = stage_episodes(episodes_root=episodes_root, dest='/mnt/episodes/raw')
    kubernetes.mount_pvc(stage, pvc_name=episodes_claim, mount_path='/mnt/episodes')
    stage.set_caching_options(False)

    conv = convert_hdf5(calib_key=calib_key, image_size=96).after(stage)
    kubernetes.mount_pvc(conv, pvc_name=episodes_claim, mount_path='/mnt/episodes')
    conv.set_env_variable('DATA_ROOT', '/mnt/episodes')

    with dsl.If(policy_family == 'diffusion', name='diffusion-policy'):
        dp = train_diffusion(replay=conv.outputs['replay'], pretrained=pretrained, horizon=16)
        dp.set_accelerator_type('nvidia.com/gpu').set_accelerator_limit(2)
        kubernetes.use_secret_as_volume(dp, secret_name='wandb-api', mount_path='/secrets/wandb')
        sim_eval(policy=dp.outputs['policy'], scenes_bucket=scenes_bucket, scene_set=scene_set, episodes=50)
    with dsl.Else(name='act-policy'):
        act = train_act(replay=conv.outputs['replay'], norm_stats_uri=norm_stats_uri, chunk_size=100)
        act.set_accelerator_type('nvidia.com/gpu').set_accelerator_limit(1)
        sim_eval(policy=act.outputs['policy'], scenes_bucket=scenes_bucket, scene_set=scene_set, episodes=50)


if __name__ == '__main__':
    compiler.Compiler().compile(robot_imitation, os.path.splitext(__file__)[0] + '.yaml')
