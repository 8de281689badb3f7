# ruff: noqa
"""PTB-XL 12-lead ECG arrhythmia classifier (ResNet1d) — weekly retrain.

Cardiology ML team, KFP v2. Raw PhysioNet PTB-XL mirror in S3 -> WebDataset
shards -> multi-label ResNet1d -> external validation on CPSC2018 / Georgia
-> gated registration in the model bucket + MLflow.
"""
from typing import List, NamedTuple

from kfp import compiler, dsl, kubernetes
from kfp.dsl import Dataset, Input, Metrics, Model, Output

PY_IMAGE = "python:3.11-slim"
TRAIN_IMAGE = "ghcr.io/cardio-ml/ecg-resnet1d:2.4.0-cu121"


@dsl.component(base_image=PY_IMAGE, packages_to_install=["pandas==2.2.2", "s3fs==2024.6.1", "pyarrow==16.1.0"])
def stratify_folds(ptbxl_root: str, folds_out: Output[Dataset]):
    import ast
    import pandas as pd

    db = pd.read_csv(f"{ptbxl_root}/ptbxl_database.csv", index_col="ecg_id")
    scp = pd.read_csv(f"{ptbxl_root}/scp_statements.csv", index_col=0)
    scp = scp[scp.diagnostic == 1]
    db["scp_codes"] = db.scp_codes.apply(ast.literal_eval)
    db["superclass"] = db.scp_codes.apply(
        lambda d: sorted({scp.loc[k].diagnostic_class for k in d if k in scp.index}))
    db = db[db.superclass.map(len) > 0]
    # PTB-XL recommended split: folds 1-8 train, 9 val, 10 test
    db["split"] = db.strat_fold.map(lambda f: "test" if f == 10 else "val" if f == 9 else "train")
    db[["filename_hr", "superclass", "split", "age", "sex"]].to_parquet(folds_out.path)


@dsl.component(base_image=PY_IMAGE,
               packages_to_install=["wfdb==4.1.2", "webdataset==0.2.86", "pandas==2.2.2",
                                    "pyarrow==16.1.0", "fsspec==2024.6.1", "s3fs==2024.6.1", "numpy<2"])
def pack_shards(ptbxl_root: str, folds: Input[Dataset], shard_prefix: str, samples_per_shard: int = 350):
    import io, json, os, tempfile
    import numpy as np
    import pandas as pd
    import s3fs
    import webdataset as wds
    import wfdb

    fs = s3fs.S3FileSystem()
    meta = pd.read_parquet(folds.path)
    tmp = tempfile.mkdtemp()
    for split, df in meta.groupby("split"):
        pattern = os.path.join(tmp, f"{split}-%06d.tar")
        with wds.ShardWriter(pattern, maxcount=samples_per_shard) as sink:
            for ecg_id, row in df.iterrows():
                rec = f"records500/{ecg_id // 1000 * 1000:05d}/{ecg_id:05d}_hr"
                local = os.path.join(tmp, "rec")
                for ext in (".hea", ".dat"):
                    fs.get(f"{ptbxl_root}/{rec}{ext}", local + ext)
                sig, _ = wfdb.rdsamp(local)
                buf = io.BytesIO(); np.save(buf, sig.astype(np.float32))
                sink.write({"__key__": f"{ecg_id:05d}", "npy": buf.getvalue(),
                            "json": json.dumps({"labels": list(row.superclass), "age": row.age, "sex": int(row.sex)})})
    fs.put(tmp + "/", shard_prefix.rstrip("/") + "/", recursive=True)


@dsl.container_component
def train_resnet1d(train_shards: str, epochs: int, model: Output[Model], metrics: Output[Metrics]):
    return dsl.ContainerSpec(
        image=TRAIN_IMAGE,
        command=["torchrun", "--standalone", "--nproc_per_node=1", "-m", "ecgnet.train"],
        args=[
            "--train-shards", train_shards,
            "--val-shards-env", "WDS_VAL_SHARDS",
            "--arch", "resnet1d_wang",
            "--epochs", epochs,
            "--batch-size", "128",
            "--lr", "1e-3",
            "--output-dir", model.path,
            "--metrics-json", metrics.path,
        ],
    )


@dsl.component(base_image="pytorch/pytorch:2.3.1-cuda12.1-cudnn8-runtime",
               packages_to_install=["pandas==2.2.2", "pyarrow==16.1.0", "s3fs==2024.6.1", "scikit-learn==1.5.0"])
