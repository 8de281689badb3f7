# ruff: noqa  (pipeline source in the SDK's own idiom: mutable defaults, typing.List)
"""Static ParallelFor loops in the KFP v1 SDK (-> Argo withItems), over strings and over dicts.

Compile (kfp 1.8.x): python kfp1_parallelfor_static.py  -> kfp1_parallelfor_static.yaml
"""
import os

import kfp
from kfp import dsl

IMAGE = 'ghcr.io/example/speech-prep:0.3.0'


@dsl.pipeline(name='speech-prep')
def speech_prep():
    with dsl.ParallelFor(['train-clean-100', 'train-clean-360', 'dev-clean']) as split:
        dsl.ContainerOp(
            name='resample', image=IMAGE, command=['python', '-m', 'resample'],
            arguments=['--input', 's3://example-speech/librispeech/' + str(split) + '/',
                       '--output', 's3://example-speech/resampled/' + str(split) + '/'])
    with dsl.ParallelFor([{'lang': 'nl', 'uri': 's3://example-speech/mls/dutch/'},
                          {'lang': 'pl', 'uri': 's3://example-speech/mls/polish/'}]) as item:
        dsl.ContainerOp(
            name='align', image=IMAGE, command=['python', '-m', 'align'],
            arguments=['--lang', item.lang, '--data', item.uri])


if __name__ == '__main__':
    kfp.compiler.Compiler().compile(speech_prep, os.path.splitext(__file__)[0] + '.yaml')
