# ruff: noqa
# ruff: noqa
"""deepseek-coder-6.7b SFT on execution-filtered OSS-Instruct data (Argo Workflow via Hera).

resolve-mirror reads the HF mirror index (an S3 input artifact) and writes
the dataset's mirrored prefix to a file that becomes an output parameter;
tokenize reads that prefix into shards on the run's volumeClaimTemplate,
exec-filter keeps samples whose tests pass in a gVisor sandbox (podSpecPatch),
sft-train gets the base model as an S3 artifact and holds a GPU-quota
semaphore, evals fan out over two mirrored benchmarks, and publish (guarded by
a registry mutex) runs only when the summary says promote. notify runs on exit.

Generate: python argo_b41_coder_oss_instruct.py  -> argo_b41_coder_oss_instruct.yaml
"""
import os

from hera.workflows import (DAG, Container, Env, Parameter, RetryStrategy, S3Artifact, Script, Workflow)
from hera.workflows import models as m

WORK = m.VolumeMount(name='work', mount_path='/work')
WORK_RO = m.VolumeMount(name='work', mount_path='/work', read_only=True)
TRAIN_IMAGE = 'ghcr.io/acme-code/trainer:2.3.1-cu121'

RESOLVE_SRC = '''
import json
repo = "{{inputs.parameters.hf-repo}}"
with open("/tmp/index.json") as f:
    entry = json.load(f)["datasets"][repo]
uri = entry["root"].rstrip("/") + "/" + entry["revision"] + "/"
with open("/tmp/dataset_uri", "w") as f:
    f.write(uri)
print(uri)
'''

SUMMARIZE_SRC = '''
import json
scores = {}
for raw in json.loads(\'\'\'{{inputs.parameters.metrics}}\'\'\'):
    m = json.loads(raw) if isinstance(raw, str) else raw
    scores.update({task: v["pass@1"] for task, v in m.items()})
floor = {"humaneval": 0.70, "mbpp": 0.62}
print("promote" if all(scores.get(k, 0.0) >= v for k, v in floor.items()) else "hold")
'''

