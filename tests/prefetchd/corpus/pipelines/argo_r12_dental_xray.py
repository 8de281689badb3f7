# ruff: noqa
"""Panoramic dental X-ray (OPG) batch screening.

Pulls a quarter's DICOM batch from the imaging bucket, converts to PNG,
segments teeth with the ONNX U-Net, then runs one detector per finding type
(caries, periapical lesions) and produces a QA report against the gold set.
"""
from hera.workflows import (
    DAG,
    Container,
    Env,
    Parameter,
    RetryStrategy,
    S3Artifact,
    SecretEnv,
    Volume,
    Workflow,
    models as m,
    script,
)

WORK = Volume(name="work", size="200Gi", mount_path="/work", storage_class_name="gp3", access_modes=["ReadWriteOnce"])
AWS_ENV = [Env(name="AWS_DEFAULT_REGION", value="us-east-1")]

FINDINGS = [
    {"finding": "caries", "weights": "s3://acme-dental-models/findings/caries-yolo/v3/best.pt"},
    {"finding": "periapical", "weights": "s3://acme-dental-models/findings/periapical-yolo/v1.4/best.pt"},
]

fetch_radiographs = Container(
    name="fetch-radiographs",
    image="amazon/aws-cli:2.17.20",
    command=["aws"],
    args=[
        "s3", "sync", "{{workflow.parameters.opg-prefix}}", "/work/opg/",
        "--exclude", "*", "--include", "*.dcm", "--only-show-errors",
    ],
    env=AWS_ENV,
    volume_mounts=[m.VolumeMount(name="work", mount_path="/work")],
    retry_strategy=RetryStrategy(limit=3, retry_policy="OnError"),
)


@script(
    image="ghcr.io/acme-dental/dicom-tools:1.8.0",
    volume_mounts=[m.VolumeMount(name="work", mount_path="/work")],
)
def dicom_to_png(window: str):
    import glob
    import os

    import numpy as np
    import pydicom
    from PIL import Image

    lo, hi = (int(v) for v in window.split(","))
    os.makedirs("/work/png", exist_ok=True)
    for path in glob.glob("/work/opg/**/*.dcm", recursive=True):
        ds = pydicom.dcmread(path)
        arr = ds.pixel_array.astype(np.float32)
        arr = np.clip((arr - lo) / (hi - lo), 0, 1) * 255
        Image.fromarray(arr.astype(np.uint8)).save(f"/work/png/{ds.SOPInstanceUID}.png")


segment_teeth = Container(
    name="segment-teeth",
    image="ghcr.io/acme-dental/tooth-seg:2.1.0",
    command=["python", "-m", "toothseg.infer"],
    args=["--images", "/work/png", "--model", "/models/unet.onnx", "--out", "/work/masks", "--batch-size", "16"],
    inputs=[
        S3Artifact(
            name="weights",
            path="/models/unet.onnx",
            bucket="acme-dental-models",
            key="tooth-seg/unet-r50/v2.1/model.onnx",
            endpoint="s3.amazonaws.com",
            region="us-east-1",
            access_key_secret=m.SecretKeySelector(name="dental-s3", key="accessKey"),
            secret_key_secret=m.SecretKeySelector(name="dental-s3", key="secretKey"),
        )
    ],
    volume_mounts=[m.VolumeMount(name="work", mount_path="/work")],
    resources=m.ResourceRequirements(limits={"nvidia.com/gpu": "1", "memory": "24Gi"}),
    retry_strategy=RetryStrategy(limit=2, retry_policy="Always", backoff=m.Backoff(duration="30s", factor="2")),
)


