# ruff: noqa
"""Pharmacy pill identification: photos of dispensed tablets (imprint, colour, shape) matched to NDC products.
Monthly photo drop is synced onto a shared scratch volume, the NDC catalogue validated, splits built, two backbones
fine-tuned side by side on GPUs, each evaluated, the best one registered when top-1 clears the bar, then the
pharmacists' verification queue is scored. A Slack message goes out however the run ends."""
from typing import List, NamedTuple

from kfp import compiler, dsl, kubernetes
from kfp.dsl import Dataset, Input, Metrics, Output

PILL_IMAGE = "registry.rxvision.io/ml/pillnet:4.1.0-cu124"
AWS_CLI = "amazon/aws-cli:2.17.0"


@dsl.container_component
def sync_photos(images_uri: str):
    return dsl.ContainerSpec(
        image=AWS_CLI,
        command=["aws", "s3", "sync"],
        args=[images_uri, "/scratch/photos/", "--only-show-errors", "--exclude", "*.json"],
    )


@dsl.component(base_image=PILL_IMAGE)
def validate_catalog(ndc_catalog_uri: str, catalog: Output[Dataset]) -> int:
    import pandas as pd
    import s3fs

    cat = pd.read_parquet(ndc_catalog_uri, columns=["ndc11", "imprint", "color", "shape", "strength"])
    fs = s3fs.S3FileSystem()
    with fs.open("s3://rx-vision-ref/ndc/imprint_aliases.csv", "r") as f:
        aliases = pd.read_csv(f)
    cat = cat.merge(aliases, on="imprint", how="left")
    bad = cat["ndc11"].str.len() != 11
    if bad.mean() > 0.01:
        raise ValueError(f"{bad.sum()} malformed NDC codes")
    cat[~bad].to_parquet(catalog.path, index=False)
    return int((~bad).sum())