def evaluate_external(model: Input[Model], cohort: dict) -> float:
    import numpy as np
    import pandas as pd
    import torch
    from sklearn.metrics import roc_auc_score

    net = torch.jit.load(f"{model.path}/model.ts.pt").eval()
    df = pd.read_parquet(cohort["uri"], storage_options={"anon": False})
    x = torch.tensor(np.stack(df.signal.map(lambda s: np.asarray(s, dtype=np.float32).reshape(12, -1))))
    with torch.no_grad():
        p = torch.sigmoid(net(x)).numpy()
    y = np.stack(df.labels_onehot.map(np.asarray))
    auc = float(roc_auc_score(y, p, average="macro"))
    print(f"{cohort['name']}: macro AUC {auc:.4f}")
    return auc


@dsl.component(base_image=PY_IMAGE)
def summarize(aucs: List[float]) -> float:
    return min(aucs)


@dsl.component(base_image=PY_IMAGE, packages_to_install=["boto3==1.34.131", "mlflow-skinny==2.14.1"])
def register_model(model: Input[Model], model_uri: str, min_auc: float):
    import os
    import boto3
    import mlflow

    bucket, _, prefix = model_uri.removeprefix("s3://").partition("/")
    s3 = boto3.client("s3")
    for root, _, files in os.walk(model.path):
        for f in files:
            p = os.path.join(root, f)
            s3.upload_file(p, bucket, f"{prefix.rstrip('/')}/{os.path.relpath(p, model.path)}")
    mlflow.set_tracking_uri(os.environ["MLFLOW_TRACKING_URI"])
    mv = mlflow.register_model(model_uri, "ecg-resnet1d-superclass")
    mlflow.MlflowClient().set_model_version_tag(mv.name, mv.version, "min_external_auc", f"{min_auc:.4f}")


@dsl.pipeline(name="ptbxl-ecg-resnet1d", description="PTB-XL superclass classifier with external validation")
def ecg_pipeline(
    ptbxl_root: str = "s3://cardio-ml-raw/physionet/ptb-xl/1.0.3",
    shard_prefix: str = "s3://cardio-ml-curated/ptbxl-wds/500hz",
    train_shards: str = "s3://cardio-ml-curated/ptbxl-wds/500hz/train-{000000..000049}.tar",
    epochs: int = 40,
    external_cohorts: List[dict] = [
        {"name": "cpsc2018", "uri": "s3://cardio-ml-raw/physionet/challenge-2021/cpsc2018/test.parquet"},
        {"name": "georgia", "uri": "s3://cardio-ml-raw/physionet/challenge-2021/georgia/test.parquet"},
    ],
    model_uri: str = "s3://cardio-ml-models/ecg-resnet1d/superclass/2025-06-02",
    auc_threshold: float = 0.88,
):
    folds = stratify_folds(ptbxl_root=ptbxl_root).set_caching_options(True)
    shards = pack_shards(ptbxl_root=ptbxl_root, folds=folds.outputs["folds_out"], shard_prefix=shard_prefix)
    shards.set_cpu_limit("8").set_memory_limit("16G")

    train = train_resnet1d(train_shards=train_shards, epochs=epochs).after(shards)
    train.set_env_variable("WDS_VAL_SHARDS", "s3://cardio-ml-curated/ptbxl-wds/500hz/val-{000000..000005}.tar")
    train.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(1).set_memory_limit("48G")
    train.set_caching_options(False)
    kubernetes.use_secret_as_env(train, secret_name="cardio-ml-s3",
                                 secret_key_to_env={"AWS_ACCESS_KEY_ID": "AWS_ACCESS_KEY_ID",
                                                    "AWS_SECRET_ACCESS_KEY": "AWS_SECRET_ACCESS_KEY"})
    kubernetes.add_toleration(train, key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")

    with dsl.ParallelFor(items=external_cohorts, parallelism=2) as cohort:
        ev = evaluate_external(model=train.outputs["model"], cohort=cohort)
        ev.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(1)

    worst = summarize(aucs=dsl.Collected(ev.output))

    with dsl.If(worst.output >= auc_threshold, name="external-auc-ok"):
        reg = register_model(model=train.outputs["model"], model_uri=model_uri, min_auc=worst.output)
        reg.set_env_variable("MLFLOW_TRACKING_URI", "http://mlflow.mlflow.svc.cluster.local:5000")
        kubernetes.use_secret_as_env(reg, secret_name="cardio-ml-s3",
                                     secret_key_to_env={"AWS_ACCESS_KEY_ID": "AWS_ACCESS_KEY_ID",
                                                        "AWS_SECRET_ACCESS_KEY": "AWS_SECRET_ACCESS_KEY"})


if __name__ == "__main__":
    compiler.Compiler().compile(ecg_pipeline, __file__.replace(".py", ".yaml"))
