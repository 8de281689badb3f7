# ruff: noqa
"""Galaxy Zoo DECaLS morphology fine-tune + DESI Legacy Survey inference (Hera).

Astro-ML group. Cutout shards are discovered by listing the survey prefix,
preprocessed in parallel, Zoobot is fine-tuned on volunteer vote fractions,
then run over DR10 north/south cutouts; predictions are exported with DuckDB.
"""
from hera.workflows import (
    DAG,
    Container,
    Parameter,
    RetryStrategy,
    Resources,
    S3Artifact,
    Artifact,
    Workflow,
    models as m,
    script,
)

WORK = m.VolumeMount(name="work", mount_path="/work")


@script(image="python:3.11-slim", add_cwd_to_sys_path=False)
def list_shards(bucket: str, prefix: str):
    import json
    import subprocess, sys
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "boto3==1.34.131"], check=True)
    import boto3

    keys = []
    for page in boto3.client("s3").get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys += [o["Key"].rsplit("/", 1)[-1] for o in page.get("Contents", []) if o["Key"].endswith(".parquet")]
    json.dump(sorted(keys), sys.stdout)


@script(image="python:3.11-slim", volume_mounts=[WORK])
def export_catalog(release: str):
    import subprocess, sys
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "duckdb==1.0.0"], check=True)
    import duckdb

    con = duckdb.connect()
    con.sql("INSTALL httpfs; LOAD httpfs; CREATE SECRET (TYPE S3, PROVIDER CREDENTIAL_CHAIN, REGION 'us-west-2');")
    con.sql(f"""
        COPY (SELECT * FROM read_parquet('/work/preds/*.parquet', filename = true))
        TO 's3://astro-ml-catalogs/gz-desi-morphology/{release}/predictions.parquet' (FORMAT PARQUET)
    """)


with Workflow(
    generate_name="gz-desi-morphology-",
    entrypoint="main",
    on_exit="notify",
    service_account_name="astro-ml-runner",
    arguments=[Parameter(name="epochs", value="30"), Parameter(name="release", value="2025-06")],
    volume_claim_templates=[
        m.PersistentVolumeClaim(
            metadata=m.ObjectMeta(name="work"),
            spec=m.PersistentVolumeClaimSpec(
                access_modes=["ReadWriteOnce"],
                storage_class_name="gp3",
                resources=m.VolumeResourceRequirements(requests={"storage": m.Quantity("200Gi")}),
            ),
        )
    ],
) as w:
    preprocess = Container(
        name="preprocess-shard",
        image="ghcr.io/astro-ml/cutout-tools:0.9.3",
        command=["python", "-m", "cutouts.preprocess"],
        args=["--in", "/tmp/shard.parquet", "--out", "/work/prepped/{{inputs.parameters.shard}}",
              "--size", "224", "--greyscale"],
        inputs=[
            Parameter(name="shard"),
            S3Artifact(
                name="shard-file",
                path="/tmp/shard.parquet",
                endpoint="s3.us-west-2.amazonaws.com",
                bucket="astro-ml-surveys",
                key="gz-decals/dr5/cutouts/{{inputs.parameters.shard}}",
                access_key_secret=m.SecretKeySelector(name="astro-s3", key="accessKey"),
                secret_key_secret=m.SecretKeySelector(name="astro-s3", key="secretKey"),
            ),
        ],
        volume_mounts=[WORK],
        retry_strategy=RetryStrategy(limit="3", retry_policy="OnTransientError"),
    )

    fetch_labels = Container(
        name="fetch-labels",
        image="busybox:1.36",
        command=["sh", "-c"],
        args=["mkdir -p /work/labels && cp /tmp/votes.parquet /work/labels/gz_decals_volunteers_5.parquet"],
        inputs=[
            S3Artifact(
                name="votes",
                path="/tmp/votes.parquet",
                endpoint="s3.us-west-2.amazonaws.com",
                bucket="astro-ml-surveys",
                key="gz-decals/dr5/catalogs/gz_decals_volunteers_5.parquet",
                access_key_secret=m.SecretKeySelector(name="astro-s3", key="accessKey"),
                secret_key_secret=m.SecretKeySelector(name="astro-s3", key="secretKey"),
            )
        ],
        volume_mounts=[WORK],
    )

    train = Container(
        name="finetune-zoobot",
        image="ghcr.io/astro-ml/zoobot:2.0.1-cu121",
        command=["python", "scripts/finetune_decals.py"],
        args=[
            "--encoder", "hf_hub:mwalmsley/zoobot-encoder-convnext_nano",
            "--catalog", "/work/labels/gz_decals_volunteers_5.parquet",
            "--image-dir", "/work/prepped",
            "--epochs", "{{workflow.parameters.epochs}}",
            "--save-dir", "/work/ckpt",
        ],
        volume_mounts=[WORK],
        resources=Resources(gpus=1, memory_request="40Gi", cpu_request="8"),
        tolerations=[m.Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")],
    )

    predict = Container(
        name="predict-survey",
        image="ghcr.io/astro-ml/zoobot:2.0.1-cu121",
        command=["python", "scripts/predict_catalog.py"],
        args=[
            "--checkpoint", "/work/ckpt/best.ckpt",
            "--cutouts", "{{inputs.parameters.cutouts}}",
            "--out", "/work/preds/{{inputs.parameters.region}}.parquet",
            "--batch-size", "512",
        ],
        inputs=[Parameter(name="region"), Parameter(name="cutouts")],
        env=[m.EnvVar(name="AWS_REGION", value="us-west-2")],
        volume_mounts=[WORK],
        resources=Resources(gpus=1, memory_request="24Gi"),
        retry_strategy=RetryStrategy(limit="2"),
    )

    notify = Container(
        name="notify",
        image="curlimages/curl:8.8.0",
        command=["sh", "-c"],
        args=['curl -sS -X POST -H "Content-type: application/json" '
              '--data "{\\"text\\": \\"gz-desi morphology {{workflow.name}}: {{workflow.status}}\\"}" "$SLACK_URL"'],
        env=[m.EnvVar(name="SLACK_URL", value_from=m.EnvVarSource(
            secret_key_ref=m.SecretKeySelector(name="slack-webhooks", key="astro-ml")))],
    )

    with DAG(name="main"):
        ls = list_shards(arguments={"bucket": "astro-ml-surveys", "prefix": "gz-decals/dr5/cutouts/"})
        prep = preprocess(
            name="preprocess",
            arguments={"shard": "{{item}}"},
            with_param=ls.result,
        )
        lab = fetch_labels()
        ft = train(name="train")
        pr = predict(
            name="predict",
            with_items=[
                {"region": "dr10-south", "cutouts": "s3://astro-ml-surveys/desi-ls/dr10/south/cutouts-224/"},
                {"region": "dr10-north", "cutouts": "s3://astro-ml-surveys/desi-ls/dr10/north/cutouts-224/"},
            ],
            arguments={"region": "{{item.region}}", "cutouts": "{{item.cutouts}}"},
        )
        ex = export_catalog(arguments={"release": "{{workflow.parameters.release}}"})
        ls >> prep
        [prep, lab] >> ft >> pr >> ex

if __name__ == "__main__":
    with open(__file__.replace(".py", ".yaml"), "w") as f:
        f.write(w.to_yaml())