with Workflow(
    generate_name='coder-oss-instruct-sft-',
    entrypoint='main',
    on_exit='notify',
    service_account_name='llm-pipelines',
    arguments=[Parameter(name='hf-repo', value='ise-uiuc/Magicoder-OSS-Instruct-75K'),
               Parameter(name='base-model-key', value='deepseek-ai/deepseek-coder-6.7b-base/'),
               Parameter(name='epochs', value='3')],
    volume_claim_templates=[m.PersistentVolumeClaim(
        metadata=m.ObjectMeta(name='work'),
        spec=m.PersistentVolumeClaimSpec(
            access_modes=['ReadWriteOnce'], storage_class_name='gp3-csi',
            resources=m.VolumeResourceRequirements(requests={'storage': m.Quantity('250Gi')})))],
) as w:
    resolve = Script(
        name='resolve-mirror', image='python:3.11-slim', command=['python'], source=RESOLVE_SRC,
        inputs=[Parameter(name='hf-repo'),
                S3Artifact(name='mirror-index', path='/tmp/index.json', bucket='llm-hf-mirror',
                           key='_index/datasets.json', endpoint='s3.us-east-1.amazonaws.com')],
        outputs=[Parameter(name='dataset-uri', value_from=m.ValueFrom(path='/tmp/dataset_uri'))],
    )
    tokenize = Container(
        name='tokenize', image='ghcr.io/acme-code/datatools:1.9.0',
        command=['python', '-m', 'acme_code.tokenize'],
        args=['--corpus', '{{inputs.parameters.dataset-uri}}',
              '--tokenizer', '$(TOKENIZER_URI)',
              '--num-shards', '64', '--out', '/work/shards'],
        inputs=[Parameter(name='dataset-uri')],
        env=[Env(name='TOKENIZER_URI', value='s3://llm-models/deepseek-ai/deepseek-coder-6.7b-base/tokenizer.json')],
        volume_mounts=[WORK],
        retry_strategy=RetryStrategy(limit='3', retry_policy='OnError'),
    )
    exec_filter = Container(
        name='exec-filter', image='ghcr.io/acme-code/sandbox-runner:0.6.2',
        command=['python', '-m', 'sandbox_runner.filter'],
        args=['--in', '/work/shards', '--out', '/work/filtered', '--timeout', '10', '--workers', '64'],
        volume_mounts=[WORK],
        pod_spec_patch='{"runtimeClassName": "gvisor", "containers": [{"name": "main", '
                       '"resources": {"limits": {"cpu": "64", "memory": "128Gi"}}}]}',
    )
    train = Container(
        name='sft-train', image=TRAIN_IMAGE,
        command=['torchrun', '--nproc_per_node', '8', '-m', 'acme_code.sft'],
        args=['--model_name_or_path', '/models/base',
              '--train_shards', '/work/filtered',
              '--num_train_epochs', '{{workflow.parameters.epochs}}',
              '--output_dir', '/work/ckpt'],
        inputs=[S3Artifact(name='base-model', path='/models/base', bucket='llm-models',
                           key='{{workflow.parameters.base-model-key}}',
                           endpoint='s3.us-east-1.amazonaws.com')],
        volume_mounts=[WORK],
        pod_spec_patch='{"containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "8"}}}], '
                       '"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}',
        synchronization=m.Synchronization(semaphores=[m.SemaphoreRef(
            config_map_key_ref=m.ConfigMapKeySelector(name='gpu-quota', key='h100-8x'))]),
        retry_strategy=RetryStrategy(limit='2', retry_policy='Always',
                                     expression='lastRetry.exitCode == 137 || lastRetry.status == "Error"'),
    )
    evaluate = Container(
        name='eval-bench', image='ghcr.io/acme-code/code-eval:1.3.0',
        command=['bigcode-eval'],
        args=['--task', '{{inputs.parameters.bench}}',
              '--dataset_uri', '{{inputs.parameters.data-uri}}',
              '--model', '/work/ckpt', '--n_samples', '20',
              '--metric_output_path', '/tmp/metrics.json'],
        inputs=[Parameter(name='bench'), Parameter(name='data-uri')],
        outputs=[Parameter(name='metrics', value_from=m.ValueFrom(path='/tmp/metrics.json'))],
        volume_mounts=[WORK_RO],
        pod_spec_patch='{"containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}',
    )
    save_scores = Script(
        name='summarize', image='python:3.11-slim', command=['python'], source=SUMMARIZE_SRC,
        inputs=[Parameter(name='metrics')],
    )
    publish = Container(
        name='publish', image='amazon/aws-cli:2.15.30',
        command=['aws', 's3', 'sync', '--only-show-errors', '/work/ckpt/'],
        args=['s3://llm-registry/deepseek-coder-6.7b-oss-instruct/{{workflow.name}}/'],
        volume_mounts=[WORK_RO],
        synchronization=m.Synchronization(mutexes=[m.Mutex(name='llm-registry-publish')]),
    )
    notify = Container(
        name='notify', image='curlimages/curl:8.8.0', command=['sh', '-c'],
        args=['curl -fsS -X POST -d "{\\"text\\": \\"{{workflow.name}} {{workflow.status}}\\"}" '
              'http://slack-relay.infra/hook/llm-training'],
    )

    with DAG(name='main'):
        r = resolve(name='resolve-mirror', arguments={'hf-repo': '{{workflow.parameters.hf-repo}}'})
        t = tokenize(name='tokenize',
                     arguments={'dataset-uri': '{{tasks.resolve-mirror.outputs.parameters.dataset-uri}}'})
        f = exec_filter(name='exec-filter')
        tr = train(name='sft-train')
        ev = evaluate(name='eval',
                      arguments={'bench': '{{item.bench}}', 'data-uri': '{{item.uri}}'},
                      with_items=[{'bench': 'humaneval',
                                   'uri': 's3://llm-hf-mirror/datasets/openai/openai_humaneval/7dce6050/'},
                                  {'bench': 'mbpp',
                                   'uri': 's3://llm-hf-mirror/datasets/google-research-datasets/mbpp/4bb6404f/'}])
        s = save_scores(name='summarize', arguments={'metrics': '{{tasks.eval.outputs.parameters.metrics}}'})
        p = publish(name='publish', when='{{tasks.summarize.outputs.result}} == promote')
        r >> t >> f >> tr >> ev >> s >> p

if __name__ == '__main__':
    with open(os.path.splitext(__file__)[0] + '.yaml', 'w') as f:
        f.write(w.to_yaml())
