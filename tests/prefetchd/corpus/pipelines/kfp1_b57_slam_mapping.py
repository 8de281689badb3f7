# ruff: noqa
"""Nightly warehouse SLAM map rebuild from robot rosbags (KFP v1 SDK -> Argo Workflow).

The fleet's rosbags live on an existing fusecache claim (`fleet-rosbags`,
mounted read-only at the site sub-path); a VolumeOp scratch claim holds
extracted frames and per-robot submaps; the ORB vocabulary is read from S3;
maps are merged and uploaded only if loop closure succeeded; the scratch
claim is deleted at the end.

Compile (kfp 1.8.x): python kfp1_b57_slam_mapping.py  -> kfp1_b57_slam_mapping.yaml
"""
import os

import kfp
from kfp import dsl
from kubernetes import client as k8s

IMAGE = 'ghcr.io/initech-robotics/slam-tools:3.1.0'


def mount_bags(op, site):
    op.add_volume(k8s.V1Volume(name='rosbags', persistent_volume_claim=k8s.V1PersistentVolumeClaimVolumeSource(
        claim_name='fleet-rosbags')))
    op.container.add_volume_mount(k8s.V1VolumeMount(name='rosbags', mount_path='/bags', sub_path=site, read_only=True))
    return op


@dsl.pipeline(name='warehouse-slam-rebuild')
def slam_pipeline(site: str = 'warehouse-3', night: str = '2024-06-13',
                  vocab_uri: str = 's3://initech-slam/vocab/ORBvoc-v2.bin'):
    work = dsl.VolumeOp(name='create-scratch', resource_name='slam-scratch', size='300Gi',
                        storage_class='fusecache-s3', modes=dsl.VOLUME_MODE_RWO)
    frames = dsl.ContainerOp(name='extract-frames', image=IMAGE, command=['ros2', 'run', 'slam_tools', 'extract'],
                             arguments=['--bags', '/bags/' + str(night), '--topics', '/cam_front/image_raw,/imu',
                                        '--out', '/scratch/frames'],
                             pvolumes={'/scratch': work.volume})
    mount_bags(frames, site)
    fetch_vocab = dsl.ContainerOp(name='fetch-vocab', image='amazon/aws-cli:2.15.30', command=['aws', 's3', 'cp'],
                                  arguments=[vocab_uri, '/scratch/vocab/ORBvoc.bin'],
                                  pvolumes={'/scratch': work.volume})
    orb = dsl.ContainerOp(name='orbslam', image=IMAGE, command=['ros2', 'run', 'slam_tools', 'orbslam3'],
                          arguments=['--frames', '/scratch/frames', '--vocab', '/scratch/vocab/ORBvoc.bin',
                                     '--calib', '/bags/calib/cam_front.yaml', '--out', '/scratch/submaps'],
                          pvolumes={'/scratch': frames.pvolume}).after(fetch_vocab)
    mount_bags(orb, site)
    orb.set_cpu_limit('16')
    lc = dsl.ContainerOp(name='loop-closure', image=IMAGE, command=['python', '-m', 'slam_tools.loop_closure'],
                         arguments=['--submaps', '/scratch/submaps', '--report', '/tmp/closed.txt'],
                         pvolumes={'/scratch': orb.pvolume},
                         file_outputs={'closed': '/tmp/closed.txt'})
    with dsl.Condition(lc.outputs['closed'] == 'true'):
        merge = dsl.ContainerOp(name='merge-maps', image=IMAGE, command=['python', '-m', 'slam_tools.merge'],
                                arguments=['--submaps', '/scratch/submaps', '--out', '/scratch/map.pbstream'],
                                pvolumes={'/scratch': lc.pvolume})
        up = dsl.ContainerOp(name='upload-map', image='amazon/aws-cli:2.15.30', command=['aws', 's3', 'cp'],
                             arguments=['/scratch/map.pbstream',
                                        's3://initech-slam/maps/{}/{}.pbstream'.format(site, night)],
                             pvolumes={'/scratch': merge.pvolume})
    cleanup = work.delete().after(lc)
    cleanup.after(up)


if __name__ == '__main__':
    kfp.compiler.Compiler().compile(slam_pipeline, os.path.splitext(__file__)[0] + '.yaml')
