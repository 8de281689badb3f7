# ruff: noqa
"""Automated fault detection and diagnosis (AFDD) for air-handling units across a campus.
BMS trend exports per building are synced onto a shared scratch volume, cleaned and resampled with each building's
point map, labelled from the CMMS work orders, a TS2Vec-based classifier is fine-tuned on a GPU, evaluated on a fixed
holdout, registered when its F1 clears the bar, and then run per building over the month; facilities get a report.
Facilities on-call is paged however the run ends."""
from typing import NamedTuple

import kfp
from kfp import dsl
from kfp.aws import use_aws_secret
from kfp.components import create_component_from_func
from kubernetes import client as k8s

AFDD_IMAGE = "ghcr.io/campus-energy/afdd:4.2.0"


def clean_resample(building: str, month: str):
    import glob
    import os

    import pandas as pd
    import s3fs

    fs = s3fs.S3FileSystem()
    with fs.open(f"s3://bms-metadata/point-maps/{building}.json") as f:
        point_map = pd.read_json(f, typ="series")
    frames = []
    for path in sorted(glob.glob(f"/scratch/raw/{building}/*.csv")):
        df = pd.read_csv(path, parse_dates=["timestamp"]).rename(columns=point_map.to_dict())
        frames.append(df.set_index("timestamp").resample("5min").mean())
    os.makedirs("/scratch/clean", exist_ok=True)
    pd.concat(frames).assign(building=building, month=month).to_parquet(f"/scratch/clean/{building}.parquet")


def label_faults(month: str):
    import glob

    import pandas as pd
    from afdd.labels import align_work_orders

    wo = pd.read_csv(f"s3://facilities-cmms/work-orders/{month}/hvac_work_orders.csv", parse_dates=["opened", "closed"])
    trends = pd.concat(pd.read_parquet(p) for p in sorted(glob.glob("/scratch/clean/*.parquet")))
    align_work_orders(trends, wo).to_parquet("/scratch/labels.parquet")


def train_classifier(model_tag: str, epochs: int) -> NamedTuple("TrainOut", [("f1", float), ("model_uri", str)]):
    import glob
    from collections import namedtuple

    import pandas as pd
    import s3fs
    import torch
    from afdd.ts2vec import finetune

    fs = s3fs.S3FileSystem()
    with fs.open("s3://hvac-ml-models/pretrained/ts2vec_ahu_base.pt", "rb") as f:
        base = torch.load(f, map_location="cpu")
    trends = pd.concat(pd.read_parquet(p) for p in sorted(glob.glob("/scratch/clean/*.parquet")))
    labels = pd.read_parquet("/scratch/labels.parquet")
    model, f1 = finetune(base, trends, labels, epochs=epochs, device="cuda")
    torch.save(model.state_dict(), "/tmp/model.pt")
    uri = f"s3://hvac-ml-models/afdd/{model_tag}/model.pt"
    fs.put("/tmp/model.pt", uri)
    return namedtuple("TrainOut", ["f1", "model_uri"])(float(f1), uri)


def diagnose_building(building: str, month: str):
    import pandas as pd
    import s3fs
    import torch
    from afdd.ts2vec import load_classifier

    fs = s3fs.S3FileSystem()
    with fs.open("s3://hvac-model-registry/afdd/production/model.pt", "rb") as f:
        model = load_classifier(torch.load(f, map_location="cpu"))
    trends = pd.read_parquet(f"/scratch/clean/{building}.parquet")
    faults = model.diagnose(trends)
    faults.to_csv(f"s3://hvac-fdd-alerts/{month}/{building}/faults.csv", index=False)


def weekly_report(month: str):
    import pandas as pd
    import s3fs
    from afdd.report import render_html

    fs = s3fs.S3FileSystem()
    frames = [pd.read_csv(fs.open(p)) for p in fs.glob(f"s3://hvac-fdd-alerts/{month}/*/faults.csv")]
    html = render_html(pd.concat(frames), title=f"AHU faults {month}")
    with fs.open(f"s3://hvac-ml-reports/{month}/fdd_summary.html", "w") as f:
        f.write(html)


