# ruff: noqa
"""Argo Workflow (Hera, held-out test): BirdCLEF bird-call classifier from field recordings.

- make-spectrograms: withParam over a workflow parameter holding a JSON list of dicts
  (site, year); reads WebDataset shards through a `pipe:aws s3 cp ... -` URL with a brace
  range; output artifact to an explicit S3 key per item (a write); retryStrategy.
- train: two S3 input artifacts (labels CSV keyed by a workflow parameter, pretrained
  weights prefix), a --spec-root prefix holding what the loop uploaded, output artifact with
  archive none to S3 (a write).
- evaluate: a Python script template (fsspec glob + get over an input parameter, a report
  written with fs.open 'w'), guarded by `when`, model passed with from: (intermediate).
- onExit: notify.

Generate: /tmp/hera/bin/python argo_heldout_birdclef_audio.py -> argo_heldout_birdclef_audio.yaml
"""
import os

from hera.workflows import DAG, Artifact, Container, Parameter, S3Artifact, Script, Workflow
from hera.workflows import models as m

IMAGE = 'ghcr.io/acme-bio/birdnet-train:3.1.0'
NO_ARCHIVE = m.ArchiveStrategy(none=m.NoneStrategy())

with Workflow(
    generate_name='birdclef-train-',
    entrypoint='main',
    on_exit='notify',
    arguments=[
        Parameter(name='sites', value='[{"site": "sierra-nevada", "year": "2023"}, {"site": "cascades", "year": "2024"}]'),
        Parameter(name='label-release', value='birdclef-2024'),
        Parameter(name='run-id', value='bc24-r7'),
        Parameter(name='run-eval', value='true'),
    ],
) as w:
    spectrograms = Container(
        name='make-spectrograms', image=IMAGE,
        command=['python', '-m', 'birdnet.prep'],
        inputs=[Parameter(name='site'), Parameter(name='year')],
        args=['--audio', 'pipe:aws s3 cp s3://acme-bioacoustics/raw/{{inputs.parameters.site}}/{{inputs.parameters.year}}/audio-{0000..0127}.tar -',
              '--sr', '32000', '--n-mels', '128', '--spec-dir', '/work/spec'],
        outputs=[S3Artifact(name='spec', path='/work/spec', bucket='acme-bioacoustics-artifacts',
                            key='spectrograms/{{inputs.parameters.site}}-{{inputs.parameters.year}}.tgz')],
        retry_strategy=m.RetryStrategy(limit='2', retry_policy='Always',
                                       backoff=m.Backoff(duration='30s', factor='2')),
    )
    train = Container(
        name='train', image=IMAGE,
        command=['python', '-m', 'birdnet.train'],
        inputs=[
            S3Artifact(name='labels', path='/data/train_metadata.csv', bucket='acme-bioacoustics',
                       key='labels/{{workflow.parameters.label-release}}/train_metadata.csv'),
            S3Artifact(name='pretrained', path='/models/pretrained', bucket='acme-bioacoustics-models',
                       key='efficientnet_b0/imagenet/'),
        ],
        args=['--spec-root', 's3://acme-bioacoustics-artifacts/spectrograms/',
              '--labels', '/data/train_metadata.csv', '--init', '/models/pretrained',
              '--epochs', '40', '--export', '/out/model.onnx'],
        outputs=[S3Artifact(name='model', path='/out/model.onnx', bucket='acme-bioacoustics-models',
                            key='birdclef/{{workflow.parameters.run-id}}/model.onnx', archive=NO_ARCHIVE)],
        resources=m.ResourceRequirements(limits={'nvidia.com/gpu': m.Quantity('1')}),
    )
    evaluate = Script(
        name='evaluate', image=IMAGE, command=['python'],
        inputs=[Parameter(name='soundscapes', value='s3://acme-bioacoustics/soundscapes/2024-test/'),
                Artifact(name='model', path='/tmp/model.onnx')],
        source=(
            'import json\n'
            'import fsspec\n'
            'from birdnet.metrics import padded_cmap, predict_dir\n'
            '\n'
            'fs = fsspec.filesystem("s3")\n'
            'files = fs.glob("{{inputs.parameters.soundscapes}}" + "*.ogg")\n'
            'fs.get(files, "/tmp/soundscapes/")\n'
            'scores = padded_cmap(predict_dir("/tmp/model.onnx", "/tmp/soundscapes"))\n'
            'with fs.open("s3://acme-bioacoustics-reports/{{workflow.parameters.run-id}}/cmap.json", "w") as f:\n'
            '    json.dump({"padded_cmap": scores}, f)\n'
            'print(scores)\n'
        ),
    )
    notify = Container(
        name='notify', image='curlimages/curl:8.8.0', command=['sh', '-c'],
        args=['curl -fsS -X POST "$HOOK" -d "birdclef {{workflow.name}} {{workflow.status}}"'],
        env=[m.EnvVar(name='HOOK', value_from=m.EnvVarSource(secret_key_ref=m.SecretKeySelector(name='bio-hooks', key='slack')))],
    )
    with DAG(name='main'):
        s = spectrograms(name='make-spectrograms', with_param='{{workflow.parameters.sites}}',
                         arguments={'site': '{{item.site}}', 'year': '{{item.year}}'})
        t = train(name='train')
        e = evaluate(name='evaluate', when='{{workflow.parameters.run-eval}} == true',
                     arguments=[t.get_artifact('model').with_name('model')])
        s >> t >> e

if __name__ == '__main__':
    with open(os.path.splitext(__file__)[0] + '.yaml', 'w') as f:
        f.write(w.to_yaml())
