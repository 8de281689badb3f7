# ruff: noqa
"""Nightly LoRA fine-tune of Llama-3-8B, evaluated with the cluster-wide
`llm-eval-lib` ClusterWorkflowTemplate (argo_blind_cwt_eval_lib.yaml) (Hera, DAG).

- fetch-mmlu / fetch-gsm8k: `templateRef` (clusterScope) to fetch-benchmark with
  the benchmark prefix passed as an argument.
- train-lora: local GPU template: nodeSelector, tolerations, affinity,
  podSpecPatch, retryStrategy, a mutex; base model from a MinIO S3 artifact,
  training data from a workflow parameter.
- score-*: `templateRef` to the library's script template `score`; two pass
  the adapter as `from:` (overriding the template's default S3 model), one
  keeps the default base model; one overrides the prompt template parameter.
- compare: `depends` with `.Succeeded || .Failed`.
- publish-mmlu: `templateRef` with a `when`; its run-id default comes from
  this Workflow's own parameter `run-id`.

Generate: python argo_blind_cwt_eval_run.py  -> argo_blind_cwt_eval_run.yaml
"""
import os

from hera.workflows import DAG, Artifact, Container, Parameter, S3Artifact, Script, Task, Workflow
from hera.workflows import models as m

LIB = 'llm-eval-lib'


def ref(template):
    return m.TemplateRef(name=LIB, template=template, cluster_scope=True)


with Workflow(
    generate_name='llama3-lora-nightly-',
    entrypoint='main',
    service_account_name='llm-trainer',
    arguments=[
        Parameter(name='train-data', value='s3://example-llm-data/sft/mix-v3/'),
        Parameter(name='run-id', value='nightly-llama3-lora'),
    ],
) as w:
    train = Container(
        name='train-lora', image='ghcr.io/example/llm-train:1.4.0',
        command=['torchrun'],
        args=['--nproc_per_node=8', '-m', 'sft.train',
              '--train-data', '{{workflow.parameters.train-data}}',
              '--base-model', '/base', '--lora-rank', '16', '--output-dir', '/out/adapter'],
        inputs=[S3Artifact(name='base', path='/base', bucket='base-models',
                           key='meta-llama/Meta-Llama-3-8B/',
                           endpoint='minio.ml-storage.svc.cluster.local:9000', insecure=True,
                           access_key_secret=m.SecretKeySelector(name='minio-creds', key='accesskey'),
                           secret_key_secret=m.SecretKeySelector(name='minio-creds', key='secretkey'))],
        outputs=[Artifact(name='adapter', path='/out/adapter')],
        node_selector={'nvidia.com/gpu.product': 'NVIDIA-H100-80GB-HBM3'},
        tolerations=[m.Toleration(key='nvidia.com/gpu', operator='Exists', effect='NoSchedule')],
        affinity=m.Affinity(node_affinity=m.NodeAffinity(
            required_during_scheduling_ignored_during_execution=m.NodeSelector(node_selector_terms=[
                m.NodeSelectorTerm(match_expressions=[m.NodeSelectorRequirement(
                    key='topology.kubernetes.io/zone', operator='In', values=['us-east-1a'])])]))),
        pod_spec_patch='{"volumes":[{"name":"dshm","emptyDir":{"medium":"Memory","sizeLimit":"64Gi"}}],'
                       '"containers":[{"name":"main","volumeMounts":[{"name":"dshm","mountPath":"/dev/shm"}]}]}',
        retry_strategy=m.RetryStrategy(limit='2', retry_policy='OnFailure',
                                       backoff=m.Backoff(duration='5m', factor='2')),
        synchronization=m.Synchronization(mutexes=[m.Mutex(name='h100-pool-a')]),
        resources=m.ResourceRequirements(limits={'nvidia.com/gpu': m.Quantity('8')}),
    )
    compare = Script(
        name='compare', image='python:3.11-slim', command=['python'],
        inputs=[Parameter(name='lora-mmlu'), Parameter(name='lora-gsm8k'), Parameter(name='base-mmlu')],
        source=(
            'lora = float("{{inputs.parameters.lora-mmlu}}" or 0)\n'
            'base = float("{{inputs.parameters.base-mmlu}}")\n'
            'print("ship" if lora > base + 0.5 else "hold")\n'
        ),
    )
    with DAG(name='main'):
        fm = Task(name='fetch-mmlu', template_ref=ref('fetch-benchmark'),
                  arguments=[Parameter(name='bench-uri', value='s3://example-llm-bench/mmlu/v2/')])
        fg = Task(name='fetch-gsm8k', template_ref=ref('fetch-benchmark'),
                  arguments=[Parameter(name='bench-uri', value='s3://example-llm-bench/gsm8k/test/')])
        tr = train(name='train-lora')
        sm = Task(name='score-mmlu', template_ref=ref('score'), depends='train-lora && fetch-mmlu',
                  arguments=[Parameter(name='bench-name', value='mmlu'),
                             Artifact(name='model', from_='{{tasks.train-lora.outputs.artifacts.adapter}}'),
                             Artifact(name='bench', from_='{{tasks.fetch-mmlu.outputs.artifacts.bench}}')])
        sg = Task(name='score-gsm8k', template_ref=ref('score'), depends='train-lora && fetch-gsm8k',
                  arguments=[Parameter(name='bench-name', value='gsm8k'),
                             Parameter(name='prompt-template', value='s3://example-llm-bench/prompts/gsm8k-cot.jinja'),
                             Artifact(name='model', from_='{{tasks.train-lora.outputs.artifacts.adapter}}'),
                             Artifact(name='bench', from_='{{tasks.fetch-gsm8k.outputs.artifacts.bench}}')])
        sb = Task(name='score-base', template_ref=ref('score'), depends='fetch-mmlu',
                  arguments=[Parameter(name='bench-name', value='mmlu-base'),
                             Artifact(name='bench', from_='{{tasks.fetch-mmlu.outputs.artifacts.bench}}')])
        cmp = compare(name='compare',
                      depends='(score-mmlu.Succeeded || score-mmlu.Failed) && '
                              '(score-gsm8k.Succeeded || score-gsm8k.Failed) && score-base',
                      arguments={'lora-mmlu': '{{tasks.score-mmlu.outputs.result}}',
                                 'lora-gsm8k': '{{tasks.score-gsm8k.outputs.result}}',
                                 'base-mmlu': '{{tasks.score-base.outputs.result}}'})
        Task(name='publish-mmlu', template_ref=ref('publish-scores'), depends='compare',
             when='{{tasks.compare.outputs.result}} == ship',
             arguments=[Parameter(name='bench-name', value='mmlu'),
                        Artifact(name='scores', from_='{{tasks.score-mmlu.outputs.artifacts.scores}}')])

if __name__ == '__main__':
    with open(os.path.splitext(__file__)[0] + '.yaml', 'w') as fh:
        fh.write(w.to_yaml())
