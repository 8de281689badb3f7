# ruff: noqa
"""KFP v2 (blind test r3): multi-speaker VITS text-to-speech fine-tune.

Idioms: smart_open reads, a webdataset.WebDataset over a 'pipe:aws s3 cp' brace URL built
in an f-string per loop item (ParallelFor over a list parameter), dsl.Collected fan-in,
torch.load of an init checkpoint opened with fsspec from an input named *_ckpt,
kubernetes.mount_pvc of a cache claim, datasets.load_dataset('json', data_files=...),
dsl.If / dsl.Else on a returned float, boto3 upload_file to a bucket/key split with urlparse,
set_retry, set_caching_options.

Compile: /tmp/kfp2/bin/python kfp2_r3_vits_tts.py
"""
import os
from typing import List

from kfp import compiler, dsl, kubernetes

TTS = 'ghcr.io/acme-voice/tts-train:2024.10'
PY = 'python:3.11-slim'


@dsl.component(base_image=PY, packages_to_install=['smart_open[s3]==7.0.4', 'g2p_en==2.1.0'])
def normalize_text(corpus_root: str, lexicon_uri: str, transcripts: dsl.Output[dsl.Dataset]):
    import csv

    from smart_open import open as sopen

    lexicon = {}
    with sopen(lexicon_uri, 'rb') as f:
        for line in f.read().decode('utf-8').splitlines():
            word, phones = line.split('\t', 1)
            lexicon[word] = phones
    with sopen(corpus_root + '/metadata.csv') as src, open(transcripts.path, 'w') as dst:
        w = csv.writer(dst, delimiter='|')
        for row in csv.reader(src, delimiter='|'):
            w.writerow([row[0], ' '.join(lexicon.get(t, t) for t in row[1].lower().split())])


@dsl.component(base_image=TTS)
def extract_mels(corpus_root: str, speaker: str, transcripts: dsl.Input[dsl.Dataset],
                 mels: dsl.Output[dsl.Dataset]):
    import os

    import torch
    import webdataset as wds
    from tts_train.audio import mel_spectrogram

    url = f'pipe:aws s3 cp {corpus_root}/wds/{speaker}/audio-{{000..031}}.tar -'
    ds = wds.WebDataset(url, shardshuffle=False).decode(wds.torch_audio).to_tuple('__key__', 'flac')
    os.makedirs(mels.path, exist_ok=True)
    for key, (wav, sr) in ds:
        torch.save(mel_spectrogram(wav, sr), os.path.join(mels.path, key + '.pt'))


@dsl.component(base_image=TTS)
def train_vits(mels: List[dsl.Dataset], transcripts: dsl.Input[dsl.Dataset], init_ckpt: str,
               steps: int, model: dsl.Output[dsl.Model]):
    import fsspec
    import torch
    from tts_train.vits import VITS, fit

    net = VITS(n_speakers=len(mels))
    with fsspec.open(init_ckpt, 'rb') as f:
        state = torch.load(f, map_location='cpu')
    net.load_state_dict(state['model'], strict=False)
    fit(net, [m.path for m in mels], transcripts.path, steps=steps,
        cache_dir='/cache/phonemizer', out_dir=model.path)


@dsl.component(base_image=TTS, packages_to_install=['datasets==2.20.0', 's3fs==2024.6.0'])
def predict_mos(model: dsl.Input[dsl.Model], test_sentences: str) -> float:
    from datasets import load_dataset
    from tts_train.mos import utmos_score
    from tts_train.vits import load

    sents = load_dataset('json', data_files=test_sentences, split='train')
    return float(utmos_score(load(model.path), [r['text'] for r in sents]))


@dsl.component(base_image=PY, packages_to_install=['boto3==1.34.140'])
def publish_voice(model: dsl.Input[dsl.Model], voice_uri: str):
    from urllib.parse import urlparse

    import boto3

    u = urlparse(voice_uri)
    boto3.client('s3').upload_file(model.path + '/generator.pt', u.netloc, u.path.lstrip('/') + 'generator.pt')


@dsl.container_component
def flag_regression(mos: float, channel: str):
    return dsl.ContainerSpec(image='curlimages/curl:8.8.0', command=['sh', '-c'],
                             args=['curl -s -X POST -d "mos=$0" "$1"', mos, channel])


@dsl.pipeline(name='vits-multispeaker-ft')
def vits_tts(corpus_root: str = 's3://acme-voice-data/studio-2024q3',
             lexicon_uri: str = 's3://acme-voice-data/lexicons/en-us/cmudict-0.7b-ipa.tsv',
             speakers: List[str] = ['spk-anna', 'spk-marcus', 'spk-yuki'],
             init_ckpt: str = 's3://acme-voice-models/vits/libritts-base/G_800000.pth',
             steps: int = 60000,
             test_sentences: str = 's3://acme-voice-data/eval/harvard-sentences.jsonl',
             voice_uri: str = 's3://acme-voice-models/vits/studio-2024q3/',
             alert_hook: str = 'https://hooks.acme.example/tts'):
    norm = normalize_text(corpus_root=corpus_root, lexicon_uri=lexicon_uri)
    with dsl.ParallelFor(speakers, parallelism=3) as spk:
        mel = extract_mels(corpus_root=corpus_root, speaker=spk, transcripts=norm.outputs['transcripts'])
        mel.set_retry(num_retries=3, backoff_duration='60s')
    train = train_vits(mels=dsl.Collected(mel.outputs['mels']), transcripts=norm.outputs['transcripts'],
                       init_ckpt=init_ckpt, steps=steps)
    train.set_accelerator_type('nvidia.com/gpu').set_accelerator_limit(8)
    kubernetes.mount_pvc(train, pvc_name='tts-phonemizer-cache', mount_path='/cache')
    mos = predict_mos(model=train.outputs['model'], test_sentences=test_sentences)
    mos.set_caching_options(False)
    with dsl.If(mos.output >= 3.8, name='mos-ok'):
        publish_voice(model=train.outputs['model'], voice_uri=voice_uri)
    with dsl.Else(name='mos-low'):
        flag_regression(mos=mos.output, channel=alert_hook)


if __name__ == '__main__':
    compiler.Compiler().compile(vits_tts, os.path.splitext(__file__)[0] + '.yaml')
