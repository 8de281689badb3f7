# ruff: noqa
"""Chest X-ray multi-label classifier (DenseNet-121, PyTorch Lightning) on KFP v2.

The radiology team's nightly retrain: study metadata come from a Delta table,
labels from a partitioned parquet folder (polars), images from an existing PVC
of pre-rendered PNGs. Training resumes a pretraining checkpoint on S3 and
exports safetensors to S3; evaluation loads that export through fsspec. An
external NIH test set is registered with an importer. Registration only runs
when AUROC clears the bar; a Slack notifier runs as the exit task.

Compile: python kfp2_b45_chestxray_lightning.py -> kfp2_b45_chestxray_lightning.yaml
"""
import os

from kfp import compiler, dsl, kubernetes
from kfp.dsl import Dataset, Input, Model, Output

IMAGE = 'registry.radiology.example.org/cxr/densenet-train:2024.06.1'
EXPORT_URI = 's3://med-imaging-models/cxr/densenet121/export/model.safetensors'


@dsl.component(base_image=IMAGE)
def validate_studies(studies_table: str) -> int:
    import os
    from deltalake import DeltaTable
    opts = {'AWS_REGION': os.environ.get('AWS_REGION', 'eu-central-1')}
    df = DeltaTable(studies_table, storage_options=opts).to_pandas(columns=['study_uid', 'view', 'age'])
    df = df[df.view.isin(['PA', 'AP'])]
    assert df.study_uid.is_unique
    return len(df)


@dsl.component(base_image=IMAGE)
def build_splits(labels_root: str, n_studies: int, splits: Output[Dataset]):
    import polars as pl
    lf = pl.scan_parquet(f'{labels_root}/*.parquet')
    df = lf.filter(pl.col('qc_pass')).collect()
    df = df.with_columns((pl.col('patient_id').hash() % 10).alias('fold'))
    df.write_parquet(splits.path)
    print('studies', n_studies, 'labelled', df.height)


@dsl.component(base_image=IMAGE)
def train_densenet(splits: Input[Dataset], resume_ckpt: str, max_epochs: int, model: Output[Model]):
    import fsspec
    import pytorch_lightning as pl
    from safetensors.torch import save_file
    from cxr.data import CxrDataModule
    from cxr.model import DenseNetModule

    dm = CxrDataModule(split_file=splits.path, image_root='/data/png1024', batch_size=64)
    net = DenseNetModule(num_classes=14)
    trainer = pl.Trainer(max_epochs=max_epochs, accelerator='gpu', devices=1,
                         default_root_dir='s3://med-imaging-models/cxr/densenet121/runs/')
    trainer.fit(net, datamodule=dm, ckpt_path=resume_ckpt)
    state = {k: v.contiguous() for k, v in net.state_dict().items()}
    save_file(state, model.path)
    with fsspec.open('s3://med-imaging-models/cxr/densenet121/export/model.safetensors', 'wb') as f:
        f.write(open(model.path, 'rb').read())


@dsl.component(base_image=IMAGE)
def evaluate_internal(labels_root: str, model_uri: str) -> float:
    import fsspec
    import torch
    from datasets import load_dataset
    from safetensors.torch import load
    from cxr.model import DenseNetModule
    from cxr.metrics import macro_auroc

    test = load_dataset('parquet', data_files={'test': f'{labels_root}/test.parquet'},
                        storage_options={'anon': False})['test']
    with fsspec.open(model_uri, 'rb') as f:
        state = load(f.read())
    net = DenseNetModule(num_classes=14)
    net.load_state_dict(state)
    return float(macro_auroc(net, test, image_root='/data/png1024'))


@dsl.component(base_image=IMAGE)
def evaluate_external(nih_test: Input[Dataset], model_uri: str) -> float:
    import fsspec
    from datasets import load_from_disk
    from safetensors.torch import load
    from cxr.model import DenseNetModule
    from cxr.metrics import macro_auroc

    ds = load_from_disk(nih_test.path)
    with fsspec.open(model_uri, 'rb') as f:
        state = load(f.read())
    net = DenseNetModule(num_classes=14)
    net.load_state_dict(state)
    return float(macro_auroc(net, ds))


@dsl.component(base_image=IMAGE, packages_to_install=['mlflow==2.13.0'])
def register_model(model: Input[Model], internal_auroc: float, external_auroc: float):
    import mlflow
    calib_dir = mlflow.artifacts.download_artifacts(
        artifact_uri='s3://med-imaging-models/cxr/reference/calibration_set/')
    with mlflow.start_run(run_name='densenet121-nightly'):
        mlflow.log_metrics({'auroc_internal': internal_auroc, 'auroc_external': external_auroc})
        mlflow.log_artifact(model.path, artifact_path='model')
        mlflow.log_artifacts(calib_dir, artifact_path='calibration')


@dsl.container_component
def notify_slack(channel: str):
    return dsl.ContainerSpec(
        image='curlimages/curl:8.7.1', command=['sh', '-c'],
        args=['curl -s -X POST -d "{\\"channel\\": \\"$0\\", \\"text\\": \\"cxr nightly finished\\"}" "$SLACK_WEBHOOK"',
              channel])


@dsl.pipeline(name='cxr-densenet-nightly')
def cxr_pipeline(studies_table: str = 's3://med-imaging-lake/cxr/studies_delta',
                 labels_root: str = 's3://med-imaging-lake/cxr/labels/v5',
                 resume_ckpt: str = 's3://med-imaging-models/cxr/densenet121/pretrain/last.ckpt',
                 png_claim: str = 'cxr-png-1024',
                 max_epochs: int = 12):
    bye = notify_slack(channel='#radiology-ml')
    with dsl.ExitHandler(bye):
        vs = validate_studies(studies_table=studies_table)
        bs = build_splits(labels_root=labels_root, n_studies=vs.output)
        tr = train_densenet(splits=bs.outputs['splits'], resume_ckpt=resume_ckpt, max_epochs=max_epochs)
        tr.set_accelerator_type('nvidia.com/gpu').set_accelerator_limit(1)
        kubernetes.mount_pvc(tr, pvc_name=png_claim, mount_path='/data')
        ev = evaluate_internal(labels_root=labels_root, model_uri=EXPORT_URI).after(tr)
        kubernetes.mount_pvc(ev, pvc_name=png_claim, mount_path='/data')
        nih = dsl.importer(artifact_uri='s3://med-imaging-lake/external/nih-cxr14/test-hf/',
                           artifact_class=Dataset, reimport=False)
        ext = evaluate_external(nih_test=nih.output, model_uri=EXPORT_URI).after(tr)
        with dsl.If(ev.output >= 0.82):
            reg = register_model(model=tr.outputs['model'], internal_auroc=ev.output, external_auroc=ext.output)
            reg.set_env_variable('MLFLOW_TRACKING_URI', 'http://mlflow.mlflow.svc:5000')


if __name__ == '__main__':
    compiler.Compiler().compile(cxr_pipeline, os.path.splitext(__file__)[0] + '.yaml')