@dsl.component(base_image=PILL_IMAGE)
def build_splits(catalog: Input[Dataset], run_id: str, seed: int):
    import glob
    import os

    import pandas as pd
    from sklearn.model_selection import GroupShuffleSplit

    cat = pd.read_parquet(catalog.path)
    photos = pd.DataFrame({"path": sorted(glob.glob("/scratch/photos/**/*.jpg", recursive=True))})
    photos["ndc11"] = photos["path"].str.extract(r"/(\d{11})/")[0]
    df = photos.merge(cat, on="ndc11", how="inner")
    gss = GroupShuffleSplit(n_splits=1, test_size=0.2, random_state=seed)
    train_idx, rest_idx = next(gss.split(df, groups=df["ndc11"]))
    rest = df.iloc[rest_idx]
    tr, va, te = df.iloc[train_idx], rest.iloc[: len(rest) // 2], rest.iloc[len(rest) // 2:]
    os.makedirs("/scratch/splits", exist_ok=True)
    for name, part in {"train": tr, "val": va, "test": te}.items():
        part.to_csv(f"/scratch/splits/{name}.csv", index=False)
        part.to_csv(f"s3://rx-vision-data/splits/{run_id}/{name}.csv", index=False)


@dsl.container_component
def train_backbone(backbone: str, run_id: str, epochs: int):
    return dsl.ContainerSpec(
        image=PILL_IMAGE,
        command=["torchrun", "--nproc_per_node=4", "-m", "pillnet.train"],
        args=["--backbone", backbone,
              "--images", "/scratch/photos",
              "--train-manifest", "/scratch/splits/train.csv",
              "--val-manifest", "/scratch/splits/val.csv",
              "--pretrained", f"s3://rx-vision-models/timm/{backbone}/pretrained.safetensors",
              "--epochs", epochs,
              "--output-dir", f"s3://rx-vision-models/pillnet/{run_id}/{backbone}/"],
    )


@dsl.component(base_image=PILL_IMAGE)
def eval_backbone(backbone: str, run_id: str, metrics: Output[Metrics]) -> float:
    import boto3
    import pandas as pd
    from pillnet.eval import top1_accuracy

    s3 = boto3.client("s3")
    s3.download_file("rx-vision-models", f"pillnet/{run_id}/{backbone}/best.pt", "/tmp/best.pt")
    test = pd.read_csv(f"s3://rx-vision-data/splits/{run_id}/test.csv")
    acc = top1_accuracy("/tmp/best.pt", test, device="cuda")
    metrics.log_metric("top1", acc)
    metrics.log_metric("n_test", len(test))
    return float(acc)


@dsl.component(base_image="python:3.11-slim")
def select_best(backbones: List[str], top1s: List[float]) -> NamedTuple("Best", [("backbone", str), ("top1", float)]):
    from collections import namedtuple

    best_i = max(range(len(top1s)), key=lambda i: top1s[i])
    return namedtuple("Best", ["backbone", "top1"])(backbones[best_i], top1s[best_i])


@dsl.component(base_image=PILL_IMAGE)
def register_model(run_id: str, backbone: str, top1: float):
    import json

    import s3fs

    fs = s3fs.S3FileSystem()
    fs.copy(f"s3://rx-vision-models/pillnet/{run_id}/{backbone}/best.pt", "s3://rx-vision-registry/pillnet/staging/model.pt")
    with fs.open("s3://rx-vision-registry/pillnet/staging/MODEL_CARD.json", "w") as f:
        json.dump({"run_id": run_id, "backbone": backbone, "top1": top1}, f)


@dsl.container_component
def batch_inference(queue_date: str):
    return dsl.ContainerSpec(
        image=PILL_IMAGE,
        command=["python", "-m", "pillnet.batch_predict"],
        args=["--model", "s3://rx-vision-registry/pillnet/staging/model.pt",
              "--queue", f"s3://rx-pharmacy-ops/verification-queue/{queue_date}/queue.jsonl",
              "--predictions", f"s3://rx-pharmacy-ops/predictions/{queue_date}/pillnet.jsonl",
              "--batch-size", "256"],
    )


@dsl.component(base_image="python:3.11-slim", packages_to_install=["requests==2.32.3"])
def notify_slack(run_id: str):
    import os

    import requests

    requests.post(os.environ["SLACK_WEBHOOK_URL"], json={"text": f"pillnet run {run_id} finished"}, timeout=10)


def with_aws(task):
    kubernetes.use_secret_as_env(task, secret_name="rx-vision-aws",
                                 secret_key_to_env={"access_key_id": "AWS_ACCESS_KEY_ID",
                                                    "secret_access_key": "AWS_SECRET_ACCESS_KEY"})
    return task


@dsl.pipeline(name="pill-imprint-identification")
def pill_imprint(images_uri: str = "s3://rx-vision-raw/pill-photos/2025-11/",
                 ndc_catalog_uri: str = "s3://rx-vision-ref/ndc/ndc_product_2025-11.parquet",
                 run_id: str = "pillnet-2025-11",
                 backbones: List[str] = ["convnext_tiny", "efficientnet_b3"],
                 epochs: int = 30,
                 min_top1: float = 0.93,
                 queue_date: str = "2025-11-30"):
    bye = notify_slack(run_id=run_id)
    kubernetes.use_secret_as_env(bye, secret_name="ml-slack", secret_key_to_env={"webhook": "SLACK_WEBHOOK_URL"})

    with dsl.ExitHandler(bye, name="pillnet-run"):
        scratch = kubernetes.CreatePVC(pvc_name_suffix="-pill-scratch", access_modes=["ReadWriteMany"],
                                       size="300Gi", storage_class_name="efs-sc")

        sync = with_aws(sync_photos(images_uri=images_uri))
        kubernetes.mount_pvc(sync, pvc_name=scratch.outputs["name"], mount_path="/scratch")

        cat = with_aws(validate_catalog(ndc_catalog_uri=ndc_catalog_uri))

        splits = with_aws(build_splits(catalog=cat.outputs["catalog"], run_id=run_id, seed=17)).after(sync)
        kubernetes.mount_pvc(splits, pvc_name=scratch.outputs["name"], mount_path="/scratch")

        with dsl.ParallelFor(backbones, parallelism=2) as bb:
            tr = with_aws(train_backbone(backbone=bb, run_id=run_id, epochs=epochs)).after(splits)
            tr.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(4)
            tr.set_memory_limit("200G").set_cpu_limit("32")
            kubernetes.add_node_selector(tr, label_key="node.kubernetes.io/instance-type", label_value="p4d.24xlarge")
            kubernetes.mount_pvc(tr, pvc_name=scratch.outputs["name"], mount_path="/scratch")

            ev = with_aws(eval_backbone(backbone=bb, run_id=run_id)).after(tr)
            ev.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(1)

        drop = kubernetes.DeletePVC(pvc_name=scratch.outputs["name"]).after(ev)

        best = select_best(backbones=backbones, top1s=dsl.Collected(ev.outputs["Output"]))

        with dsl.If(best.outputs["top1"] >= min_top1, name="top1-gate"):
            reg = with_aws(register_model(run_id=run_id, backbone=best.outputs["backbone"], top1=best.outputs["top1"]))
            inf = with_aws(batch_inference(queue_date=queue_date)).after(reg)
            inf.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(1)


if __name__ == "__main__":
    compiler.Compiler().compile(pill_imprint, __file__.replace(".py", ".yaml"))
