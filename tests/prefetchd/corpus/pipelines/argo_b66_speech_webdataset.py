# ruff: noqa
"""LibriSpeech Conformer-CTC training on WebDataset shards as an Argo Workflow DAG (Hera).

prepare-manifest (script) loads manifests with Hugging Face
`load_dataset("parquet", data_files={...})` (a glob and a file, bucket from a
workflow parameter, storage_options with an endpoint), mixes in a noise table
from the Hugging Face Hub (`hf://`, not S3) and a lexicon through
`filecache::s3://...`. fetch-shards fans out over withItems splits and copies
each split's shards with an s5cmd wildcard onto a volumeClaimTemplate. Training
reads the local shards plus validation shards streamed from S3 through a
WebDataset `pipe:` brace range, initialises from a hub model id and writes
checkpoints under {{workflow.name}}. evaluate runs when WER is low: Ray Data
reads a Parquet test folder, `datasets.load_from_disk` a saved dataset folder
(written without a trailing slash), and the checkpoint of this run. An onExit
handler posts a message containing a runbook URL.

Generate: python argo_b66_speech_webdataset.py  -> argo_b66_speech_webdataset.yaml
"""
import os

from hera.workflows import DAG, Artifact, Container, Parameter, Script, Workflow
from hera.workflows import models as m

IMAGE = 'ghcr.io/example/conformer-asr:1.3.0'
SHARDS = m.VolumeMount(name='shards', mount_path='/shards')

PREPARE = '''
import os
import fsspec
import pandas as pd
from datasets import load_dataset

opts = {"client_kwargs": {"endpoint_url": "https://s3.eu-central-1.amazonaws.com"}}
ds = load_dataset(
    "parquet",
    data_files={
        "train": "s3://{{workflow.parameters.corpus_bucket}}/librispeech/manifests/train-*.parquet",
        "validation": "s3://{{workflow.parameters.corpus_bucket}}/librispeech/manifests/dev-clean.parquet",
    },
    storage_options=opts,
)
noise = pd.read_parquet("hf://datasets/example-org/musan-noise/data/train-00000-of-00001.parquet")
with fsspec.open("filecache::s3://example-speech-corpus/lexicons/librispeech-lexicon.txt", "rt",
                 filecache={"cache_storage": "/tmp/fsspec"}, s3=opts) as f:
    lexicon = dict(line.split(maxsplit=1) for line in f)
os.makedirs("/tmp/manifest", exist_ok=True)
for split, d in ds.items():
    d.filter(lambda r: all(w in lexicon for w in r["text"].lower().split())).to_json(f"/tmp/manifest/{split}.jsonl")
noise.sample(2000, random_state=0).to_json("/tmp/manifest/noise.jsonl", orient="records", lines=True)
'''

EVALUATE = '''
import json
import ray
from datasets import load_from_disk
from asr.eval import load_ckpt, wer

model = load_ckpt("s3://example-speech-models/conformer-m/{{workflow.name}}/last.ckpt")
clean = ray.data.read_parquet("s3://{{workflow.parameters.corpus_bucket}}/librispeech/test-clean/")
other = load_from_disk("s3://example-speech-corpus/librispeech/hf/test-other",
                       storage_options={"client_kwargs": {"endpoint_url": "https://s3.eu-central-1.amazonaws.com"}})
print(json.dumps({"test-clean": wer(model, clean), "test-other": wer(model, other)}))
'''

with Workflow(
    generate_name='librispeech-conformer-',
    entrypoint='main',
    on_exit='notify',
    arguments=[Parameter(name='corpus_bucket', value='example-speech-corpus'),
               Parameter(name='max_wer', value='0.08')],
    volume_claim_templates=[m.PersistentVolumeClaim(
        metadata=m.ObjectMeta(name='shards'),
        spec=m.PersistentVolumeClaimSpec(access_modes=['ReadWriteOnce'], storage_class_name='fast-ssd',
                                         resources=m.VolumeResourceRequirements(
                                             requests={'storage': m.Quantity('300Gi')})))],
) as w:
    prepare = Script(name='prepare-manifest', image=IMAGE, command=['python'], source=PREPARE,
                     outputs=[Artifact(name='manifest', path='/tmp/manifest')])
    fetch = Container(
        name='fetch-split-shards', image='peakcom/s5cmd:v2.2.2', command=['/s5cmd'],
        args=['--numworkers', '32', 'cp',
              's3://{{workflow.parameters.corpus_bucket}}/librispeech/wds/{{inputs.parameters.split}}/*',
              '/shards/{{inputs.parameters.split}}/'],
        inputs=[Parameter(name='split')],
        volume_mounts=[SHARDS],
    )
    train = Container(
        name='train-conformer', image=IMAGE, command=['python', '-m', 'asr.train'],
        args=['--train-urls', '/shards/{train-clean-100,train-clean-360,train-other-500}/shard-{000000..000255}.tar',
              '--val-urls',
              'pipe:aws s3 cp s3://{{workflow.parameters.corpus_bucket}}/librispeech/wds/dev-clean/shard-{000000..000007}.tar -',
              '--manifest', '/in/manifest',
              '--init-from', 'nvidia/stt_en_conformer_ctc_medium',
              '--ckpt-dir', 's3://example-speech-models/conformer-m/{{workflow.name}}/',
              '--wer-out', '/tmp/wer.txt'],
        inputs=[Artifact(name='manifest', path='/in/manifest')],
        outputs=[Parameter(name='wer', value_from=m.ValueFrom(path='/tmp/wer.txt'))],
        volume_mounts=[SHARDS],
        resources=None,
    )
    evaluate = Script(name='evaluate', image=IMAGE, command=['python'], source=EVALUATE)
    notify = Container(
        name='notify', image='curlimages/curl:8.8.0', command=['curl', '-sS', '-X', 'POST'],
        args=['--data', '{{workflow.name}} finished: {{workflow.status}}. Runbook: https://wiki.example.com/speech/asr-runbook',
              'https://hooks.example.com/services/asr-team'],
    )
    with DAG(name='main'):
        p = prepare(name='prepare-manifest')
        f = fetch(name='fetch-shards', arguments={'split': '{{item}}'},
                  with_items=['train-clean-100', 'train-clean-360', 'train-other-500'])
        t = train(name='train-conformer', arguments=[p.get_artifact('manifest').with_name('manifest')])
        e = evaluate(name='evaluate',
                     when='{{tasks.train-conformer.outputs.parameters.wer}} < {{workflow.parameters.max_wer}}')
        [p, f] >> t >> e

if __name__ == '__main__':
    with open(os.path.splitext(__file__)[0] + '.yaml', 'w') as fh:
        fh.write(w.to_yaml())
