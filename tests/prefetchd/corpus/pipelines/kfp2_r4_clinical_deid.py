# ruff: noqa
"""KFP v2 (blind test r4): clinical note de-identification and a PHI-safe NER fine-tune.

Idioms: deltalake.DeltaTable over a table URI with a pinned version, a `python -c` program
with argparse whose `--abbrev-map` default is a location the command line never overrides,
a config dict built in code whose values are locations, an existing claim of NER weights
mounted read-only (sub_path), kubernetes.use_secret_as_volume for a DB credential,
mlflow.artifacts.download_artifacts of an s3:// run artifact, tf.io.gfile.GFile write,
an ExitHandler, dsl.If on a boolean parameter.

Compile: /tmp/kfp2/bin/python kfp2_r4_clinical_deid.py
"""
import os

from kfp import compiler, dsl, kubernetes

NLP = 'ghcr.io/acme-health/clinical-nlp:3.2.0'
PY = 'python:3.11-slim'

NORMALIZE = '''
import argparse, json
import pandas as pd
import fsspec

p = argparse.ArgumentParser()
p.add_argument("--notes", required=True)
p.add_argument("--abbrev-map", default="s3://acme-health-ref/abbreviations/clinical-abbrev-v4.csv")
p.add_argument("--normalized", required=True)
a = p.parse_args()
abbrev = pd.read_csv(a.abbrev_map)
notes = pd.read_parquet(a.notes)
table = dict(zip(abbrev["abbr"], abbrev["expansion"]))
notes["text"] = notes["text"].map(lambda t: " ".join(table.get(w, w) for w in t.split()))
notes.to_parquet(a.normalized)
'''


@dsl.component(base_image=NLP, packages_to_install=['deltalake==0.21.0'])
def extract_notes(table_uri: str, table_version: int, since: str, notes: dsl.Output[dsl.Dataset]):
    from deltalake import DeltaTable

    dt = DeltaTable(table_uri, version=table_version)
    df = dt.to_pandas(columns=["note_id", "patient_id", "note_type", "text", "written_at"],
                      filters=[("written_at", ">=", since)])
    df.to_parquet(notes.path)


@dsl.container_component
def normalize_abbrev(notes: dsl.Input[dsl.Dataset], normalized: dsl.Output[dsl.Dataset]):
    return dsl.ContainerSpec(
        image=NLP,
        command=['python', '-c', NORMALIZE],
        args=['--notes', notes.path, '--normalized', normalized.path],
    )


@dsl.component(base_image=NLP)
def deid_notes(notes: dsl.Input[dsl.Dataset], surrogate_release: str, deid: dsl.Output[dsl.Dataset]):
    import pandas as pd
    from acme_deid import Scrubber  # shared helper in the image

    cfg = {
        "ner_dir": "/models/phi-ner/roberta-i2b2-2014",
        "surrogates": f"s3://acme-health-ref/surrogates/{surrogate_release}/names.parquet",
        "date_shift_days": 37,
    }
    names = pd.read_parquet(cfg["surrogates"])
    scrub = Scrubber(cfg["ner_dir"], surrogate_names=names, date_shift=cfg["date_shift_days"])
    df = pd.read_parquet(notes.path)
    df["text"] = [scrub(t) for t in df["text"]]
    df.to_parquet(deid.path)


@dsl.component(base_image=NLP, packages_to_install=['mlflow==2.17.2'])
def finetune_ner(deid: dsl.Input[dsl.Dataset], base_run_artifact: str, label_set: str,
                 model: dsl.Output[dsl.Model]):
    import json

    import mlflow
    import tensorflow as tf
    from acme_deid.train import fit_token_classifier  # shared helper

    base_dir = mlflow.artifacts.download_artifacts(artifact_uri=base_run_artifact, dst_path="/tmp/base")
    with tf.io.gfile.GFile(label_set, "r") as f:
        labels = json.load(f)
    fit_token_classifier(base_dir, deid.path, labels=labels, out_dir=model.path)


@dsl.component(base_image=NLP)
def audit_leakage(deid: dsl.Input[dsl.Dataset], gold_uri: str, report_uri: str) -> float:
    import json

    import pandas as pd
    import tensorflow as tf
    from acme_deid.audit import residual_phi_rate

    gold = pd.read_json(gold_uri, lines=True)
    rate = residual_phi_rate(pd.read_parquet(deid.path), gold)
    with tf.io.gfile.GFile(report_uri, "w") as f:
        f.write(json.dumps({"residual_phi_rate": rate}))
    return rate


@dsl.container_component
def notify(channel: str):
    return dsl.ContainerSpec(image='curlimages/curl:8.10.1', command=['sh', '-c'],
                             args=['curl -s -X POST "https://chat.acme.example/hooks/$0" -d "deid pipeline done"', channel])


@dsl.pipeline(name='clinical-deid-ner')
def clinical_deid(table_uri: str = 's3://acme-health-lake/silver/clinical_notes',
                  table_version: int = 412,
                  since: str = '2024-07-01',
                  surrogate_release: str = '2024-09',
                  base_run_artifact: str = 's3://acme-mlflow/artifacts/31/8c0e6d0a2f4b4b0e9a7c/artifacts/bioclinical-roberta',
                  label_set: str = 's3://acme-health-ref/labels/phi-i2b2-2014.json',
                  gold_uri: str = 's3://acme-health-ref/gold/i2b2-2014-test.jsonl',
                  report_uri: str = 's3://acme-health-reports/deid/2024-09/leakage.json',
                  run_audit: bool = True):
    done = notify(channel='clinical-ml')
    with dsl.ExitHandler(done, name='deid-run'):
        ext = extract_notes(table_uri=table_uri, table_version=table_version, since=since)
        kubernetes.use_secret_as_volume(ext, secret_name='lake-reader-creds', mount_path='/var/run/lake')
        norm = normalize_abbrev(notes=ext.outputs['notes'])
        deid = deid_notes(notes=norm.outputs['normalized'], surrogate_release=surrogate_release)
        kubernetes.mount_pvc(deid, pvc_name='phi-ner-models', mount_path='/models', sub_path='v7')
        ft = finetune_ner(deid=deid.outputs['deid'], base_run_artifact=base_run_artifact, label_set=label_set)
        ft.set_accelerator_type('nvidia.com/gpu').set_accelerator_limit(1)
        with dsl.If(run_audit == True, name='audit'):
            audit_leakage(deid=deid.outputs['deid'], gold_uri=gold_uri, report_uri=report_uri)


if __name__ == '__main__':
    compiler.Compiler().compile(clinical_deid, os.path.splitext(__file__)[0] + '.yaml')
