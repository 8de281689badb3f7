# ruff: noqa
"""Handwritten text recognition (HTR) for digitised 19th-century parish registers (an archive's digitisation team).
The page scans of each register volume are copied from the scan bucket onto a per-run volume with s5cmd, lines are
segmented per volume (kraken layout model read through tf.io.gfile), the line crops are packed into GZIP TFRecord
shards and synced to the TFRecord bucket, a TrOCR-style model is fine-tuned on a GPU from the TFRecords, evaluated with
tf.data on the validation shards, and when the character error rate is low enough the whole collection is transcribed
with Ray Data and the annotations are published to the IIIF bucket and mirrored to GCS."""
from typing import List

from kfp import compiler, dsl, kubernetes

HTR_IMAGE = "ghcr.io/archivum/htr-pipeline:1.12.0"
HTR_GPU = "ghcr.io/archivum/htr-pipeline:1.12.0-cu121"

FETCH_SCRIPT = """set -euo pipefail
mkdir -p "/work/pages/$1"
s5cmd --numworkers 32 cp "$0/$1/*.tif" "/work/pages/$1/"
echo "$(ls /work/pages/$1 | wc -l) pages for $1"
"""

PUBLISH_SCRIPT = """set -euo pipefail
aws s3 sync "s3://archivum-transcripts/$0/" "s3://archivum-public/iiif/$0/annotations/" \\
    --exclude "*" --include "*.json" --only-show-errors
gcloud storage rsync --recursive "s3://archivum-transcripts/$0/" "gs://archivum-mirror/transcripts/$0/"
"""


@dsl.container_component
def fetch_volume(scan_prefix: str, volume: str):
    return dsl.ContainerSpec(image="peakcom/s5cmd:v2.2.2", command=["sh", "-c", FETCH_SCRIPT],
                             args=[scan_prefix, volume])


@dsl.component(base_image=HTR_IMAGE)
def segment_lines(volume: str):
    import glob
    import os

    import tensorflow as tf
    from kraken import blla
    from kraken.lib import vgsl
    from PIL import Image

    with tf.io.gfile.GFile("s3://archivum-ref/layout/blla_parish_v5.mlmodel", "rb") as f:
        open("/tmp/blla.mlmodel", "wb").write(f.read())
    net = vgsl.TorchVGSLModel.load_model("/tmp/blla.mlmodel")
    os.makedirs("/work/tfrec", exist_ok=True)
    opts = tf.io.TFRecordOptions(compression_type="GZIP")
    with tf.io.TFRecordWriter(f"/work/tfrec/{volume}.tfrecord.gz", options=opts) as w:
        for page in sorted(glob.glob(f"/work/pages/{volume}/*.tif")):
            im = Image.open(page)
            for i, line in enumerate(blla.segment(im, model=net)["lines"]):
                crop = im.crop(line["bbox"]).convert("L")
                feat = {"image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[crop.tobytes()])),
                        "key": tf.train.Feature(bytes_list=tf.train.BytesList(value=[f"{page}:{i}".encode()]))}
                w.write(tf.train.Example(features=tf.train.Features(feature=feat)).SerializeToString())


@dsl.component(base_image=HTR_IMAGE)
def pack_shards(collection: str, n_shards: int):
    import glob
    import subprocess

    from htr.shards import reshard

    reshard(sorted(glob.glob("/work/tfrec/*.tfrecord.gz")), "/work/shards", n_shards=n_shards, val_fraction=0.05,
            labels="s3://archivum-ground-truth/parish/line_transcriptions_v3.jsonl")
    subprocess.run(["aws", "s3", "sync", "/work/shards/", f"s3://archivum-tfrec/{collection}/",
                    "--only-show-errors"], check=True)


