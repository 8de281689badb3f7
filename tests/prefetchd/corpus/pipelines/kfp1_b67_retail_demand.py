# ruff: noqa
"""Weekly retail demand forecast per region (KFP v1 SDK -> Argo Workflow).

Components are loaded from YAML text: the sales URI is assembled with
{concat: [...]} from the bucket parameter and loop-item fields, an optional
promo calendar is passed through {if: {cond: {isPresent: ...}}} (given inside
the loop, omitted for the national baseline), and the forecaster has a
defaulted holiday-calendar input. ParallelFor iterates a static list of
dicts; a shared feature PVC (claim name from a parameter) is attached with
pvolumes; the merge step gets the store master through a V1EnvVar.

Compile (kfp 1.8.x): python kfp1_b67_retail_demand.py  -> kfp1_b67_retail_demand.yaml
"""
import os

import kfp
from kfp import dsl
from kfp.components import load_component_from_text
from kubernetes.client.models import V1EnvVar

REGIONS = [
    {'region': 'emea', 'promo': 's3://example-retail/promos/emea/2024-W27.csv'},
    {'region': 'apac', 'promo': 's3://example-retail/promos/apac/2024-W27.csv'},
    {'region': 'amer', 'promo': 's3://example-retail/promos/amer/2024-W27.csv'},
]

pull_sales_op = load_component_from_text('''
name: Pull sales
inputs:
- {name: bucket, type: String}
- {name: region, type: String}
- {name: week, type: String}
- {name: promo_calendar, type: String, optional: true}
outputs:
- {name: sales, type: Dataset}
implementation:
  container:
    image: ghcr.io/example/demand-etl:3.2.0
    command: [python, -m, demand.pull_sales]
    args:
    - --src
    - concat: ['s3://', {inputValue: bucket}, '/sales/region=', {inputValue: region}, '/week=', {inputValue: week}, '/sales.parquet']
    - if:
        cond: {isPresent: promo_calendar}
        then: [--promos, {inputValue: promo_calendar}]
    - --out
    - {outputPath: sales}
''')

forecast_op = load_component_from_text('''
name: Forecast region
inputs:
- {name: sales, type: Dataset}
- {name: region, type: String}
- {name: holidays, type: String, default: 's3://example-retail/calendars/holidays_2024.csv'}
- {name: horizon_weeks, type: Integer, default: '8'}
outputs:
- {name: forecast, type: Dataset}
implementation:
  container:
    image: ghcr.io/example/demand-forecast:1.9.0
    command: [python, -m, demand.forecast]
    args:
    - --sales
    - {inputPath: sales}
    - --features
    - concat: [/features/region=, {inputValue: region}]
    - --holidays
    - {inputValue: holidays}
    - --horizon
    - {inputValue: horizon_weeks}
    - --out
    - concat: [/features/forecasts/, {inputValue: region}]
    - --summary
    - {outputPath: forecast}
''')


@dsl.pipeline(name='retail-weekly-demand')
def demand_pipeline(sales_bucket: str = 'example-retail', week: str = '2024-W27',
                    features_pvc: str = 'demand-features'):
    features = dsl.PipelineVolume(pvc=features_pvc)

    with dsl.ParallelFor(REGIONS) as item:
        sales = pull_sales_op(bucket=sales_bucket, region=item.region, week=week, promo_calendar=item.promo)
        fc = forecast_op(sales=sales.outputs['sales'], region=item.region)
        fc.add_pvolumes({'/features': features})

    # national baseline: same component, no promo calendar passed
    national = pull_sales_op(bucket=sales_bucket, region='national', week=week)

    merge = dsl.ContainerOp(
        name='merge-forecasts',
        image='ghcr.io/example/demand-forecast:1.9.0',
        command=['python', '-m', 'demand.merge'],
        arguments=['--forecasts', '/features/forecasts',
                   '--baseline', dsl.InputArgumentPath(national.outputs['sales']),
                   '--out', f'/features/merged/{week}'],
        pvolumes={'/features': features},
    ).after(fc)
    merge.container.add_env_variable(V1EnvVar(name='STORE_MASTER_URI',
                                              value='s3://example-retail/master/stores.parquet'))

    publish = dsl.ContainerOp(
        name='publish',
        image='amazon/aws-cli:2.15.30',
        command=['aws', 's3', 'sync'],
        arguments=[f'/features/merged/{week}', f's3://example-retail-forecasts/weekly/{week}/'],
        pvolumes={'/features': merge.pvolume},
    )


if __name__ == '__main__':
    kfp.compiler.Compiler().compile(demand_pipeline, os.path.splitext(__file__)[0] + '.yaml')
