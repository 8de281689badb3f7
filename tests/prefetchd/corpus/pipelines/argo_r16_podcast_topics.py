# ruff: noqa
"""Monthly podcast topic modelling over episode transcripts (media analytics team)."""
from hera.workflows import (
    DAG,
    Container,
    Env,
    Parameter,
    Resources,
    S3Artifact,
    SecretEnv,
    Volume,
    Workflow,
    script,
)
from hera.workflows import models as m

WORK = m.VolumeMount(name="work", mount_path="/work")


@script(
    image="ghcr.io/podnet/nlp-gpu:2025.02",
    volume_mounts=[WORK],
    resources=Resources(gpus=1, memory_request="24Gi"),
)
def embed_episodes():
    import glob
    import json
    import os
    import tarfile

    import boto3
    import numpy as np
    from sentence_transformers import SentenceTransformer

    boto3.client("s3").download_file(
        "podnet-nlp-models", "embeddings/all-MiniLM-L6-v2.tar.gz", "/tmp/model.tar.gz"
    )
    with tarfile.open("/tmp/model.tar.gz") as tf:
        tf.extractall("/tmp/model")
    model = SentenceTransformer("/tmp/model", device="cuda")

    with open("/work/stopwords.txt") as fh:
        stop = set(fh.read().split())

    docs = []
    for fn in sorted(glob.glob("/work/transcripts/*/*.vtt")):
        with open(fn) as fh:
            lines = [l.strip() for l in fh if l.strip() and "-->" not in l and not l.startswith("WEBVTT")]
        text = " ".join(w for w in " ".join(lines).split() if w.lower() not in stop)
        show = fn.split("/")[-2]
        docs.append({"show": show, "episode": os.path.basename(fn)[:-4], "text": text})

    emb = model.encode([d["text"] for d in docs], batch_size=64, show_progress_bar=False, normalize_embeddings=True)
    np.save("/work/embeddings.npy", emb)
    with open("/work/docs.jsonl", "w") as fh:
        for d in docs:
            fh.write(json.dumps(d) + "\n")


with Workflow(
    generate_name="podcast-topics-",
    entrypoint="main",
    on_exit="notify-slack",
    arguments=[
        Parameter(name="month", value="2025-03"),
        Parameter(name="publish", value="true"),
    ],
    volumes=[Volume(name="work", size="100Gi", access_modes=["ReadWriteOnce"], storage_class_name="gp3")],
) as w:
    fetch_transcripts = Container(
        name="fetch-transcripts",
        image="amazon/aws-cli:2.17.0",
        inputs=[Parameter(name="show"), Parameter(name="month")],
        command=["sh", "-c"],
        args=[
            "aws s3 sync s3://podnet-transcripts/{{inputs.parameters.show}}/{{inputs.parameters.month}}/ "
            "/work/transcripts/{{inputs.parameters.show}}/ --exclude '*' --include '*.vtt' --only-show-errors"
        ],
        volume_mounts=[WORK],
    )

    fetch_stopwords = Container(
        name="fetch-stopwords",
        image="busybox:1.36",
        inputs=[
            S3Artifact(
                name="stopwords",
                path="/tmp/stopwords.txt",
                endpoint="s3.amazonaws.com",
                bucket="podnet-nlp-ref",
                key="stopwords/en/podcast_stopwords.txt",
            )
        ],
        command=["cp", "/tmp/stopwords.txt", "/work/stopwords.txt"],
        volume_mounts=[WORK],
    )

    cluster_topics = Container(
        name="cluster-topics",
        image="ghcr.io/podnet/topic-model:1.3.0",
        command=["python", "-m", "topics.cluster"],
        args=[
            "--embeddings", "/work/embeddings.npy",
            "--docs", "/work/docs.jsonl",
            "--n-topics", "40",
            "--output", "s3://podnet-analytics/topics/{{workflow.parameters.month}}/topics.parquet",
        ],
        volume_mounts=[WORK],
    )

    publish_dashboard = Container(
        name="publish-dashboard",
        image="rclone/rclone:1.67",
        command=["rclone"],
        args=[
            "copy",
            ":s3:podnet-analytics/topics/{{workflow.parameters.month}}/",
            ":gcs:podnet-dashboards/topics/{{workflow.parameters.month}}/",
            "--s3-provider", "AWS",
            "--s3-env-auth",
            "--gcs-bucket-policy-only",
        ],
        env=[Env(name="RCLONE_GCS_SERVICE_ACCOUNT_FILE", value="/var/secrets/gcp/key.json")],
    )

    notify_slack = Container(
        name="notify-slack",
        image="curlimages/curl:8.8.0",
        command=["sh", "-c"],
        args=['curl -sf -X POST "$SLACK_URL" -d "{\\"text\\": \\"podcast-topics {{workflow.name}}: {{workflow.status}}\\"}"'],
        env=[SecretEnv(name="SLACK_URL", secret_name="slack-media-analytics", secret_key="webhook")],
    )

    with DAG(name="main"):
        ft = fetch_transcripts(
            arguments={"show": "{{item}}", "month": "{{workflow.parameters.month}}"},
            with_items=["true-crime-weekly", "market-open", "founders-unfiltered"],
        )
        fs = fetch_stopwords()
        emb = embed_episodes()
        ct = cluster_topics()
        pub = publish_dashboard(when="{{workflow.parameters.publish}} == true")
        [ft, fs] >> emb >> ct >> pub

if __name__ == "__main__":
    with open(__file__.replace(".py", ".yaml"), "w") as fh:
        fh.write(w.to_yaml())
