# ruff: noqa
"""KFP v1 (held-out test): Kinetics-700 action recognition (X3D) on pre-decoded frames.
Idioms: ContainerOp with `s5cmd sync` of a glob built from $0/$1 inside sh -c, an existing
PVC through dsl.PipelineVolume(pvc=...) + pvolumes, ParallelFor over static split names,
set_retry, a lightweight component reading a location built with str.format and opening a
pretrained checkpoint with fsspec 'rb', boto3 upload_file to a bucket/key from an
f-string, ExitHandler whose handler wipes the scratch on the PVC.

Compile: /tmp/kfp1/bin/python kfp1_heldout_kinetics_video.py
"""
import os

import kfp
from kfp import dsl
from kfp.components import create_component_from_func

FRAMES_PVC = 'kinetics-frames'


def train_x3d(clips_root: str, pretrained_uri: str, run_tag: str, epochs: int) -> str:
    import boto3
    import fsspec
    import pandas as pd
    import torch
    from actionrec.x3d import build_x3d, fit
    ann = pd.read_csv("{}/annotations/{}.csv".format(clips_root, "train"))
    val_ann = pd.read_csv("{}/annotations/{}.csv".format(clips_root, "validate"))
    with fsspec.open(pretrained_uri, "rb") as f:
        state = torch.load(f, map_location="cpu")
    model = build_x3d("x3d_m", num_classes=700)
    model.load_state_dict(state["model_state"], strict=False)
    fit(model, ann, val_ann, frames_root="/frames", epochs=epochs, out="/frames/ckpt/model.pt")
    key = f"x3d_m/kinetics700/{run_tag}/model.pt"
    boto3.client("s3").upload_file("/frames/ckpt/model.pt", "acme-video-models", key)
    return "s3://acme-video-models/" + key


train_op = create_component_from_func(
    train_x3d, base_image='ghcr.io/acme-video/actionrec:0.9.2',
    packages_to_install=['boto3==1.28.0', 's3fs==2023.6.0', 'pandas==2.0.3'])


@dsl.pipeline(name='kinetics700-x3d')
def kinetics(clips_root: str = 's3://acme-video/kinetics700/2024-03',
             pretrained_uri: str = 's3://acme-video-models/x3d_m/kinetics400/x3d_m.pyth',
             run_tag: str = 'k700-r1', epochs: int = 30):
    frames = dsl.PipelineVolume(pvc=FRAMES_PVC)
    wipe = dsl.ContainerOp(
        name='wipe-scratch', image='busybox:1.36',
        command=['sh', '-c', 'rm -rf /frames/tmp/* /frames/ckpt'],
        pvolumes={'/frames': frames})
    with dsl.ExitHandler(wipe):
        with dsl.ParallelFor(['train', 'validate']) as split:
            decode = dsl.ContainerOp(
                name='decode-frames', image='ghcr.io/acme-video/ffmpeg-tools:6.1',
                command=['sh', '-c'],
                arguments=['s5cmd sync "$0/$1/*.mp4" "/frames/tmp/$1/videos/" && '
                           'python /opt/decode.py --videos /frames/tmp/$1/videos --fps 8 --short-side 256 '
                           '--frames-out /frames/$1', clips_root, split],
                pvolumes={'/frames': frames})
            decode.set_retry(3)
            decode.set_cpu_limit('16')
        train = train_op(clips_root=clips_root, pretrained_uri=pretrained_uri, run_tag=run_tag, epochs=epochs)
        train.add_pvolumes({'/frames': frames})
        train.set_gpu_limit(4)
        train.after(decode)


if __name__ == '__main__':
    kfp.compiler.Compiler().compile(kinetics, os.path.splitext(__file__)[0] + '.yaml')
