# ruff: noqa
"""Multilingual ASR fine-tuning on Common Voice / Kathbath with FLEURS evaluation (KFP v2).

The corpora are a static ParallelFor over dicts (lang/bucket/prefix) whose
fields are composed into s3:// paths: the clips are synced onto a shared scratch
PVC (kfp-kubernetes mount_pvc of an existing claim) and the transcripts are
normalised with an imported G2P lexicon. Per-language hour counts are
collected into a manifest step. Evaluation is a second ParallelFor over a
pipeline parameter whose default is a list of dicts, and the WERs are
collected into a report that is uploaded to S3.

Compile: python kfp2_b47_speech_asr.py  -> kfp2_b47_speech_asr.yaml
"""
import os
from typing import List

from kfp import compiler, dsl, kubernetes
from kfp.dsl import Dataset, Input, Model, Output

ASR_IMAGE = 'ghcr.io/polyglot-ai/asr-train:1.9.2'
AUDIO_IMAGE = 'ghcr.io/polyglot-ai/audio-tools:1.9.2'
SCRATCH = 'speech-scratch'

CORPORA = [
    {'lang': 'de', 'bucket': 'polyglot-cv', 'prefix': 'cv-corpus-17.0/de'},
    {'lang': 'sw', 'bucket': 'polyglot-cv', 'prefix': 'cv-corpus-17.0/sw'},
    {'lang': 'hi', 'bucket': 'polyglot-indic', 'prefix': 'kathbath/hindi'},
]


@dsl.container_component
def sync_clips(bucket: str, prefix: str, lang: str):
    return dsl.ContainerSpec(
        image='amazon/aws-cli:2.15.30',
        command=['aws', 's3', 'sync'],
        args=[f's3://{bucket}/{prefix}/clips/', f'/scratch/{lang}/clips', '--only-show-errors'])


@dsl.component(base_image=ASR_IMAGE)
def normalize_transcripts(bucket: str, prefix: str, lang: str, lexicon: Input[Dataset],
                          transcripts: Output[Dataset]):
    import pandas as pd
    from asr_train.text import Normalizer
    tsv = pd.read_csv(f's3://{bucket}/{prefix}/validated.tsv', sep='\t', quoting=3)
    norm = Normalizer(lang=lang, lexicon_dir=lexicon.path)
    tsv['sentence'] = tsv['sentence'].map(norm)
    tsv.to_csv(transcripts.path, sep='\t', index=False)


@dsl.container_component
def transcode_audio(lang: str):
    return dsl.ContainerSpec(
        image=AUDIO_IMAGE,
        command=['python', '-m', 'audio_tools.transcode'],
        args=['--in', f'/scratch/{lang}/clips', '--out', f'/scratch/{lang}/wav16k', '--rate', '16000'])


@dsl.component(base_image=AUDIO_IMAGE)
def compute_stats(transcripts: Input[Dataset], lang: str) -> float:
    import pandas as pd
    import soundfile as sf
    df = pd.read_csv(transcripts.path, sep='\t')
    secs = sum(sf.info(f'/scratch/{lang}/wav16k/{p[:-4]}.wav').duration for p in df['path'])
    return secs / 3600.0


@dsl.component(base_image=ASR_IMAGE)
def build_manifest(hours: List[float], transcripts: Input[List[Dataset]], manifest: Output[Dataset]):
    import json
    import pandas as pd
    frames = [pd.read_csv(t.path, sep='\t') for t in transcripts]
    pd.concat(frames).to_json(manifest.path, orient='records', lines=True)
    print(json.dumps({'total_hours': sum(hours)}))


@dsl.container_component
def train_asr(manifest: Input[Dataset], model: Output[Model]):
    return dsl.ContainerSpec(
        image=ASR_IMAGE,
        command=['torchrun', '--nproc_per_node=8', '-m', 'asr_train.finetune'],
        args=['--manifest', manifest.path, '--audio-root', '/scratch',
              '--init', 's3://polyglot-models/pretrained/w2v-bert-2.0/',
              '--out', model.path])


@dsl.component(base_image=ASR_IMAGE)
def evaluate_asr(model: Input[Model], lang: str, split: str, fleurs_root: str) -> float:
    from asr_train.eval import wer_on
    root = f'{fleurs_root}/{lang}'
    return wer_on(model.path, transcripts=f'{root}/{split}.tsv', audio=f'{root}/audio/{split}/')


@dsl.component(base_image=ASR_IMAGE)
def report_wer(wers: List[float], report_uri: str):
    import json
    import fsspec
    with fsspec.open(report_uri, 'w') as f:
        json.dump({'wer': wers}, f)


@dsl.pipeline(name='polyglot-asr-finetune')
def speech_asr(fleurs_root: str = 's3://polyglot-eval/fleurs/v2',
               eval_sets: list = [{'lang': 'de', 'split': 'test'}, {'lang': 'sw', 'split': 'test'},
                                  {'lang': 'hi', 'split': 'dev'}],
               report_uri: str = 's3://polyglot-reports/asr/wer-latest.json'):
    lex = dsl.importer(artifact_uri='s3://polyglot-lexicons/g2p/v4/', artifact_class=Dataset, reimport=False)
    with dsl.ParallelFor(CORPORA, parallelism=2) as c:
        sync = sync_clips(bucket=c.bucket, prefix=c.prefix, lang=c.lang)
        kubernetes.mount_pvc(sync, pvc_name=SCRATCH, mount_path='/scratch')
        norm = normalize_transcripts(bucket=c.bucket, prefix=c.prefix, lang=c.lang, lexicon=lex.output)
        tc = transcode_audio(lang=c.lang).after(sync)
        kubernetes.mount_pvc(tc, pvc_name=SCRATCH, mount_path='/scratch')
        st = compute_stats(transcripts=norm.outputs['transcripts'], lang=c.lang).after(tc)
        kubernetes.mount_pvc(st, pvc_name=SCRATCH, mount_path='/scratch')
    man = build_manifest(hours=dsl.Collected(st.output), transcripts=dsl.Collected(norm.outputs['transcripts']))
    tr = train_asr(manifest=man.outputs['manifest'])
    kubernetes.mount_pvc(tr, pvc_name=SCRATCH, mount_path='/scratch')
    with dsl.ParallelFor(eval_sets) as ev:
        e = evaluate_asr(model=tr.outputs['model'], lang=ev.lang, split=ev.split, fleurs_root=fleurs_root)
    report_wer(wers=dsl.Collected(e.output), report_uri=report_uri)


if __name__ == '__main__':
    compiler.Compiler().compile(speech_asr, os.path.splitext(__file__)[0] + '.yaml')
