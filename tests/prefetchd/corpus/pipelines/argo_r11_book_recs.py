# ruff: noqa
"""Two-tower retrieval model for a reading app ("readers who finished X..."),
monthly retrain as an Argo Workflow DAG written with Hera 7.1.0.

interactions snapshot (aws s3 sync) + catalog text embeddings (Lance ->
sentence-transformers) -> two-tower training on Ray -> FAISS index -> offline
recall@100 on the holdout month -> promote index to `current/` when it clears
the bar.

    /tmp/hera/bin/python argo_r11_book_recs.py
"""
import os

from hera.workflows import (DAG, Container, Parameter, RetryStrategy, Workflow,
                            models as m, script)

WORK = m.VolumeMount(name="work", mount_path="/work")
TRAIN_IMAGE = "ghcr.io/acme-reads/recsys-train:1.11.0-ray2.37-cu121"
AWS_ENV = [m.EnvVar(name="AWS_REGION", value="us-east-1")]


@script(image="ghcr.io/acme-reads/recsys-py:1.11.0", volume_mounts=[WORK],
        resources=m.ResourceRequirements(requests={"cpu": "8", "memory": "32Gi"},
                                         limits={"nvidia.com/gpu": "1"}))
def encode_catalog(catalog_uri: str, encoder: str):
    import lance
    import numpy as np
    from sentence_transformers import SentenceTransformer

    tbl = lance.dataset(catalog_uri).to_table(
        columns=["book_id", "title", "authors", "blurb"], filter="is_active = true")
    df = tbl.to_pandas()
    text = (df.title + " by " + df.authors.str.join(", ") + ". " + df.blurb.fillna("")).tolist()
    model = SentenceTransformer(encoder, device="cuda")
    emb = model.encode(text, batch_size=512, normalize_embeddings=True, show_progress_bar=False)
    np.save("/work/item_text_emb.npy", emb.astype("float32"))
    df[["book_id"]].to_parquet("/work/item_ids.parquet")


@script(image="ghcr.io/acme-reads/recsys-py:1.11.0", volume_mounts=[WORK])
def build_ann_index(month: str):
    import boto3
    import faiss
    import numpy as np

    items = np.load("/work/model/item_tower_emb.npy")
    index = faiss.index_factory(items.shape[1], "IVF4096,PQ32x8", faiss.METRIC_INNER_PRODUCT)
    index.train(items)
    index.add(items)
    faiss.write_index(index, "/work/index.faiss")
    s3 = boto3.client("s3")
    for f in ("index.faiss", "item_ids.parquet"):
        s3.upload_file(f"/work/{f}", "acme-reads-serving", f"two-tower/{month}/{f}")
    s3.upload_file("/work/model/user_tower.onnx", "acme-reads-serving", f"two-tower/{month}/user_tower.onnx")


@script(image="ghcr.io/acme-reads/recsys-py:1.11.0", volume_mounts=[WORK])
def offline_eval(holdout_uri: str, k: int):
    import faiss
    import numpy as np
    import onnxruntime as ort
    import pandas as pd

    hold = pd.read_parquet(holdout_uri, columns=["user_id", "history", "next_book_id"])
    ids = pd.read_parquet("/work/item_ids.parquet").book_id.to_numpy()
    index = faiss.read_index("/work/index.faiss")
    index.nprobe = 32
    sess = ort.InferenceSession("/work/model/user_tower.onnx")
    users = sess.run(None, {"history": np.stack(hold.history.to_numpy())})[0]
    _, nn = index.search(users, k)
    recall = float(np.mean([t in set(ids[r]) for t, r in zip(hold.next_book_id, nn)]))
    print(f"{recall:.4f}")


with Workflow(
    generate_name="book-two-tower-",
    entrypoint="main",
    namespace="recsys",
    service_account_name="recsys-pipelines",
    arguments=[
        Parameter(name="month", value="2025-06"),
        Parameter(name="interactions_uri", value="s3://acme-reads-lake/interactions/month=2025-06/"),
        Parameter(name="catalog_uri", value="s3://acme-reads-lake/catalog/books.lance"),
        Parameter(name="min_recall", value="0.18"),
    ],
    volume_claim_templates=[m.PersistentVolumeClaim(
        metadata=m.ObjectMeta(name="work"),
        spec=m.PersistentVolumeClaimSpec(
            access_modes=["ReadWriteOnce"], storage_class_name="gp3",
            resources=m.VolumeResourceRequirements(requests={"storage": m.Quantity("200Gi")})))],
    pod_gc=m.PodGC(strategy="OnPodSuccess"),
    ttl_strategy=m.TTLStrategy(seconds_after_success=86400),
) as w:
    snapshot = Container(
        name="snapshot-interactions",
        image="amazon/aws-cli:2.17.0",
        command=["aws", "s3", "sync"],
        args=["{{workflow.parameters.interactions_uri}}", "/work/interactions/",
              "--exclude", "*", "--include", "*.parquet", "--only-show-errors"],
        env=AWS_ENV,
        volume_mounts=[WORK],
    )
    train = Container(
        name="train-two-tower",
        image=TRAIN_IMAGE,
        command=["python", "-m", "recsys.two_tower.train"],
        args=["--interactions", "/work/interactions", "--item-text-emb", "/work/item_text_emb.npy",
              "--embed-dim", "128", "--negatives", "in-batch+mixed", "--epochs", "6",
              "--ray-address", "auto", "--output", "/work/model"],
        volume_mounts=[WORK],
        retry_strategy=RetryStrategy(limit=2, retry_policy="OnError"),
        resources=m.ResourceRequirements(requests={"cpu": "16", "memory": "96Gi"},
                                         limits={"nvidia.com/gpu": "4"}),
    )
    promote = Container(
        name="promote-index",
        image="amazon/aws-cli:2.17.0",
        command=["sh", "-c"],
        args=["aws s3 sync --delete s3://acme-reads-serving/two-tower/{{workflow.parameters.month}}/ "
              "s3://acme-reads-serving/two-tower/current/ && "
              "echo '{{workflow.parameters.month}}' | aws s3 cp - s3://acme-reads-serving/two-tower/current/VERSION"],
        env=AWS_ENV,
    )

    with DAG(name="main"):
        s = snapshot(name="snapshot-interactions")
        e = encode_catalog(name="encode-catalog",
                           arguments={"catalog_uri": "{{workflow.parameters.catalog_uri}}",
                                      "encoder": "sentence-transformers/all-MiniLM-L12-v2"})
        t = train(name="train-two-tower")
        idx = build_ann_index(name="build-ann-index", arguments={"month": "{{workflow.parameters.month}}"})
        ev = offline_eval(name="offline-eval",
                          arguments={"holdout_uri": "s3://acme-reads-lake/holdout/month=2025-07/next_read.parquet",
                                     "k": "100"})
        p = promote(name="promote-index",
                    when="{{tasks.offline-eval.outputs.result}} >= {{workflow.parameters.min_recall}}")
        [s, e] >> t >> idx >> ev >> p

if __name__ == "__main__":
    with open(os.path.splitext(__file__)[0] + ".yaml", "w") as f:
        f.write(w.to_yaml())
