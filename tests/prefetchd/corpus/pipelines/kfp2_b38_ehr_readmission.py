# ruff: noqa
"""30-day readmission model on de-identified EHR extracts (KFP v2), clinical ML team.

The de-identified MIMIC-IV extract lives on an existing PVC (mounted with a
sub_path); the OMOP concept vocabulary is registered with dsl.importer; the
warehouse password comes from a Secret, the AUC threshold from a ConfigMap,
the namespace from the downward API. Two components are shared component
YAML loaded from text.

Compile: python kfp2_b38_ehr_readmission.py  -> kfp2_b38_ehr_readmission.yaml
"""
import os

from kfp import components, compiler, dsl, kubernetes
from kfp.dsl import Dataset, Input, Model, Output

IMAGE = 'ghcr.io/example/ehr-ml:0.9.2'

MAP_CONCEPTS = components.load_component_from_text('''
name: Map concepts
description: Map source codes (ICD-10, LOINC, NDC) to OMOP standard concepts.
inputs:
- {name: cohort, type: Dataset}
- {name: vocabulary, type: Dataset}
outputs:
- {name: mapped, type: Dataset}
implementation:
  container:
    image: ghcr.io/example/omop-mapper:3.1.0
    command: [omop-map]
    args: [--cohort, {inputPath: cohort}, --vocab, {inputPath: vocabulary}, --out, {outputPath: mapped}]
''')

FAIRNESS_AUDIT = components.load_component_from_text('''
name: Fairness audit
inputs:
- {name: model, type: Model}
- {name: holdout, type: Dataset}
- {name: census_uri, type: String}
outputs:
- {name: report, type: HTML}
implementation:
  container:
    image: ghcr.io/example/fairness-audit:1.2.0
    command: [python, -m, audit.run]
    args: [--model, {inputPath: model}, --holdout, {inputPath: holdout},
           --reference, {inputValue: census_uri}, --report, {outputPath: report}]
''')


@dsl.component(base_image=IMAGE)
def extract_cohort(extract_dir: str, admit_from: str, cohort: Output[Dataset]):
    import pandas as pd
    adm = pd.read_parquet(f'{extract_dir}/admissions.parquet')
    adm[adm.admittime >= admit_from].to_parquet(cohort.path)


@dsl.component(base_image=IMAGE)
def build_features(mapped: Input[Dataset], extract_dir: str, train: Output[Dataset], holdout: Output[Dataset]):
    import pandas as pd
    df = pd.read_parquet(mapped.path).merge(pd.read_parquet(f'{extract_dir}/labevents.parquet'), on='hadm_id')
    df.sample(frac=0.8, random_state=0).to_parquet(train.path)
    df.drop(df.sample(frac=0.8, random_state=0).index).to_parquet(holdout.path)


@dsl.component(base_image=IMAGE)
def train_xgb(train: Input[Dataset], model: Output[Model]):
    import xgboost  # noqa
    print('training on', train.path, '->', model.path)


@dsl.component(base_image=IMAGE)
def validate(model: Input[Model], holdout: Input[Dataset]) -> float:
    import os
    print('min AUC', os.environ['MIN_AUC'])
    return 0.81


@dsl.component(base_image=IMAGE)
def push_to_warehouse(model: Input[Model], table: str):
    import os
    print('writing scores of', model.path, 'to', table, 'as', os.environ['WAREHOUSE_USER'])


@dsl.pipeline(name='ehr-readmission-30d')
def readmission_pipeline(extract_pvc: str = 'ehr-deid-extracts', admit_from: str = '2019-01-01'):
    vocab = dsl.importer(artifact_uri='s3://example-ehr/omop/vocabulary/v5.0-2024-02-27/',
                         artifact_class=Dataset, reimport=False)
    cohort = extract_cohort(extract_dir='/extracts', admit_from=admit_from)
    kubernetes.mount_pvc(cohort, pvc_name=extract_pvc, mount_path='/extracts', sub_path='mimic-iv/2.2/hosp')
    kubernetes.use_field_path_as_env(cohort, env_name='KFP_NAMESPACE', field_path='metadata.namespace')
    mapped = MAP_CONCEPTS(cohort=cohort.outputs['cohort'], vocabulary=vocab.output)
    feats = build_features(mapped=mapped.outputs['mapped'], extract_dir='/extracts')
    kubernetes.mount_pvc(feats, pvc_name=extract_pvc, mount_path='/extracts', sub_path='mimic-iv/2.2/hosp')
    model = train_xgb(train=feats.outputs['train'])
    model.set_cpu_limit('8').set_memory_limit('32G')
    val = validate(model=model.outputs['model'], holdout=feats.outputs['holdout'])
    kubernetes.use_config_map_as_env(val, config_map_name='readmission-thresholds',
                                     config_map_key_to_env={'min_auc': 'MIN_AUC'})
    audit = FAIRNESS_AUDIT(model=model.outputs['model'], holdout=feats.outputs['holdout'],
                           census_uri='s3://example-ehr/reference/acs-2020-demographics.parquet')
    with dsl.If(val.output >= 0.78, name='auc-ok'):
        push = push_to_warehouse(model=model.outputs['model'], table='analytics.readmission_scores')
        push.after(audit)
        kubernetes.use_secret_as_env(push, secret_name='warehouse-writer',
                                     secret_key_to_env={'username': 'WAREHOUSE_USER',
                                                        'password': 'WAREHOUSE_PASSWORD'})


if __name__ == '__main__':
    compiler.Compiler().compile(readmission_pipeline, os.path.splitext(__file__)[0] + '.yaml')
