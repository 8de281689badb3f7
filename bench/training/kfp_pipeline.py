"""The Kubeflow Pipelines v2 pipeline the benchmark's prefetch contender warms from.

It names both datasets the way a KFP user does: pipeline parameters holding their
S3 URIs, imported as Dataset artifacts and read by the training step.
``prefetchd warm --pipeline kfp_pipeline.yaml --param images_uri=... --param
shards_uri=...`` works out from it what to fetch. Compile with kfp in a virtualenv
of its own (kfp pins protobuf<7):

    python -m venv /tmp/kfp && /tmp/kfp/bin/pip install kfp
    /tmp/kfp/bin/python bench/training/kfp_pipeline.py

which writes kfp_pipeline.yaml next to this file (checked in). No
``from __future__ import annotations``: kfp reads the real annotation types.
"""

from pathlib import Path

from kfp import compiler, dsl


@dsl.component(base_image="python:3.11-slim")
def train(images: dsl.Input[dsl.Dataset], shards: dsl.Input[dsl.Dataset], epochs: int,
          model: dsl.Output[dsl.Model]) -> None:
    """Stand-in for the training step: reads both datasets *epochs* times."""
    import os

    for _ in range(epochs):
        for root in (images.path, shards.path):
            for d, _subdirs, files in os.walk(root):
                for f in files:
                    with open(os.path.join(d, f), "rb") as fh:
                        while fh.read(1 << 20):
                            pass
    with open(model.path, "w") as out:
        out.write("trained")


@dsl.pipeline(name="fusecache-bench-train",
              description="Train on an image-folder dataset and a shard dataset from S3")
def bench_pipeline(images_uri: str = "s3://fctrain/imagenet/",
                   shards_uri: str = "s3://fctrain/shards/", epochs: int = 2) -> None:
    images = dsl.importer(artifact_uri=images_uri, artifact_class=dsl.Dataset, reimport=False)
    shards = dsl.importer(artifact_uri=shards_uri, artifact_class=dsl.Dataset, reimport=False)
    train(images=images.output, shards=shards.output, epochs=epochs)


if __name__ == "__main__":
    compiler.Compiler().compile(bench_pipeline,
                                str(Path(__file__).with_name("kfp_pipeline.yaml")))
