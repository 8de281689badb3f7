# ruff: noqa
"""Crowd counting (CSRNet) for venue cameras: sync annotated frames per venue, build density maps, train, export ONNX if MAE is good."""
import kfp
from kfp import dsl
from kfp.components import create_component_from_func
from kubernetes.client import V1EnvVar

VENUES = [
    {"venue": "stadium-north", "split": "train"},
    {"venue": "metro-central", "split": "train"},
    {"venue": "festival-2024", "split": "val"},
]


def make_density_maps(sigma: float = 4.0) -> int:
    import glob
    import json

    import numpy as np
    import pandas as pd
    from scipy.ndimage import gaussian_filter

    calib = pd.read_csv("s3://crowdcv-data/meta/camera_calibration.csv").set_index("camera_id")
    n = 0
    for ann_path in glob.glob("/data/*/*/annotations.json"):
        ann = json.load(open(ann_path))
        for frame in ann["frames"]:
            h, w = frame["height"], frame["width"]
            dm = np.zeros((h, w), dtype=np.float32)
            for x, y in frame["points"]:
                dm[min(int(y), h - 1), min(int(x), w - 1)] += 1.0
            scale = calib.loc[frame["camera_id"], "px_per_m"] if frame["camera_id"] in calib.index else 1.0
            np.save(ann_path.replace("annotations.json", f"{frame['id']}.npy"), gaussian_filter(dm, sigma * scale))
            n += 1
    return n


def export_onnx(run_name: str):
    import boto3
    import torch
    from crowdcv.models import CSRNet

    s3 = boto3.client("s3")
    s3.download_file("crowdcv-models", f"csrnet/{run_name}/best.pth", "/tmp/best.pth")
    model = CSRNet()
    model.load_state_dict(torch.load("/tmp/best.pth", map_location="cpu"))
    model.eval()
    torch.onnx.export(model, torch.randn(1, 3, 720, 1280), "/tmp/csrnet.onnx", opset_version=17)
    s3.upload_file("/tmp/csrnet.onnx", "crowdcv-edge", f"releases/{run_name}/csrnet.onnx")


density_op = create_component_from_func(make_density_maps, base_image="ghcr.io/crowdcv/train:1.4.0")
export_op = create_component_from_func(export_onnx, base_image="ghcr.io/crowdcv/train:1.4.0")


@dsl.pipeline(name="crowd-counting", description="CSRNet training on venue camera frames")
def crowd_counting(images_root: str = "s3://crowdcv-data/venues",
                   pretrained: str = "s3://crowdcv-models/backbones/vgg16_bn_imagenet.pth",
                   run_name: str = "csrnet-2025-06",
                   epochs: int = 200,
                   max_mae: float = 12.0):
    cleanup = dsl.ContainerOp(
        name="cleanup-scratch",
        image="amazon/aws-cli:2.17.0",
        command=["aws", "s3", "rm", "--recursive", f"s3://crowdcv-scratch/{run_name}/"],
    )
    with dsl.ExitHandler(cleanup):
        vol = dsl.VolumeOp(name="frames-volume", resource_name="crowd-frames", size="150Gi",
                           modes=dsl.VOLUME_MODE_RWO)

        with dsl.ParallelFor(VENUES) as v:
            sync = dsl.ContainerOp(
                name="sync-venue",
                image="amazon/aws-cli:2.17.0",
                command=["aws", "s3", "sync", f"{images_root}/{v.venue}/", f"/data/{v.split}/{v.venue}/",
                         "--exclude", "*.mp4", "--only-show-errors"],
                pvolumes={"/data": vol.volume},
            )

        density = density_op(sigma=4.0).after(sync)
        density.add_pvolumes({"/data": vol.volume})

        train = dsl.ContainerOp(
            name="train-csrnet",
            image="ghcr.io/crowdcv/train:1.4.0",
            command=["python", "-m", "crowdcv.train"],
            arguments=["--data-root", "/data",
                       "--pretrained", pretrained,
                       "--epochs", epochs,
                       "--work-dir", f"s3://crowdcv-scratch/{run_name}/",
                       "--save-dir", f"s3://crowdcv-models/csrnet/{run_name}/"],
            file_outputs={"mae": "/tmp/val_mae.txt"},
            pvolumes={"/data": vol.volume},
        )
        train.after(density)
        train.set_gpu_limit(2)
        train.container.add_env_variable(V1EnvVar(name="WANDB_PROJECT", value="crowd-counting"))

        with dsl.Condition(train.outputs["mae"] < max_mae):
            export_op(run_name=run_name)


if __name__ == "__main__":
    kfp.compiler.Compiler().compile(crowd_counting, __file__.replace(".py", ".yaml"))