@dsl.container_component
def train_htr(collection: str, base_model: str):
    return dsl.ContainerSpec(
        image=HTR_GPU,
        command=["python", "-m", "htr.train"],
        args=["--train-pattern", f"s3://archivum-tfrec/{collection}/train-*.tfrecord.gz",
              "--val-pattern", f"s3://archivum-tfrec/{collection}/val-*.tfrecord.gz",
              "--charset", "s3://archivum-ref/charsets/latin-ext-1850.txt",
              "--pretrained", base_model,
              "--batch-size", "48",
              "--job-dir", f"s3://archivum-models/htr/{collection}/"],
    )


@dsl.component(base_image=HTR_GPU)
def eval_htr(collection: str) -> float:
    import tensorflow as tf

    from htr.metrics import cer, parse_example

    files = tf.io.gfile.glob(f"s3://archivum-tfrec/{collection}/val-*.tfrecord.gz")
    val = tf.data.TFRecordDataset(files, compression_type="GZIP").map(parse_example).batch(64)
    model = tf.saved_model.load(f"s3://archivum-models/htr/{collection}/export/")
    return float(cer(model, val))


@dsl.component(base_image=HTR_GPU, packages_to_install=["ray[data]==2.40.0"])
def transcribe_collection(collection: str, volumes: List[str]):
    import ray

    from htr.infer import Transcriber

    pages = ray.data.read_images([f"/work/pages/{v}/" for v in volumes], include_paths=True, mode="L")
    lines = pages.map_batches(Transcriber, fn_constructor_kwargs={"export_dir": f"s3://archivum-models/htr/{collection}/export/"},
                              batch_size=16, num_gpus=1, concurrency=1)
    lines.write_json(f"s3://archivum-transcripts/{collection}/")


@dsl.container_component
def publish_iiif(collection: str):
    return dsl.ContainerSpec(image="ghcr.io/archivum/cloud-tools:2025.11",
                             command=["bash", "-c", PUBLISH_SCRIPT], args=[collection])


@dsl.pipeline(name="parish-register-htr")
def parish_htr(collection: str = "parish-registers-1850",
               scan_prefix: str = "s3://archivum-scans/raw/parish",
               volumes: List[str] = ["vol-0412", "vol-0413", "vol-0419"],
               base_model: str = "s3://archivum-models/trocr-base-handwritten/",
               n_shards: int = 32,
               max_cer: float = 0.08):
    pvc = kubernetes.CreatePVC(pvc_name_suffix="-htr-work", access_modes=["ReadWriteMany"], size="200Gi",
                               storage_class_name="efs-sc")

    with dsl.ParallelFor(volumes, parallelism=3) as vol:
        fetch = fetch_volume(scan_prefix=scan_prefix, volume=vol)
        kubernetes.mount_pvc(fetch, pvc_name=pvc.outputs["name"], mount_path="/work")
        seg = segment_lines(volume=vol).after(fetch).set_cpu_limit("8").set_memory_limit("16G")
        kubernetes.mount_pvc(seg, pvc_name=pvc.outputs["name"], mount_path="/work")

    pack = pack_shards(collection=collection, n_shards=n_shards).after(seg)
    kubernetes.mount_pvc(pack, pvc_name=pvc.outputs["name"], mount_path="/work")

    tr = train_htr(collection=collection, base_model=base_model).after(pack)
    tr.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(1).set_memory_limit("48G")
    kubernetes.add_toleration(tr, key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")

    ev = eval_htr(collection=collection).after(tr)
    ev.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(1)

    with dsl.If(ev.output < max_cer, name="good-enough"):
        tx = transcribe_collection(collection=collection, volumes=volumes)
        tx.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(1).set_memory_limit("32G")
        kubernetes.mount_pvc(tx, pvc_name=pvc.outputs["name"], mount_path="/work")
        pub = publish_iiif(collection=collection).after(tx)
        kubernetes.use_secret_as_env(pub, secret_name="archivum-gcs", secret_key_to_env={"hmac": "GCS_HMAC"})
        kubernetes.DeletePVC(pvc_name=pvc.outputs["name"]).after(pub)


if __name__ == "__main__":
    compiler.Compiler().compile(parish_htr, __file__.replace(".py", ".yaml"))
