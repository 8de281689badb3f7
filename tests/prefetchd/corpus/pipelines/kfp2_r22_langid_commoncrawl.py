# ruff: noqa
"""Low-resource language identification and filtering of a Common Crawl snapshot (KFP v2 + kfp-kubernetes)."""
from typing import List
from kfp import compiler, dsl, kubernetes
from kfp.dsl import Artifact, Input, Model, Output

TOOLS = "ghcr.io/openlang/langid-tools:3.2.0"


@dsl.component(base_image=TOOLS)
def shard_manifest(crawl: str, manifest: Output[Artifact]) -> int:
    import s3fs
    CFG = {
        "segments": f"commoncrawl-mirror/crawl-data/{crawl}/segments",
        "blocklist": "s3://langid-ref/blocklists/domains_2025-06.txt",
    }
    fs = s3fs.S3FileSystem()
    wet = fs.glob(CFG["segments"] + "/*/wet/*.warc.wet.gz")
    with fs.open(CFG["blocklist"]) as f:
        blocked = {ln.strip() for ln in f.read().decode().splitlines() if ln.strip()}
    with open(manifest.path, "w") as out:
        for p in wet:
            out.write(f"s3://{p}\n")
    manifest.metadata["blocked_domains"] = len(blocked)
    return len(wet)


@dsl.container_component
def score_gold(lang: str, crawl: str, model: Input[Model]):
    return dsl.ContainerSpec(
        image=TOOLS,
        command=["python", "-m", "langid.score"],
        args=["--model_name_or_path", model.path,
              "--shards", dsl.ConcatPlaceholder(["pipe:aws s3 cp s3://langid-wds/gold/", lang, "/shard-{0000..0015}.tar -"]),
              "--report", dsl.ConcatPlaceholder(["s3://langid-reports/", crawl, "/", lang, "/confusion.json"])])


@dsl.component(base_image=TOOLS)
def filter_crawl(crawl: str, langs: List[str], threshold: float, model: Input[Model], manifest: Input[Artifact]):
    import os
    import subprocess
    import webdataset as wds
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(model.path)
    clf = AutoModelForSequenceClassification.from_pretrained(model.path).eval()
    src = wds.WebDataset(f"pipe:aws s3 cp s3://commoncrawl-mirror/wds/{crawl}/part-{{00000..00511}}.tar -", shardshuffle=False)
    os.makedirs("/scratch/out", exist_ok=True)
    with wds.ShardWriter("/scratch/out/kept-%06d.tar", maxcount=50000) as sink:
        for sample in src.decode():
            text = sample["txt"]
            probs = clf(**tok(text[:2000], return_tensors="pt", truncation=True)).logits.softmax(-1)[0]
            lang = clf.config.id2label[int(probs.argmax())]
            if lang in langs and float(probs.max()) >= threshold:
                sink.write({"__key__": sample["__key__"], "txt": text, "lang": lang})
    subprocess.run(["aws", "s3", "sync", "/scratch/out/", f"s3://langid-filtered/{crawl}/"], check=True)


@dsl.pipeline(name="langid-commoncrawl")
def langid(crawl: str = "CC-MAIN-2025-26",
           langs: List[str] = ["sw", "yo", "ha"],
           threshold: float = 0.9,
           model_uri: str = "s3://langid-models/xlmr-langid/v5/"):
    imp = dsl.importer(artifact_uri=model_uri, artifact_class=Model, reimport=False,
                       metadata={"base": "xlm-roberta-base", "labels": 217})
    man = shard_manifest(crawl=crawl)
    kubernetes.set_image_pull_secrets(man, ["openlang-ghcr"])
    with dsl.ParallelFor(langs, parallelism=3) as lang:
        sc = score_gold(lang=lang, crawl=crawl, model=imp.output)
        kubernetes.add_node_selector(sc, "node.openlang.io/pool", "cpu-highmem")
    with dsl.If(man.outputs["Output"] > 0, name="has-shards"):
        fl = filter_crawl(crawl=crawl, langs=langs, threshold=threshold, model=imp.output,
                          manifest=man.outputs["manifest"]).after(sc)
        kubernetes.empty_dir_mount(fl, volume_name="scratch", mount_path="/scratch", size_limit="500Gi")
        fl.set_cpu_limit("32").set_memory_limit("128G")


if __name__ == "__main__":
    compiler.Compiler().compile(langid, __file__.replace(".py", ".yaml"))
