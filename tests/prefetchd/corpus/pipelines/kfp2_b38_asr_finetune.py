# ruff: noqa
"""wav2vec2 ASR fine-tuning on LibriSpeech (KFP v2), speech team.

Most components are shared component YAML specs kept in the team's repo and
loaded with components.load_component_from_text (inputValue / inputPath /
outputPath placeholders); the pretrained checkpoint is brought in with
dsl.importer; AWS credentials come from a Secret (use_secret_as_env) and the
pod name from the downward API (use_field_path_as_env).

Compile: python kfp2_b38_asr_finetune.py  -> kfp2_b38_asr_finetune.yaml
"""
import os

from kfp import components, compiler, dsl, kubernetes
from kfp.dsl import Input, Model

DOWNLOAD_AUDIO = components.load_component_from_text('''
name: Download audio
description: Sync one LibriSpeech split from S3 into the output directory.
inputs:
- {name: source_uri, type: String}
outputs:
- {name: audio_dir, type: Directory}
implementation:
  container:
    image: amazon/aws-cli:2.15.30
    command: [aws, s3, sync, --only-show-errors]
    args: [{inputValue: source_uri}, {outputPath: audio_dir}]
''')

EXTRACT_FEATURES = components.load_component_from_text('''
name: Extract features
inputs:
- {name: audio_dir, type: Directory}
- {name: sample_rate, type: Integer, default: '16000'}
outputs:
- {name: features, type: Directory}
implementation:
  container:
    image: ghcr.io/example/asr-features:1.4.0
    command: [python, -m, asrfeat.extract]
    args: [--audio, {inputPath: audio_dir}, --sample-rate, {inputValue: sample_rate}, --out, {outputPath: features}]
''')

FINETUNE = components.load_component_from_text('''
name: Finetune wav2vec2
inputs:
- {name: train_features, type: Directory}
- {name: dev_features, type: Directory}
- {name: base_model, type: Model}
- {name: tokenizer_uri, type: String}
- {name: epochs, type: Integer}
outputs:
- {name: model, type: Model}
implementation:
  container:
    image: ghcr.io/example/asr-train:2.3.0
    command: [python, -m, asrtrain.finetune]
    args: [--train, {inputPath: train_features}, --dev, {inputPath: dev_features},
           --base-model, {inputPath: base_model}, --tokenizer, {inputValue: tokenizer_uri},
           --epochs, {inputValue: epochs}, --out, {outputPath: model}]
''')


@dsl.component(base_image='ghcr.io/example/asr-train:2.3.0')
def evaluate_wer(model: Input[Model], test_uri: str) -> float:
    import subprocess
    out = subprocess.run(['python', '-m', 'asrtrain.eval', '--model', model.path, '--test', test_uri],
                         check=True, capture_output=True, text=True).stdout
    return float(out.strip().splitlines()[-1])


@dsl.container_component
def publish_model(model: Input[Model], dest: str):
    return dsl.ContainerSpec(image='amazon/aws-cli:2.15.30', command=['aws', 's3', 'cp', '--recursive'],
                             args=[model.path, dest])


def _aws(task):
    kubernetes.use_secret_as_env(task, secret_name='speech-s3-creds',
                                 secret_key_to_env={'access_key': 'AWS_ACCESS_KEY_ID',
                                                    'secret_key': 'AWS_SECRET_ACCESS_KEY'})
    return task


@dsl.pipeline(name='asr-wav2vec2-finetune')
def asr_pipeline(corpus_root: str = 's3://example-speech/librispeech',
                 train_split: str = 'train-clean-100',
                 epochs: int = 10):
    base = dsl.importer(artifact_uri='s3://example-speech/checkpoints/wav2vec2-base-960h/',
                        artifact_class=Model, reimport=False)
    dl_train = _aws(DOWNLOAD_AUDIO(source_uri=f'{corpus_root}/{train_split}/'))
    dl_dev = _aws(DOWNLOAD_AUDIO(source_uri=f'{corpus_root}/dev-clean/'))
    ft_train = EXTRACT_FEATURES(audio_dir=dl_train.outputs['audio_dir'])
    ft_dev = EXTRACT_FEATURES(audio_dir=dl_dev.outputs['audio_dir'], sample_rate=16000)
    tune = FINETUNE(train_features=ft_train.outputs['features'], dev_features=ft_dev.outputs['features'],
                    base_model=base.output,
                    tokenizer_uri='s3://example-speech/tokenizers/librispeech-char/vocab.json',
                    epochs=epochs)
    tune.set_accelerator_type('nvidia.com/gpu').set_accelerator_limit(1)
    kubernetes.use_field_path_as_env(tune, env_name='POD_NAME', field_path='metadata.name')
    _aws(tune)
    wer = _aws(evaluate_wer(model=tune.outputs['model'], test_uri=f'{corpus_root}/test-clean/'))
    with dsl.If(wer.output < 0.12, name='wer-gate'):
        pub = _aws(publish_model(model=tune.outputs['model'],
                                 dest='s3://example-speech/registry/wav2vec2-librispeech/'))
        kubernetes.use_field_path_as_env(pub, env_name='POD_NAMESPACE', field_path='metadata.namespace')


if __name__ == '__main__':
    compiler.Compiler().compile(asr_pipeline, os.path.splitext(__file__)[0] + '.yaml')
