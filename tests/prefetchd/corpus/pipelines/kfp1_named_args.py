# ruff: noqa  (pipeline source in the SDK's own idiom: mutable defaults, typing.List)
"""Argument names decide direction (KFP v1 components from YAML text): `--src`/`--dst`,
`--input-dir`/`--output-dir`, `--dest`, `--save-to`; a condition and an exit handler.

Compile (kfp 1.8.x): python kfp1_named_args.py  -> kfp1_named_args.yaml
"""
import os

import kfp
from kfp import dsl
from kfp.components import load_component_from_text

COPY = load_component_from_text('''
name: Copy
inputs:
- {name: src, type: String}
- {name: dst, type: String}
implementation:
  container:
    image: ghcr.io/example/objcopy:0.2.0
    command: [objcopy, --src, {inputValue: src}, --dst, {inputValue: dst}]
''')

TRAIN = load_component_from_text('''
name: Train
inputs:
- {name: data, type: String}
- {name: save_to, type: String}
outputs:
- {name: acc, type: Float}
implementation:
  container:
    image: ghcr.io/example/tab-train:1.3.0
    command: [python, -m, train, --input-dir, {inputValue: data}, --save-to, {inputValue: save_to},
              --metrics, {outputPath: acc}]
''')

PUBLISH = load_component_from_text('''
name: Publish
inputs:
- {name: model, type: String}
- {name: dest, type: String}
implementation:
  container:
    image: ghcr.io/example/registry-cli:0.4.0
    command: [registry, push, --source, {inputValue: model}, --dest, {inputValue: dest}]
''')

NOTIFY = load_component_from_text('''
name: Notify
implementation:
  container:
    image: curlimages/curl:8.8.0
    command: [sh, -c, 'echo done']
''')


@dsl.pipeline(name='tab-train')
def tab_train(raw: str = 's3://example-tab/raw/adult/'):
    bye = NOTIFY()
    with dsl.ExitHandler(bye):
        cp = COPY(src=raw, dst='s3://example-tab/work/adult/')
        tr = TRAIN(data='s3://example-tab/work/adult/', save_to='s3://example-models/adult/').after(cp)
        with dsl.Condition(tr.outputs['acc'] > 0.85):
            PUBLISH(model='s3://example-models/adult/', dest='s3://example-registry/adult/')


if __name__ == '__main__':
    kfp.compiler.Compiler().compile(tab_train, os.path.splitext(__file__)[0] + '.yaml')