clean_op = create_component_from_func(clean_resample, base_image=AFDD_IMAGE)
label_op = create_component_from_func(label_faults, base_image=AFDD_IMAGE)
train_op = create_component_from_func(train_classifier, base_image=AFDD_IMAGE)
diagnose_op = create_component_from_func(diagnose_building, base_image=AFDD_IMAGE)
report_op = create_component_from_func(weekly_report, base_image=AFDD_IMAGE)


@dsl.pipeline(name="hvac-afdd-monthly", description="AHU fault detection and diagnosis, monthly retrain and scan")
def hvac_afdd(buildings: str = '["hq-tower", "lab-annex", "dc-west"]',
              month: str = "2025-10",
              bms_bucket: str = "bms-trends-prod",
              model_tag: str = "afdd-v4",
              epochs: int = 25,
              min_f1: float = 0.8):
    page = dsl.ContainerOp(
        name="notify-facilities",
        image="curlimages/curl:8.8.0",
        command=["sh", "-c"],
        arguments=['curl -sf -X POST -H "Content-Type: application/json" '
                   '-d "{\\"text\\": \\"AFDD run for $0 finished\\"}" "$FACILITIES_WEBHOOK"', month],
    )
    page.container.add_env_variable(k8s.V1EnvVar(
        name="FACILITIES_WEBHOOK",
        value_from=k8s.V1EnvVarSource(secret_key_ref=k8s.V1SecretKeySelector(name="facilities-oncall", key="webhook"))))

    with dsl.ExitHandler(page):
        scratch = dsl.VolumeOp(name="trend-scratch", resource_name="afdd-scratch", size="200Gi",
                               modes=dsl.VOLUME_MODE_RWM, storage_class="efs-sc")

        with dsl.ParallelFor(buildings) as bldg:
            export = dsl.ContainerOp(
                name="export-trends",
                image="amazon/aws-cli:2.17.0",
                command=["aws", "s3", "sync"],
                arguments=[f"s3://{bms_bucket}/{bldg}/{month}/", f"/scratch/raw/{bldg}/", "--exclude", "*.tmp"],
                pvolumes={"/scratch": scratch.volume},
            ).apply(use_aws_secret("afdd-aws"))
            clean = clean_op(building=bldg, month=month).add_pvolumes({"/scratch": export.pvolume})
            clean.apply(use_aws_secret("afdd-aws"))

        labels = label_op(month=month).add_pvolumes({"/scratch": scratch.volume}).after(clean)
        labels.apply(use_aws_secret("afdd-aws"))

        train = train_op(model_tag=model_tag, epochs=epochs).add_pvolumes({"/scratch": scratch.volume}).after(labels)
        train.apply(use_aws_secret("afdd-aws"))
        train.set_gpu_limit(1)
        train.add_node_selector_constraint("node.kubernetes.io/instance-type", "g5.2xlarge")
        train.set_memory_limit("60G")

        evaluate = dsl.ContainerOp(
            name="evaluate-holdout",
            image=AFDD_IMAGE,
            command=["python", "-m", "afdd.evaluate"],
            arguments=["--model", train.outputs["model_uri"],
                       "--holdout", "s3://hvac-ml-data/holdout/2025-q3/labeled_windows.parquet",
                       "--report", f"s3://hvac-ml-reports/{model_tag}/holdout.json"],
        ).apply(use_aws_secret("afdd-aws"))

        with dsl.Condition(train.outputs["f1"] > min_f1):
            register = dsl.ContainerOp(
                name="register-model",
                image="amazon/aws-cli:2.17.0",
                command=["aws", "s3", "cp"],
                arguments=[f"s3://hvac-ml-models/afdd/{model_tag}/model.pt",
                           "s3://hvac-model-registry/afdd/production/model.pt"],
            ).apply(use_aws_secret("afdd-aws")).after(evaluate)

            with dsl.ParallelFor(buildings) as b2:
                diag = diagnose_op(building=b2, month=month).add_pvolumes({"/scratch": scratch.volume}).after(register)
                diag.apply(use_aws_secret("afdd-aws"))

            report = report_op(month=month).after(diag)
            report.apply(use_aws_secret("afdd-aws"))


if __name__ == "__main__":
    kfp.compiler.Compiler().compile(hvac_afdd, __file__.replace(".py", ".yaml"))
