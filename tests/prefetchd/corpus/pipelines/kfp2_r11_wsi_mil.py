# ruff: noqa
"""Camelyon17 lymph-node metastasis staging: WSI tiling -> UNI2 foundation-model
embeddings (Lance) -> attention-MIL slide classifier.

Compiled with kfp 2.17.3 + kfp-kubernetes 2.17.3:
    python kfp2_r11_wsi_mil.py   # writes kfp2_r11_wsi_mil.yaml
"""
from kfp import compiler, dsl, kubernetes
from kfp.dsl import Dataset, Input, Metrics, Model, Output

PY_IMAGE = "python:3.11-slim"
WSI_IMAGE = "ghcr.io/acme-digipath/wsi-tools:2025.04.1"
GPU_IMAGE = "ghcr.io/acme-digipath/mil-train:0.9.3-cu124"


@dsl.container_component
def fetch_slides(slides_glob: str, workers: int):
    # s5cmd handles the 3-4 GB pyramidal TIFFs much faster than aws s3 sync
    return dsl.ContainerSpec(
        image="peakcom/s5cmd:v2.2.2",
        command=["/s5cmd"],
        args=["--numworkers", workers, "cp", "--concurrency", "8",
              slides_glob, "/wsi/raw/"],
    )


@dsl.component(base_image=WSI_IMAGE)
def tile_slides(center: str, tile_size: int, mpp: float, tile_index: Output[Dataset]):
    import glob
    import os

    import pandas as pd
    import s3fs
    from wsi_tools import tissue_mask, tile_grid  # openslide + cucim wrapper

    fs = s3fs.S3FileSystem()
    ann_dir = "/wsi/annotations"
    os.makedirs(ann_dir, exist_ok=True)
    # ASAP XML lesion annotations, one file per slide
    fs.get(f"s3://acme-digipath-data/camelyon17/annotations/{center}/", ann_dir, recursive=True)

    rows = []
    for slide in sorted(glob.glob("/wsi/raw/*.tif")):
        slide_id = os.path.basename(slide)[:-4]
        mask = tissue_mask(slide, level=6)
        for x, y in tile_grid(slide, mask, tile_size=tile_size, target_mpp=mpp):
            rows.append((slide_id, x, y))
    df = pd.DataFrame(rows, columns=["slide_id", "x", "y"])
    df.to_parquet(tile_index.path, index=False)
    print(f"{df.slide_id.nunique()} slides, {len(df)} tiles")


@dsl.component(base_image=GPU_IMAGE)
def embed_tiles(tile_index: Input[Dataset], encoder_uri: str, lance_uri: str,
                tile_size: int, batch_size: int = 512):
    import lance
    import pandas as pd
    import pyarrow as pa
    import s3fs
    import timm
    import torch
    from wsi_tools import TileDataset

    fs = s3fs.S3FileSystem()
    fs.get(encoder_uri, "/tmp/encoder/", recursive=True)
    model = timm.create_model("vit_huge_patch14_224", pretrained=False, num_classes=0,
                              dynamic_img_size=True)
    model.load_state_dict(torch.load("/tmp/encoder/pytorch_model.bin", map_location="cpu"))
    model = model.eval().cuda().half()

    tiles = pd.read_parquet(tile_index.path)
    ds = TileDataset(tiles, root="/wsi/raw", tile_size=tile_size)
    loader = torch.utils.data.DataLoader(ds, batch_size=batch_size, num_workers=12)

    def batches():
        with torch.inference_mode():
            for meta, img in loader:
                emb = model(img.cuda().half()).float().cpu().numpy()
                yield pa.RecordBatch.from_pydict({
                    "slide_id": meta["slide_id"], "x": meta["x"], "y": meta["y"],
                    "embedding": list(emb)})

    schema = pa.schema([("slide_id", pa.string()), ("x", pa.int32()), ("y", pa.int32()),
                        ("embedding", pa.list_(pa.float32(), 1536))])
    lance.write_dataset(pa.RecordBatchReader.from_batches(schema, batches()), lance_uri,
                        mode="overwrite", max_rows_per_file=1_000_000)