@script(
    image="ghcr.io/acme-dental/findings-det:0.9.3",
    volume_mounts=[m.VolumeMount(name="work", mount_path="/work")],
    env=AWS_ENV,
)
def detect_findings(finding: str, weights: str, batch: str):
    import glob
    from urllib.parse import urlparse

    import boto3
    import pandas as pd
    from ultralytics import YOLO

    u = urlparse(weights)
    boto3.client("s3").download_file(u.netloc, u.path.lstrip("/"), "/tmp/best.pt")
    det = YOLO("/tmp/best.pt")
    masks = {p.rsplit("/", 1)[-1]: p for p in glob.glob("/work/masks/*.png")}
    rows = []
    for png in sorted(glob.glob("/work/png/*.png")):
        for r in det.predict(png, conf=0.25, verbose=False):
            for box, conf in zip(r.boxes.xyxy.tolist(), r.boxes.conf.tolist()):
                name = png.rsplit("/", 1)[-1]
                rows.append({"image": name, "finding": finding, "conf": conf, "box": box, "mask": masks.get(name)})
    pd.DataFrame(rows).to_csv(f"s3://acme-dental-results/{batch}/{finding}.csv", index=False)


@script(image="ghcr.io/acme-dental/findings-det:0.9.3", env=AWS_ENV)
def qa_report(batch: str):
    import io

    import boto3
    import pandas as pd

    gold = pd.read_parquet("s3://acme-dental-data/annotations/gold/opg_gold_v5.parquet")
    preds = pd.concat(
        [pd.read_csv(f"s3://acme-dental-results/{batch}/{f}.csv") for f in ("caries", "periapical")],
        ignore_index=True,
    )
    merged = gold.merge(preds, on=["image", "finding"], how="outer", indicator=True)
    summary = merged.groupby(["finding", "_merge"]).size().unstack(fill_value=0)
    buf = io.StringIO()
    summary.to_html(buf)
    boto3.client("s3").put_object(
        Bucket="acme-dental-results", Key=f"{batch}/qa_report.html", Body=buf.getvalue().encode(), ContentType="text/html"
    )


export_masks = Container(
    name="export-masks",
    image="peakcom/s5cmd:v2.2.2",
    command=["/s5cmd"],
    args=["--numworkers", "64", "sync", "/work/masks/", "s3://acme-dental-results/{{workflow.parameters.batch}}/masks/"],
    env=AWS_ENV,
    volume_mounts=[m.VolumeMount(name="work", mount_path="/work", read_only=True)],
)

with Workflow(
    generate_name="opg-screening-",
    entrypoint="main",
    namespace="dental-ml",
    service_account_name="argo-dental",
    on_exit="notify",
    volumes=[WORK],
    arguments=[
        Parameter(name="opg-prefix", value="s3://acme-dental-imaging/opg/2025-q2/"),
        Parameter(name="batch", value="2025-q2"),
        Parameter(name="window", value="500,3500"),
    ],
) as w:
    notify = Container(
        name="notify",
        image="curlimages/curl:8.8.0",
        command=["sh", "-c"],
        args=[
            'curl -sf -X POST "$WEBHOOK" -H "Content-Type: application/json" '
            "-d '{\"text\": \"opg-screening {{workflow.name}}: {{workflow.status}}\"}'"
        ],
        env=[SecretEnv(name="WEBHOOK", secret_name="dental-teams", secret_key="url")],
    )

    with DAG(name="main"):
        f = fetch_radiographs(name="fetch-radiographs")
        p = dicom_to_png(name="dicom-to-png", arguments={"window": "{{workflow.parameters.window}}"})
        s = segment_teeth(name="segment-teeth")
        d = detect_findings(
            name="detect-findings",
            with_items=FINDINGS,
            arguments={"finding": "{{item.finding}}", "weights": "{{item.weights}}", "batch": "{{workflow.parameters.batch}}"},
        )
        e = export_masks(name="export-masks")
        q = qa_report(name="qa-report", arguments={"batch": "{{workflow.parameters.batch}}"})
        f >> p >> s >> [d, e]
        d >> q


if __name__ == "__main__":
    with open(__file__.replace(".py", ".yaml"), "w") as fh:
        fh.write(w.to_yaml())
