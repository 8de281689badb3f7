# ruff: noqa
"""Argo (Hera, blind test r3): `fedeval-lib`, a WorkflowTemplate for federated (per-region)
evaluation of ranking models, used directly and through templateRef by
argo_r3_rerank_run.yaml.

Idioms: script templates whose source uses {{inputs.parameters.*}} placeholders to build
locations (an f-string over bucket/site/period, a '+' join onto an input whose default is
'{{workflow.parameters.model-uri}}'), fsspec get / open 'rb' / open 'w', withItems over dicts,
a fan-in of a looped task's results, a runtime-only report path ({{workflow.name}}),
secret env, activeDeadlineSeconds.

Generate: /tmp/hera/bin/python argo_r3_fedeval_lib.py -> argo_r3_fedeval_lib.yaml
"""
import os

from hera.workflows import DAG, Env, Parameter, Script, SecretEnv, Task, WorkflowTemplate
from hera.workflows import models as m

SITE_EVAL = '''
import json

import fsspec
import numpy as np
import onnxruntime as ort
import pandas as pd

site = "{{inputs.parameters.site}}"
bucket = "{{inputs.parameters.region-bucket}}"
period = "{{inputs.parameters.period}}"
holdout = f"s3://{bucket}/holdout/{site}/{period}/"
fs = fsspec.filesystem("s3")
fs.get(holdout, "/tmp/holdout/", recursive=True)
with fsspec.open("{{inputs.parameters.model-uri}}" + "reranker.onnx", "rb") as f:
    sess = ort.InferenceSession(f.read())
df = pd.read_parquet("/tmp/holdout/")
scores = sess.run(None, {"features": np.stack(df["features"].to_numpy()).astype("float32")})[0]
df["score"] = scores[:, 0]
ndcg = float(df.groupby("query_id").apply(lambda g: (g.sort_values("score", ascending=False)["gain"].head(10)
                                                      / np.log2(np.arange(2, 2 + min(10, len(g))))).sum()).mean())
print(json.dumps({"site": site, "ndcg10": ndcg}))
'''

AGGREGATE = '''
import json

import fsspec

rows = json.loads("""{{inputs.parameters.results}}""")
rows = [json.loads(r) if isinstance(r, str) else r for r in rows]
summary = {"sites": rows, "mean_ndcg10": sum(r["ndcg10"] for r in rows) / len(rows)}
with fsspec.open("s3://acme-fedeval-reports/{{workflow.name}}/summary.json", "w") as f:
    json.dump(summary, f)
print(json.dumps(summary))
'''

SITES = [
    {'site': 'eu-west-1', 'bucket': 'acme-fed-eu'},
    {'site': 'us-east-1', 'bucket': 'acme-fed-us'},
    {'site': 'ap-south-1', 'bucket': 'acme-fed-ap'},
]

with WorkflowTemplate(
    name='fedeval-lib',
    entrypoint='federated-eval',
    arguments=[Parameter(name='model-uri', value='s3://acme-recs-models/reranker/prod/'),
               Parameter(name='period', value='2024-10')],
) as w:
    site_eval = Script(
        name='site-eval', image='ghcr.io/acme-recs/eval:2.2.0', command=['python'], source=SITE_EVAL,
        inputs=[Parameter(name='site'), Parameter(name='region-bucket'),
                Parameter(name='period', default='{{workflow.parameters.period}}'),
                Parameter(name='model-uri', default='{{workflow.parameters.model-uri}}')],
        env=[Env(name='AWS_ROLE_SESSION_NAME', value='fedeval'),
             SecretEnv(name='REGION_TOKEN', secret_name='fed-region-token', secret_key='token')],
        active_deadline_seconds=3600,
    )
    aggregate = Script(
        name='aggregate', image='ghcr.io/acme-recs/eval:2.2.0', command=['python'], source=AGGREGATE,
        inputs=[Parameter(name='results')],
    )
    with DAG(name='federated-eval'):
        se = Task(name='site-eval', template=site_eval, with_items=SITES,
                  arguments=[Parameter(name='site', value='{{item.site}}'),
                             Parameter(name='region-bucket', value='{{item.bucket}}')])
        ag = aggregate(name='aggregate', arguments={'results': '{{tasks.site-eval.outputs.result}}'})
        se >> ag

if __name__ == '__main__':
    with open(os.path.splitext(__file__)[0] + '.yaml', 'w') as fh:
        fh.write(w.to_yaml())
