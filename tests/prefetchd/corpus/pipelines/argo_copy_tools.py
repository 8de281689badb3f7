# ruff: noqa  (pipeline source in the SDK's own idiom: mutable defaults, typing.List)
"""Mirror jobs in every copy tool, as Argo steps (Hera): which side is read.

`mc mirror` and `rclone sync` name their remotes by alias (`minio/...`, `:s3:...`),
`s5cmd cp` and `aws s3 sync` use s3:// URIs, `azcopy copy` uses https Blob URLs.

Generate: python argo_copy_tools.py  -> argo_copy_tools.yaml
"""
import os

from hera.workflows import Container, Steps, Workflow
from hera.workflows import models as m

SCRATCH = m.VolumeMount(name='scratch', mount_path='/scratch')

with Workflow(
    generate_name='mirror-jobs-',
    entrypoint='main',
    volumes=[m.Volume(name='scratch', empty_dir=m.EmptyDirVolumeSource())],
) as w:
    s5 = Container(name='s5-pull', image='peakcom/s5cmd:v2.2.2', command=['/s5cmd'],
                   args=['--numworkers', '64', 'cp', 's3://example-audio/librispeech/train-clean-100/*',
                         '/scratch/ls/'], volume_mounts=[SCRATCH])
    rc = Container(name='rclone-pull', image='rclone/rclone:1.66', command=['rclone'],
                   args=['sync', ':s3,provider=AWS,env_auth=true:example-audio/musan/', '/scratch/musan'],
                   volume_mounts=[SCRATCH])
    feat = Container(name='features', image='ghcr.io/example/asr:3.1.0', command=['python', '-m', 'asr.features'],
                     args=['--src', '/scratch', '--dst', 's3://example-audio/features/fbank80/'],
                     volume_mounts=[SCRATCH])
    azin = Container(name='azcopy-pull', image='mcr.microsoft.com/azure-cli:2.61.0', command=['sh', '-c'],
                     args=['azcopy copy "https://exampleasr.blob.core.windows.net/asr/noise/" /scratch/noise --recursive'],
                     volume_mounts=[SCRATCH])
    mcin = Container(name='mc-pull', image='minio/mc:RELEASE.2024-06-12T14-34-03Z', command=['mc'],
                     args=['cp', '--recursive', 'minio/example-audio/rir/', '/scratch/rir/'], volume_mounts=[SCRATCH])
    az = Container(name='azcopy-push', image='mcr.microsoft.com/azure-cli:2.61.0', command=['azcopy', 'copy'],
                   args=['/scratch/ls', 'https://exampleasr.blob.core.windows.net/asr/librispeech/', '--recursive'],
                   volume_mounts=[SCRATCH])
    mcout = Container(name='mc-push', image='minio/mc:RELEASE.2024-06-12T14-34-03Z', command=['mc', 'mirror'],
                      args=['--overwrite', '/scratch/musan', 'minio/example-backup/musan-mc/'], volume_mounts=[SCRATCH])
    rcp = Container(name='rclone-push', image='rclone/rclone:1.66', command=['rclone', 'copy'],
                    args=['/scratch/musan', ':s3:example-backup/musan/'], volume_mounts=[SCRATCH])
    aws = Container(name='aws-push', image='amazon/aws-cli:2.15.30', command=['aws'],
                    args=['--endpoint-url', 'https://s3.us-west-2.amazonaws.com', 's3', 'sync',
                          '/scratch/ls/', 's3://example-backup/librispeech/'], volume_mounts=[SCRATCH])
    with Steps(name='main') as s:
        with s.parallel():
            s5(name='s5-pull')
            rc(name='rclone-pull')
            azin(name='azcopy-pull')
            mcin(name='mc-pull')
        feat(name='features')
        with s.parallel():
            az(name='azcopy-push')
            rcp(name='rclone-push')
            aws(name='aws-push')
            mcout(name='mc-push')

if __name__ == '__main__':
    with open(os.path.splitext(__file__)[0] + '.yaml', 'w') as f:
        f.write(w.to_yaml())
