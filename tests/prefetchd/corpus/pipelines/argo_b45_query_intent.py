# ruff: noqa
"""Query-intent classifier for e-commerce search (XLM-R), Argo Workflow via Hera.

Query logs are sampled with polars (glob built from a workflow parameter), the
category taxonomy arrives as an S3 input artifact, per-language tokenized
datasets are loaded with datasets.load_from_disk (withItems), fine-tuning
takes Hydra overrides, evaluation pulls a golden set from MLflow and reads the
model the fine-tune step wrote to S3, promotion is gated by `when`, and a
notifier runs onExit. A shared HF cache PVC is mounted by the GPU steps.

Generate: python argo_b45_query_intent.py -> argo_b45_query_intent.yaml
"""
import os

from hera.workflows import DAG, Container, Parameter, S3Artifact, Script, Workflow
from hera.workflows import models as m

IMAGE = 'ghcr.io/shopco/query-intent:0.14.2'
HF_CACHE = m.VolumeMount(name='hf-cache', mount_path='/root/.cache/huggingface')

with Workflow(
    generate_name='query-intent-train-',
    entrypoint='main',
    on_exit='notify',
    arguments=[Parameter(name='query-logs', value='s3://shop-search-logs/queries/2024-05'),
               Parameter(name='run-tag', value='2024-05-31')],
    volumes=[m.Volume(name='hf-cache', persistent_volume_claim=m.PersistentVolumeClaimVolumeSource(claim_name='hf-hub-cache'))],
) as w:
    sample = Script(
        name='sample-queries', image=IMAGE, command=['python'],
        source=('import polars as pl\n'
                'lf = pl.scan_parquet("{{workflow.parameters.query-logs}}/*.parquet")\n'
                'df = lf.filter(pl.col("results") > 0).select("query", "clicked_category").collect()\n'
                'df.sample(n=200_000, seed=7).write_parquet("/tmp/sample.parquet")\n'),
        outputs=[m.Artifact(name='sample', path='/tmp/sample.parquet')],
    )
    taxonomy = Container(
        name='fetch-taxonomy', image='python:3.11-slim', command=['python', '-c'],
        args=['import json; t = json.load(open("/in/taxonomy.json")); json.dump(t["leaves"], open("/tmp/leaves.json", "w"))'],
        inputs=[S3Artifact(name='taxonomy', path='/in/taxonomy.json', bucket='shop-catalog',
                           key='taxonomy/v7/taxonomy.json', endpoint='s3.us-east-1.amazonaws.com', region='us-east-1')],
        outputs=[m.Artifact(name='leaves', path='/tmp/leaves.json')],
    )
    tokenize = Script(
        name='tokenize-lang', image=IMAGE, command=['python'],
        inputs=[Parameter(name='lang')],
        source=('from datasets import load_from_disk\n'
                'from transformers import AutoTokenizer\n'
                'ds = load_from_disk("s3://shop-search-data/query-intent/{{inputs.parameters.lang}}/hf/",\n'
                '                    storage_options={"client_kwargs": {"region_name": "us-east-1"}})\n'
                'tok = AutoTokenizer.from_pretrained("xlm-roberta-base")\n'
                'ds = ds.map(lambda b: tok(b["query"], truncation=True, max_length=32), batched=True)\n'
                'ds.save_to_disk("s3://shop-search-data/query-intent/{{inputs.parameters.lang}}/tokenized/")\n'),
        volume_mounts=[HF_CACHE],
    )
    finetune = Container(
        name='finetune-intent', image=IMAGE, command=['python', '-m', 'intent.train'],
        args=['data.train_path=s3://shop-search-data/query-intent/merged/train.parquet',
              'data.sample_path=/in/sample.parquet',
              'data.leaves=/in/leaves.json',
              'model.init=s3://shop-ml-artifacts/hf/xlm-roberta-base/',
              'trainer.default_root_dir=s3://shop-ml-artifacts/intent/runs/{{workflow.parameters.run-tag}}/',
              'export.uri=s3://shop-ml-artifacts/intent/models/{{workflow.parameters.run-tag}}/model.safetensors'],
        inputs=[m.Artifact(name='sample', path='/in/sample.parquet'), m.Artifact(name='leaves', path='/in/leaves.json')],
        volume_mounts=[HF_CACHE],
        resources=m.ResourceRequirements(limits={'nvidia.com/gpu': m.Quantity('1')}),
    )
    evaluate = Script(
        name='eval-intent', image=IMAGE, command=['python'],
        source=('import fsspec, mlflow, pandas as pd\n'
                'from safetensors.torch import load\n'
                'from intent.model import IntentModel\n'
                'golden = mlflow.artifacts.download_artifacts(\n'
                '    artifact_uri="s3://shop-ml-artifacts/mlflow/7/golden/artifacts/golden_queries.parquet")\n'
                'with fsspec.open("s3://shop-ml-artifacts/intent/models/{{workflow.parameters.run-tag}}/model.safetensors", "rb") as f:\n'
                '    model = IntentModel.from_state(load(f.read()))\n'
                'acc = model.accuracy(pd.read_parquet(golden))\n'
                'print("pass" if acc >= 0.91 else "fail")\n'),
    )
    promote = Container(
        name='promote', image='amazon/aws-cli:2.15.30', command=['aws', 's3', 'cp'],
        args=['s3://shop-ml-artifacts/intent/models/{{workflow.parameters.run-tag}}/model.safetensors',
              's3://shop-ml-artifacts/intent/models/prod/model.safetensors'],
    )
    notify = Container(
        name='notify', image='curlimages/curl:8.7.1', command=['sh', '-c'],
        args=['curl -s -X POST "$WEBHOOK" -d "query-intent {{workflow.name}} {{workflow.status}}"'],
        env=[m.EnvVar(name='WEBHOOK', value_from=m.EnvVarSource(secret_key_ref=m.SecretKeySelector(name='search-ml-slack', key='url')))],
    )
    with DAG(name='main'):
        s = sample(name='sample-queries')
        t = taxonomy(name='fetch-taxonomy')
        k = tokenize(name='tokenize', arguments={'lang': '{{item}}'}, with_items=['en', 'de', 'fr', 'es'])
        f = finetune(name='finetune-intent', depends='sample-queries && fetch-taxonomy && tokenize',
                     arguments=[s.get_artifact('sample').with_name('sample'), t.get_artifact('leaves').with_name('leaves')])
        e = evaluate(name='eval-intent', depends='finetune-intent')
        promote(name='promote', depends='eval-intent', when='{{tasks.eval-intent.outputs.result}} == pass')

if __name__ == '__main__':
    with open(os.path.splitext(__file__)[0] + '.yaml', 'w') as fh:
        fh.write(w.to_yaml())
