# ruff: noqa
"""Release evaluation of an NLU model through a WorkflowTemplate library (Hera).

Two files:
- argo_b72_eval_library_templates.yaml: WorkflowTemplate `nlu-eval-lib`
  with container `fetch-benchmark` (input bench_uri, default the GLUE v1
  copy), script `run-eval` (boto3, reads the model's config and weights),
  and a DAG template `eval-suite` whose tasks call those two by plain name
  (the library's own templates), run-eval looping over withItems tasks.
- argo_b72_eval_library.yaml: the ConfigMap `nlu-eval-config` (bench_root)
  and the Workflow. The workflow parameter bench_root takes its value from
  that ConfigMap (valueFrom.configMapKeyRef); the steps entrypoint calls the
  library's eval-suite with templateRef, overriding bench_uri, and a local
  nested steps template for the report.

Generate: python argo_b72_eval_library.py
"""
import os

from hera.workflows import (
    DAG, Artifact, Container, Parameter, Script, Step, Steps, Workflow, WorkflowTemplate,
)
from hera.workflows import models as m

IMG = 'ghcr.io/nlu-lab/eval:1.9.2'

with WorkflowTemplate(name='nlu-eval-lib', entrypoint='eval-suite') as lib:
    fetch = Container(
        name='fetch-benchmark',
        image='amazon/aws-cli:2.17.20',
        inputs=[Parameter(name='bench_uri', default='s3://nlu-bench/glue/v1/')],
        command=['aws', 's3', 'sync', '--only-show-errors'],
        args=['{{inputs.parameters.bench_uri}}', '/bench'],
        outputs=[Artifact(name='bench', path='/bench')],
    )
    run_eval = Script(
        name='run-eval',
        image=IMG,
        command=['python'],
        inputs=[Parameter(name='model_uri'), Parameter(name='task', default='mnli'),
                Artifact(name='bench', path='/bench')],
        outputs=[Parameter(name='score', value_from=m.ValueFrom(path='/tmp/score'))],
        source='''import boto3
from nlu_eval import evaluate
uri = "{{inputs.parameters.model_uri}}"
bucket, prefix = uri[len("s3://"):].split("/", 1)
s3 = boto3.client("s3")
s3.download_file(bucket, prefix + "config.json", "/tmp/config.json")
s3.download_file(bucket, prefix + "model.safetensors", "/tmp/model.safetensors")
score = evaluate("/tmp", task="{{inputs.parameters.task}}", data_dir="/bench/{{inputs.parameters.task}}")
open("/tmp/score", "w").write(str(score))
''',
    )
    with DAG(name='eval-suite', inputs=[Parameter(name='model_uri'),
                                        Parameter(name='bench_uri', default='s3://nlu-bench/glue/v1/')]):
        f = fetch(name='fetch', arguments=[Parameter(name='bench_uri', value='{{inputs.parameters.bench_uri}}')])
        r = run_eval(name='evaluate',
                     arguments=[Parameter(name='model_uri', value='{{inputs.parameters.model_uri}}'),
                                Parameter(name='task', value='{{item}}'),
                                f.get_artifact('bench').with_name('bench')],
                     with_items=['mnli', 'qnli', 'sst2'])
        f >> r

with Workflow(
    generate_name='nlu-release-eval-',
    entrypoint='release',
    arguments=[
        Parameter(name='model_uri', value='s3://nlu-models/deberta-v3-large/ckpt-18000/'),
        Parameter(name='bench_root', value_from=m.ValueFrom(
            config_map_key_ref=m.ConfigMapKeySelector(name='nlu-eval-config', key='bench_root'))),
    ],
) as wf:
    tok = Container(
        name='check-tokenizer',
        image=IMG,
        command=['python', '-m', 'nlu_eval.check_tokenizer'],
        args=['--tokenizer', '{{workflow.parameters.model_uri}}tokenizer.json',
              '--vocab-ref', 's3://nlu-reference/vocab/deberta-v3-spm-128k.model'],
    )
    report = Container(
        name='write-report',
        image=IMG,
        inputs=[Parameter(name='model_uri', default='s3://nlu-models/deberta-v3-large/latest/')],
        command=['python', '-m', 'nlu_eval.report'],
        args=['--model-card', '{{inputs.parameters.model_uri}}README.md',
              '--baseline', 's3://nlu-reports/baselines/deberta-v3-large.json',
              '--out', 's3://nlu-reports/releases/{{workflow.name}}/report.md'],
    )
    with Steps(name='publish-report') as pr:
        report(name='report', arguments=[Parameter(name='model_uri', value='{{workflow.parameters.model_uri}}')])
    with Steps(name='release'):
        tok(name='tokenizer-check')
        Step(name='suite', template_ref=m.TemplateRef(name='nlu-eval-lib', template='eval-suite'),
             arguments=[Parameter(name='model_uri', value='{{workflow.parameters.model_uri}}'),
                        Parameter(name='bench_uri', value='{{workflow.parameters.bench_root}}/glue/')])
        pr(name='publish')

if __name__ == '__main__':
    import yaml
    base = os.path.splitext(__file__)[0]
    with open(base + '_templates.yaml', 'w') as f:
        f.write(lib.to_yaml())
    cm_doc = {'apiVersion': 'v1', 'kind': 'ConfigMap', 'metadata': {'name': 'nlu-eval-config'},
              'data': {'bench_root': 's3://nlu-bench/2025-01'}}
    with open(base + '.yaml', 'w') as f:
        f.write(yaml.safe_dump(cm_doc, sort_keys=False))
        f.write('---\n')
        f.write(wf.to_yaml())
