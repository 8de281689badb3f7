"""A Kubeflow Pipelines v2 pipeline whose steps read a dataset through fusecache.

The PVC ``imagenet`` (manifests/examples/dynamic-pvc.yaml, StorageClass
``fusecache``) is mounted read-only at /data in both steps with kfp-kubernetes;
the second step re-reads what the first step read, from the node cache when
both run on one node.

Compile (kfp and kfp-kubernetes from PyPI; they pin protobuf<7, so use a
virtualenv of their own rather than the project's):

    python -m venv /tmp/kfp && /tmp/kfp/bin/pip install kfp kfp-kubernetes
    /tmp/kfp/bin/python manifests/examples/kfp/train_pipeline.py

which writes train_pipeline.yaml next to this file (checked in). No
``from __future__ import annotations`` here: kfp reads the real annotation types.
"""

from pathlib import Path

from kfp import compiler, dsl, kubernetes

DATASET_PVC = "imagenet"
MOUNT_PATH = "/data"


@dsl.component(base_image="python:3.11-slim")
def scan_dataset(root: str) -> int:
    """Count the training files (warms the node cache with their metadata and bytes)."""
    import os

    count = 0
    for _dir, _subdirs, files in os.walk(root):
        count += len(files)
    return count


@dsl.component(base_image="python:3.11-slim")
def train(root: str, expected_files: int) -> str:
    """Stand-in for training: read every file once and report the throughput."""
    import os
    import time

    start, size, n = time.time(), 0, 0
    for d, _subdirs, files in os.walk(root):
        for f in files:
            with open(os.path.join(d, f), "rb") as fh:
                size += len(fh.read())
            n += 1
    assert n == expected_files, (n, expected_files)
    return f"{n} files, {size / (time.time() - start) / 1e6:.1f} MB/s"


@dsl.pipeline(name="fusecache-train", description="Train from S3 through fusecache")
def train_pipeline(dataset_subdir: str = "train") -> None:
    root = f"{MOUNT_PATH}/{dataset_subdir}"
    scan = scan_dataset(root=root)
    kubernetes.mount_pvc(scan, pvc_name=DATASET_PVC, mount_path=MOUNT_PATH)
    fit = train(root=root, expected_files=scan.output)
    kubernetes.mount_pvc(fit, pvc_name=DATASET_PVC, mount_path=MOUNT_PATH)


if __name__ == "__main__":
    compiler.Compiler().compile(train_pipeline, str(Path(__file__).with_suffix(".yaml")))
