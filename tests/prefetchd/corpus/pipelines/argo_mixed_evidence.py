# ruff: noqa  (pipeline source in the SDK's own idiom: mutable defaults, typing.List)
"""Reads and writes told apart by flag names, and a location with mixed evidence (Hera, DAG).

`--from`/`--to`, `--input-*`/`--export-*`, `--data`/`--save-*`; one step names
the same location as `--input` and as `--output` (an in-place rewrite: unknown,
neither warmed nor called a write); one script both reads and writes a location
through fsspec.

Generate: python argo_mixed_evidence.py  -> argo_mixed_evidence.yaml
"""
import os

from hera.workflows import DAG, Container, Script, Workflow

IMAGE = 'ghcr.io/example/feature-store:0.7.0'

with Workflow(generate_name='features-', entrypoint='main') as w:
    mv = Container(name='move', image=IMAGE, command=['fs-tool', 'copy'],
                   args=['--from', 's3://example-fs/raw/events/', '--to', 's3://example-fs/staged/events/'])
    build = Container(name='build', image=IMAGE, command=['python', '-m', 'fs.build'],
                      args=['--input-table=s3://example-fs/staged/events/', '--data', 's3://example-fs/dim/users.parquet',
                            '--export-path=s3://example-fs/features/v2/', '--save-stats', 's3://example-fs/stats/v2.json'])
    dedup = Container(name='dedup', image=IMAGE, command=['python', '-m', 'fs.dedup'],
                      args=['--input', 's3://example-fs/features/v2/', '--output', 's3://example-fs/features/v2/'])
    patch = Script(name='patch-manifest', image='python:3.11-slim', command=['python'],
                   source=('import fsspec, json\n'
                           'URI = "s3://example-fs/features/manifest.json"\n'
                           'with fsspec.open(URI, "rb") as f:\n'
                           '    m = json.load(f)\n'
                           'm["version"] = 2\n'
                           'with fsspec.open(URI, "wb") as f:\n'
                           '    f.write(json.dumps(m).encode())\n'))
    with DAG(name='main'):
        mv(name='move') >> build(name='build') >> dedup(name='dedup') >> patch(name='patch-manifest')

if __name__ == '__main__':
    with open(os.path.splitext(__file__)[0] + '.yaml', 'w') as f:
        f.write(w.to_yaml())
