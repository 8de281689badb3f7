# ruff: noqa
"""Multilingual ASR evaluation as an Argo WorkflowTemplate (Hera, DAG).

The speech team keeps Common Voice test sets as WebDataset shards per
language. `build-manifest` globs the shards once and writes a JSON manifest
(language -> shard URLs) under the run's scratch prefix; each per-language
eval reads the manifest and streams the shards it lists. A noise-robustness
step mixes MUSAN noise shards (brace range) into the German test shards; the
report step compares every language's WER with the stored baseline.

Generate: python argo_b69_asr_eval_wftmpl.py  -> argo_b69_asr_eval_wftmpl.yaml
"""
import os

from hera.workflows import DAG, Container, Parameter, Script, WorkflowTemplate
from hera.workflows import models as m

IMAGE = 'ghcr.io/acme-speech/asr-eval:0.19.3'

with WorkflowTemplate(
    name='asr-multilingual-eval',
    entrypoint='main',
    service_account_name='speech-eval',
    arguments=[
        Parameter(name='cv_version', value='cv-corpus-19.0'),
        Parameter(name='model_uri', value='s3://acme-speech-models/whisper-ft/2026-11-28/'),
    ],
) as wt:
    build_manifest = Script(
        name='build-manifest',
        image=IMAGE,
        command=['python'],
        source='''import collections
import json
import s3fs

fs = s3fs.S3FileSystem()
shards = fs.glob("acme-speech-data/commonvoice/{{workflow.parameters.cv_version}}/*/test/shard-*.tar")
by_lang = collections.defaultdict(list)
for key in sorted(shards):
    lang = key.split("/")[3]
    by_lang[lang].append("s3://" + key)
with fs.open("acme-speech-scratch/manifests/{{workflow.name}}/test-shards.json", "w") as f:
    json.dump(by_lang, f)
print(json.dumps({k: len(v) for k, v in by_lang.items()}))
''',
    )

    eval_lang = Script(
        name='eval-lang',
        image=IMAGE,
        command=['python'],
        inputs=[Parameter(name='lang')],
        source='''import json
import fsspec
import webdataset as wds
from asr_eval import load_model, transcribe_and_score

lang = "{{inputs.parameters.lang}}"
with fsspec.open("s3://acme-speech-scratch/manifests/{{workflow.name}}/test-shards.json") as f:
    urls = json.load(f)[lang]
with fsspec.open(f"hf://datasets/acme-speech/text-normalizers/{lang}.json") as f:
    normalizer = json.load(f)
fs = fsspec.filesystem("s3")
fs.get("{{workflow.parameters.model_uri}}", "/tmp/model/", recursive=True)
model = load_model("/tmp/model/")
ds = wds.WebDataset([f"pipe:aws s3 cp {u} -" for u in urls]).decode(wds.torch_audio).to_tuple("flac", "txt")
result = transcribe_and_score(model, ds, normalizer=normalizer, language=lang)
with fsspec.open(f"s3://acme-speech-reports/{{workflow.name}}/{lang}/wer.json", "w") as f:
    json.dump(result, f)
''',
    )

    noisy = Container(
        name='score-noisy',
        image=IMAGE,
        command=['python', '-m', 'asr_eval.noisy'],
        args=[
            '--test-shards', 's3://acme-speech-data/commonvoice/{{workflow.parameters.cv_version}}/de/test/shard-{000..015}.tar',
            '--noise-shards', 's3://acme-speech-data/musan/noise/shard-{0000..0031}.tar',
            '--snr-db', '0,5,10',
            '--model', '{{workflow.parameters.model_uri}}',
            '--out', 's3://acme-speech-reports/{{workflow.name}}/noisy/de.json',
        ],
    )

    report = Script(
        name='report',
        image=IMAGE,
        command=['python'],
        source='''import json
import pandas as pd
import s3fs

fs = s3fs.S3FileSystem()
rows = []
for key in fs.glob("acme-speech-reports/{{workflow.name}}/*/wer.json"):
    with fs.open(key) as f:
        rows.append(json.load(f))
cur = pd.DataFrame(rows).set_index("language")
base = pd.read_json("s3://acme-speech-reports/baselines/whisper-large-v3/{{workflow.parameters.cv_version}}.json").set_index("language")
delta = (cur["wer"] - base["wer"]).rename("delta_wer")
md = pd.concat([cur["wer"], base["wer"].rename("baseline"), delta], axis=1).to_markdown()
with fs.open("acme-speech-reports/{{workflow.name}}/summary.md", "w") as f:
    f.write(md)
''',
    )

    with DAG(name='main'):
        b = build_manifest()
        e = eval_lang(with_items=['de', 'fr', 'es', 'it', 'pl'],
                      arguments=[Parameter(name='lang', value='{{item}}')])
        n = noisy()
        r = report()
        b >> e >> r
        n >> r


if __name__ == '__main__':
    with open(os.path.splitext(__file__)[0] + '.yaml', 'w') as f:
        f.write(wt.to_yaml())
