# ruff: noqa  (pipeline source in the SDK's own idiom: mutable defaults, typing.List)
"""Copy steps as KFP v1 ContainerOps: gsutil rsync, s5cmd cp, aws s3 cp, rclone copyto,
and a glob pattern read by the trainer; a VolumeOp scratch volume.

Compile (kfp 1.8.x): python kfp1_copy_ops.py  -> kfp1_copy_ops.yaml
"""
import os

import kfp
from kfp import dsl


@dsl.pipeline(name='ocr-train')
def ocr_train(lines_root: str = 's3://example-ocr/iam/lines'):
    vop = dsl.VolumeOp(name='scratch', resource_name='scratch', size='20Gi', modes=dsl.VOLUME_MODE_RWO)
    g = dsl.ContainerOp(name='fonts', image='google/cloud-sdk:475.0.0', command=['gsutil'],
                        arguments=['-m', 'rsync', '-r', 'gs://example-fonts/noto/', '/scratch/fonts'],
                        pvolumes={'/scratch': vop.volume})
    s5 = dsl.ContainerOp(name='lines', image='peakcom/s5cmd:v2.2.2', command=['/s5cmd'],
                         arguments=['cp', str(lines_root) + '/*.png', '/scratch/lines/'],
                         pvolumes={'/scratch': vop.volume})
    tr = dsl.ContainerOp(name='train', image='ghcr.io/example/ocr:2.0.0', command=['python', '-m', 'ocr.train'],
                         arguments=['--images', '/scratch/lines', '--labels', 's3://example-ocr/iam/labels-v?.tsv',
                                    '--model-out', '/scratch/model'],
                         pvolumes={'/scratch': vop.volume}).after(g, s5)
    dsl.ContainerOp(name='upload', image='amazon/aws-cli:2.15.30', command=['aws', 's3', 'cp'],
                    arguments=['/scratch/model', 's3://example-models/ocr/', '--recursive'],
                    pvolumes={'/scratch': vop.volume}).after(tr)
    dsl.ContainerOp(name='card', image='rclone/rclone:1.66', command=['rclone', 'copyto'],
                    arguments=['/etc/model-card.md', ':s3:example-models/ocr/README.md']).after(tr)


if __name__ == '__main__':
    kfp.compiler.Compiler().compile(ocr_train, os.path.splitext(__file__)[0] + '.yaml')