@dsl.component(base_image=GPU_IMAGE)
def train_mil(lance_uri: str, labels_uri: str, epochs: int,
              model: Output[Model], metrics: Output[Metrics]) -> float:
    import lance
    import pandas as pd
    import torch
    from mil import ABMIL, fit, kfold_auroc

    labels = pd.read_csv(labels_uri)  # patient,slide_id,stage
    tbl = lance.dataset(lance_uri).to_table(columns=["slide_id", "embedding"]).to_pandas()
    bags = {sid: torch.tensor(g.embedding.tolist()) for sid, g in tbl.groupby("slide_id")}
    net = ABMIL(in_dim=1536, n_classes=4)
    fit(net, bags, labels, epochs=epochs)
    auroc = kfold_auroc(net, bags, labels, k=5)
    torch.save(net.state_dict(), model.path)
    metrics.log_metric("macro_auroc", auroc)
    return auroc


@dsl.component(base_image=PY_IMAGE, packages_to_install=["boto3==1.35.36"])
def publish_model(model: Input[Model], center: str, auroc: float):
    import json

    import boto3

    s3 = boto3.client("s3")
    prefix = f"mil/camelyon17/{center}"
    s3.upload_file(model.path, "acme-digipath-models", f"{prefix}/abmil.pt")
    s3.put_object(Bucket="acme-digipath-models", Key=f"{prefix}/metrics.json",
                  Body=json.dumps({"macro_auroc": auroc}).encode())


@dsl.pipeline(name="camelyon17-uni2-abmil",
              description="Tile Camelyon17 WSIs, embed with UNI2-h, train ABMIL staging head.")
def wsi_mil(
    center: str = "center_2",
    slides_glob: str = "s3://acme-digipath-data/camelyon17/slides/center_2/*.tif",
    encoder_uri: str = "s3://acme-digipath-models/encoders/uni2-h/",
    lance_uri: str = "s3://acme-digipath-features/camelyon17/center_2/uni2h_224.lance",
    labels_uri: str = "s3://acme-digipath-data/camelyon17/stage_labels.csv",
    tile_size: int = 224,
    epochs: int = 40,
    min_auroc: float = 0.9,
):
    pvc = kubernetes.CreatePVC(
        pvc_name_suffix="-wsi",
        access_modes=["ReadWriteOnce"],
        size="800Gi",
        storage_class_name="gp3-throughput",
    )

    fetch = fetch_slides(slides_glob=slides_glob, workers=64)
    kubernetes.mount_pvc(fetch, pvc_name=pvc.outputs["name"], mount_path="/wsi")
    kubernetes.use_secret_as_env(fetch, secret_name="digipath-s3",
                                 secret_key_to_env={"AWS_ACCESS_KEY_ID": "AWS_ACCESS_KEY_ID",
                                                    "AWS_SECRET_ACCESS_KEY": "AWS_SECRET_ACCESS_KEY"})

    tiles = tile_slides(center=center, tile_size=tile_size, mpp=0.5).after(fetch)
    tiles.set_cpu_limit("16").set_memory_limit("64Gi")
    kubernetes.mount_pvc(tiles, pvc_name=pvc.outputs["name"], mount_path="/wsi")

    embed = embed_tiles(tile_index=tiles.outputs["tile_index"], encoder_uri=encoder_uri,
                        lance_uri=lance_uri, tile_size=tile_size)
    embed.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(1)
    embed.set_memory_limit("96Gi")
    kubernetes.mount_pvc(embed, pvc_name=pvc.outputs["name"], mount_path="/wsi")
    kubernetes.add_node_selector(embed, "node.kubernetes.io/instance-type", "p4d.24xlarge")
    kubernetes.add_toleration(embed, key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")

    kubernetes.DeletePVC(pvc_name=pvc.outputs["name"]).after(embed)

    train = train_mil(lance_uri=lance_uri, labels_uri=labels_uri, epochs=epochs).after(embed)
    train.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(1)

    with dsl.If(train.outputs["Output"] >= min_auroc, name="auroc-gate"):
        publish_model(model=train.outputs["model"], center=center, auroc=train.outputs["Output"])


if __name__ == "__main__":
    compiler.Compiler().compile(wsi_mil, __file__.replace(".py", ".yaml"))
