# ruff: noqa  (pipeline source in the SDK's own idiom: mutable defaults, typing.List)
"""KFP v2 ParallelFor over static dicts read through a field, and over a list parameter.

Compile (kfp 2.x): python kfp2_parallelfor_dicts.py  -> kfp2_parallelfor_dicts.yaml
"""
import os
from typing import List

from kfp import compiler, dsl

IMAGE = 'ghcr.io/example/detect:5.0.0'


@dsl.container_component
def prep(images: str, labels: str):
    return dsl.ContainerSpec(image=IMAGE, command=['python', '-m', 'det.prep'],
                             args=['--images', images, '--labels', labels])


@dsl.container_component
def evaluate(split_uri: str, output_uri: str):
    return dsl.ContainerSpec(image=IMAGE, command=['python', '-m', 'det.eval'],
                             args=['--split', split_uri, '--report', output_uri])


@dsl.pipeline(name='detector-eval')
def detector_eval(splits: List[str] = ['s3://example-det/coco/val2017/', 's3://example-det/lvis/val/']):
    with dsl.ParallelFor(items=[{'set': 'kitti', 'images': 's3://example-det/kitti/images/',
                                 'labels': 's3://example-det/kitti/labels.json'},
                                {'set': 'bdd', 'images': 's3://example-det/bdd100k/images/',
                                 'labels': 's3://example-det/bdd100k/labels.json'}], parallelism=2) as ds:
        p = prep(images=ds.images, labels=ds.labels)
    with dsl.ParallelFor(items=splits) as split:
        evaluate(split_uri=split, output_uri='s3://example-det/reports/latest/').after(p)


if __name__ == '__main__':
    compiler.Compiler().compile(detector_eval, os.path.splitext(__file__)[0] + '.yaml')
