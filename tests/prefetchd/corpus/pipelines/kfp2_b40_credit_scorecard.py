# ruff: noqa
"""Retail credit scorecard per customer segment (KFP v2).

Bureau extracts sit on an existing PVC named by a parameter (sub_path per
month); applications are read per segment in a ParallelFor; only segments
whose schema check passes are trained; a fairness audit runs even when
calibration fails.

Compile: python kfp2_b40_credit_scorecard.py -> kfp2_b40_credit_scorecard.yaml
"""
import os
from typing import List

from kfp import compiler, dsl, kubernetes
from kfp.dsl import Input, Model, Output

IMAGE = 'ghcr.io/example/credit-risk:3.2.0'


@dsl.component(base_image=IMAGE)
def extract_bureau(month: str, features: Output[dsl.Dataset]):
    import shutil
    shutil.copytree(f'/bureau/{month}', features.path)


@dsl.component(base_image=IMAGE)
def validate_schema(applications_uri: str) -> str:
    import pandas as pd
    df = pd.read_parquet(applications_uri)
    return 'ok' if {'income', 'dti', 'term'} <= set(df.columns) else 'bad'


@dsl.component(base_image=IMAGE)
def train_scorecard(applications_uri: str, features: Input[dsl.Dataset], model: Output[Model]):
    import subprocess
    subprocess.run(['python', '-m', 'scorecard.train', '--apps', applications_uri,
                    '--bureau', features.path, '--tmp', '/tmp/woe', '--out', model.path], check=True)


@dsl.component(base_image=IMAGE)
def calibrate(models: Input[List[Model]], calibrated: Output[Model]):
    print([m.path for m in models])


@dsl.component(base_image=IMAGE)
def fairness_audit(model_dir: str) -> float:
    import os
    import pandas as pd
    attrs = pd.read_parquet(os.environ['PROTECTED_ATTRS_URI'])
    return float(len(attrs))


@dsl.pipeline(name='credit-scorecard-segments')
def credit_pipeline(bureau_pvc: str = 'credit-bureau-extracts', month: str = '2024-06',
                    segments: List[str] = ['prime', 'near-prime', 'subprime']):
    bureau = extract_bureau(month=month).set_display_name('Extract bureau features')
    kubernetes.mount_pvc(bureau, pvc_name=bureau_pvc, mount_path='/bureau', sub_path='monthly')
    bureau.set_caching_options(False)

    with dsl.ParallelFor(segments, parallelism=2) as seg:
        apps = f's3://example-credit/applications/{seg}/2024-06.parquet'
        check = validate_schema(applications_uri=apps)
        with dsl.If(check.output == 'ok'):
            tr = train_scorecard(applications_uri=apps, features=bureau.outputs['features'])
            kubernetes.add_ephemeral_volume(tr, volume_name='woe-tmp', mount_path='/tmp/woe',
                                            access_modes=['ReadWriteOnce'], size='10Gi')

    cal = calibrate(models=dsl.Collected(tr.outputs['model']))
    audit = fairness_audit(model_dir='/models').after(cal).ignore_upstream_failure()
    audit.set_env_variable('PROTECTED_ATTRS_URI', 's3://example-credit/fairness/protected-attrs/v2.parquet')
    audit.set_display_name('Fairness audit')


if __name__ == '__main__':
    compiler.Compiler().compile(credit_pipeline, os.path.splitext(__file__)[0] + '.yaml')
