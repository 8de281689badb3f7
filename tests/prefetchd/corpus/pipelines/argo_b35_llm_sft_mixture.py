# ruff: noqa
# ruff: noqa
"""SFT on a weighted data mixture as an Argo Workflow (Hera), driven by Argo expression tags.

The mixture is one JSON workflow parameter; jsonpath() pulls the weights
out of it for the packer and for the `when` of the evaluation tasks; sprig
functions build the corpus and base-model locations from the bucket and
model-name parameters. The tokenizer location comes from the platform team's
ConfigMap (valueFrom.configMapKeyRef). The checkpoint and the mixture slug
are exported with globalName and the entrypoint DAG exports the headline
eval score through valueFrom.expression; the exit handler reports them.

Generate: python argo_b35_llm_sft_mixture.py  -> argo_b35_llm_sft_mixture.yaml
"""
import os

from hera.workflows import DAG, Artifact, Container, Parameter, S3Artifact, Script, Workflow
from hera.workflows import models as m

TOK_IMAGE = 'ghcr.io/acme-llm/tokenizer:0.9.1'
BUCKET = "sprig.trimSuffix('/', workflow.parameters.data_bucket)"
MIXTURE = 'workflow.parameters.mixture'

with Workflow(
    generate_name='sft-mixture-',
    entrypoint='main',
    on_exit='report',
    arguments=[
        Parameter(name='base_model', value='Llama-3.1-8B'),
        Parameter(name='data_bucket', value='s3://acme-llm-data/'),
        Parameter(name='mixture',
                  value='{"name": "SFT-v4.1", "sources": {"chat": 0.5, "code": 0.3, "math": 0.2}, '
                        '"max_steps": "12000"}'),
        Parameter(name='num_shards', value='16'),
        Parameter(name='tokenizer_uri',
                  value_from=m.ValueFrom(config_map_key_ref=m.ConfigMapKeySelector(
                      name='llm-platform-defaults', key='tokenizer_uri'))),
    ],
) as w:
    validate = Script(
        name='validate-mixture', image='python:3.11-slim', command=['python'],
        source=('import json, re\n'
                'm = json.loads("""{{workflow.parameters.mixture}}""")\n'
                'assert abs(sum(m["sources"].values()) - 1.0) < 1e-6, m\n'
                'open("/tmp/slug", "w").write(re.sub(r"[^a-z0-9]+", "-", m["name"].lower()))\n'),
        outputs=[Parameter(name='slug', global_name='mixture_slug',
                           value_from=m.ValueFrom(path='/tmp/slug'))],
    )
    tokenize = Container(
        name='tokenize', image=TOK_IMAGE,
        command=['python', '-m', 'tok.build'],
        args=['--source', '{{inputs.parameters.src}}', '--tokenizer', '{{workflow.parameters.tokenizer_uri}}',
              '--shards', '{{inputs.parameters.shards}}', '--out', '/out'],
        inputs=[Parameter(name='src'), Parameter(name='shards', value='8')],
        outputs=[Artifact(name='tokens', path='/out')],
    )
    pack = Container(
        name='pack-mixture', image='ghcr.io/acme-llm/mixer:2.3.0',
        command=['python', '-m', 'mixer.pack'],
        args=['--weights', "{{=toJson(jsonpath(workflow.parameters.mixture, '$.sources'))}}",
              '--chat', '/in/chat', '--code', '/in/code', '--math', '/in/math', '--out', '/packed'],
        inputs=[Artifact(name='chat', path='/in/chat'), Artifact(name='code', path='/in/code'),
                Artifact(name='math', path='/in/math')],
        outputs=[Artifact(name='packed', path='/packed')],
    )
    finetune = Container(
        name='finetune', image='ghcr.io/acme-llm/trainer:2.3.0',
        command=['torchrun', '--nproc-per-node', '8', '-m', 'trainer.sft'],
        args=['--base', '/base', '--data', '/data', '--tokenizer', '{{workflow.parameters.tokenizer_uri}}',
              '--max-steps', "{{=asInt(jsonpath(workflow.parameters.mixture, '$.max_steps'))}}",
              '--micro-batch', "{{=asInt(workflow.parameters.num_shards) >= 16 ? '4' : '2'}}",
              '--out', '/ckpt', '--uri-file', '/tmp/ckpt-uri'],
        inputs=[Artifact(name='packed', path='/data'),
                S3Artifact(name='base-weights', path='/base', bucket='acme-llm-models',
                           key="base/{{=sprig.lower(workflow.parameters.base_model)}}/",
                           endpoint='s3.amazonaws.com')],
        outputs=[Artifact(name='model', path='/ckpt'),
                 Parameter(name='checkpoint', global_name='sft_checkpoint',
                           value_from=m.ValueFrom(path='/tmp/ckpt-uri'))],
    )
    evaluate = Container(
        name='eval-suite', image='ghcr.io/acme-llm/lm-eval:0.4.3',
        command=['lm_eval', '--model', 'hf', '--model_args', 'pretrained=/model'],
        args=['--tasks', '{{inputs.parameters.suite}}', '--data_dir', '{{inputs.parameters.data}}'],
        inputs=[Parameter(name='suite'), Parameter(name='data'), Artifact(name='model', path='/model')],
    )
    report = Container(
        name='report', image='curlimages/curl:8.7.1', command=['sh', '-c'],
        args=['curl -sf -X POST https://registry.acme-llm.internal/api/runs '
              '-d "{\\"run\\": \\"{{workflow.name}}\\", \\"status\\": \\"{{workflow.status}}\\", '
              '\\"checkpoint\\": \\"{{workflow.outputs.parameters.sft_checkpoint}}\\", '
              '\\"mixture\\": \\"{{workflow.outputs.parameters.mixture_slug}}\\"}"'],
    )

    with DAG(name='main', outputs=[Parameter(
            name='headline', global_name='eval_headline',
            value_from=m.ValueFrom(expression=(
                "tasks['eval-gsm8k'].status == 'Succeeded' ? tasks['eval-gsm8k'].outputs.result "
                ": tasks['eval-humaneval'].outputs.result")))]):
        v = validate(name='validate-mixture')
        chat = tokenize(name='tokenize-chat', arguments={
            'src': '{{=' + BUCKET + " + '/sft/chat/ultrachat-200k/'}}",
            'shards': "{{=asInt(workflow.parameters.num_shards) > 8 ? '8' : workflow.parameters.num_shards}}"})
        code = tokenize(name='tokenize-code', arguments={
            'src': '{{=' + BUCKET + '}}/sft/code/{{=sprig.lower(sprig.replace(\'.\', \'-\', jsonpath('
                   + MIXTURE + ", '$.name')))}}/",
            'shards': '{{workflow.parameters.num_shards}}'})
        math = tokenize(name='tokenize-math', arguments={
            'src': '{{=' + BUCKET + '}}/sft/math/metamathqa/'})
        p = pack(name='pack-mixture', arguments=[
            chat.get_artifact('tokens').with_name('chat'),
            code.get_artifact('tokens').with_name('code'),
            math.get_artifact('tokens').with_name('math')])
        ft = finetune(name='finetune', arguments=[p.get_artifact('packed').with_name('packed')])
        ev_code = evaluate(name='eval-humaneval',
                           when="{{=jsonpath(workflow.parameters.mixture, '$.sources.code') > 0}}",
                           arguments=[Parameter(name='suite', value='humaneval'),
                                      Parameter(name='data', value='{{=' + BUCKET + " + '/eval/humaneval/'}}"),
                                      ft.get_artifact('model').with_name('model')])
        ev_math = evaluate(name='eval-gsm8k',
                           when="{{=jsonpath(workflow.parameters.mixture, '$.sources.math') >= 0.1}}",
                           arguments=[Parameter(name='suite', value='gsm8k'),
                                      Parameter(name='data', value='{{=' + BUCKET + " + '/eval/gsm8k/test.jsonl'}}"),
                                      ft.get_artifact('model').with_name('model')])
        v >> [chat, code, math]
        [chat, code, math] >> p >> ft >> [ev_code, ev_math]

if __name__ == '__main__':
    with open(os.path.splitext(__file__)[0] + '.yaml', 'w') as f:
        f.write(w.to_yaml())
