# ruff: noqa
"""Weekly retail demand-forecast model sweep as an Argo WorkflowTemplate (Hera).

Weekly sales are synced from S3 (workflow parameter) onto a per-run volume
(volumeClaimTemplate), validated and featurised there; the retail 4-4-5
calendar comes in as an S3 input artifact. The feature table travels as an
ordinary Argo artifact to a small sweep (withParam over a JSON workflow
parameter); the best configuration is backtested on the holdout weeks (S3
artifact whose key is built from a workflow parameter) and, when WAPE is
under the threshold, the forecast is published through an S3 output artifact.

Generate: python argo_b62_demand_sweep.py  -> argo_b62_demand_sweep.yaml
"""
import os

from hera.workflows import DAG, Artifact, Container, Parameter, S3Artifact, Script, WorkflowTemplate
from hera.workflows import models as m

IMAGE = 'ghcr.io/acme/demand-forecast:3.2.0'
WORK_RW = m.VolumeMount(name='work', mount_path='/work')
WORK_RO = m.VolumeMount(name='work', mount_path='/work', read_only=True)

SWEEP = ('[{"model": "lightgbm", "lr": "0.05"}, {"model": "lightgbm", "lr": "0.1"}, '
         '{"model": "tweedie-gbm", "lr": "0.05"}]')

with WorkflowTemplate(
    name='demand-forecast-sweep',
    entrypoint='main',
    arguments=[
        Parameter(name='sales_uri', value='s3://acme-retail-lake/sales/weekly/2019-2024/'),
        Parameter(name='holdout_period', value='2024-w14-w26'),
        Parameter(name='sweep', value=SWEEP),
        Parameter(name='max_wape', value='0.2'),
    ],
    volume_claim_templates=[m.PersistentVolumeClaim(
        metadata=m.ObjectMeta(name='work'),
        spec=m.PersistentVolumeClaimSpec(
            access_modes=['ReadWriteOnce'],
            resources=m.VolumeResourceRequirements(requests={'storage': m.Quantity('100Gi')})))],
) as wt:
    download_sales = Container(
        name='download-sales', image='amazon/aws-cli:2.15.30',
        command=['aws', 's3', 'sync', '--only-show-errors'],
        args=['{{workflow.parameters.sales_uri}}', '/work/sales'],
        volume_mounts=[WORK_RW],
    )
    build_calendar = Script(
        name='build-calendar', image=IMAGE, command=['python'],
        inputs=[S3Artifact(name='calendar-445', path='/in/calendar.csv', bucket='acme-retail-ref',
                           key='calendars/retail_445_calendar.csv', endpoint='s3.amazonaws.com')],
        outputs=[Artifact(name='calendar', path='/tmp/calendar.parquet')],
        source=('import pandas as pd\n'
                'cal = pd.read_csv("/in/calendar.csv", parse_dates=["date"])\n'
                'cal.to_parquet("/tmp/calendar.parquet")\n'),
    )
    validate_sales = Script(
        name='validate-sales', image=IMAGE, command=['python'],
        volume_mounts=[WORK_RO],
        source=('import glob, sys\n'
                'files = glob.glob("/work/sales/*.parquet")\n'
                'print(len(files))\n'
                'sys.exit(0 if len(files) >= 260 else 1)\n'),
    )
    build_features = Container(
        name='build-features', image=IMAGE, command=['python', '-m', 'forecast.features'],
        args=['--sales', '/work/sales', '--calendar', '/in/calendar.parquet', '--out', '/tmp/features'],
        inputs=[Artifact(name='calendar', path='/in/calendar.parquet')],
        outputs=[Artifact(name='features', path='/tmp/features')],
        volume_mounts=[WORK_RO],
    )
    train = Container(
        name='train-config', image=IMAGE, command=['python', '-m', 'forecast.cv'],
        args=['--features', '/in/features', '--model', '{{inputs.parameters.model}}',
              '--lr', '{{inputs.parameters.lr}}', '--print-json'],
        inputs=[Parameter(name='model'), Parameter(name='lr'), Artifact(name='features', path='/in/features')],
    )
    select_best = Script(
        name='select-best', image='python:3.11-slim', command=['python'],
        inputs=[Parameter(name='results')],
        source=('import json\n'
                'rows = [json.loads(r) if isinstance(r, str) else r for r in json.loads("""{{inputs.parameters.results}}""")]\n'
                'print(json.dumps(min(rows, key=lambda r: r["wape"])))\n'),
    )
    backtest = Container(
        name='backtest', image=IMAGE, command=['python', '-m', 'forecast.backtest'],
        args=['--features', '/in/features', '--holdout', '/in/holdout', '--config', '{{inputs.parameters.config}}',
              '--forecast-out', '/tmp/forecast.parquet'],
        inputs=[Parameter(name='config'), Artifact(name='features', path='/in/features'),
                S3Artifact(name='holdout', path='/in/holdout', bucket='acme-retail-lake',
                           key='sales/holdout/{{workflow.parameters.holdout_period}}/', endpoint='s3.amazonaws.com')],
        outputs=[Artifact(name='forecast', path='/tmp/forecast.parquet')],
    )
    publish = Container(
        name='publish-forecast', image='busybox:1.36', command=['sh', '-c'],
        args=['cp /in/forecast.parquet /out/forecast.parquet'],
        inputs=[Artifact(name='forecast', path='/in/forecast.parquet')],
        outputs=[S3Artifact(name='published', path='/out/forecast.parquet', bucket='acme-retail-forecasts',
                            key='weekly/{{workflow.parameters.holdout_period}}/forecast.parquet',
                            endpoint='s3.amazonaws.com', archive=m.ArchiveStrategy(none=m.NoneStrategy()))],
    )

    with DAG(name='main'):
        dl = download_sales(name='download-sales')
        cal = build_calendar(name='build-calendar')
        val = validate_sales(name='validate-sales')
        feats = build_features(name='build-features', arguments=[cal.get_artifact('calendar').with_name('calendar')])
        tr = train(name='train', with_param='{{workflow.parameters.sweep}}',
                   arguments=[Parameter(name='model', value='{{item.model}}'), Parameter(name='lr', value='{{item.lr}}'),
                              feats.get_artifact('features').with_name('features')])
        best = select_best(name='select-best', arguments={'results': '{{tasks.train.outputs.result}}'})
        bt = backtest(name='backtest', arguments=[Parameter(name='config', value='{{tasks.select-best.outputs.result}}'),
                                                  feats.get_artifact('features').with_name('features')])
        pub = publish(name='publish-forecast', when='{{tasks.backtest.outputs.result}} < {{workflow.parameters.max_wape}}',
                      arguments=[bt.get_artifact('forecast').with_name('forecast')])
        dl >> val
        [val, cal] >> feats
        feats >> tr >> best >> bt >> pub

if __name__ == '__main__':
    with open(os.path.splitext(__file__)[0] + '.yaml', 'w') as f:
        f.write(wt.to_yaml())
