# ruff: noqa
"""KFP v2 (held-out test): invoice OCR + Donut layout fine-tuning.
Idioms: s3torchconnector S3MapDataset.from_prefix over an f-string per static loop item,
an existing PVC named by a pipeline parameter mounted read-only for OCR language packs,
a config map as volume, a pathlib-built local path, dsl.Collected, a container component
with --pretrained (constant) and --annotations (pipeline parameter), ExitHandler with a
notifier, a push step using `aws s3 sync` inside sh -c with $0/$1.

Compile: /tmp/kfp2/bin/python kfp2_heldout_invoice_ocr.py
"""
import os
from typing import List

from kfp import compiler, dsl, kubernetes

OCR_IMAGE = 'ghcr.io/acme-docs/ocr-worker:5.3.0'
DONUT_IMAGE = 'ghcr.io/acme-docs/donut-train:1.8.1'


@dsl.component(base_image=OCR_IMAGE)
def ocr_shard(scans_prefix: str, shard: str, lang_pack: str, pages: dsl.Output[dsl.Dataset]):
    import json
    from pathlib import Path

    import pytesseract
    from PIL import Image
    from s3torchconnector import S3MapDataset
    ds = S3MapDataset.from_prefix(f"{scans_prefix}{shard}/", region="eu-central-1")
    tessdata = Path("/models") / "tessdata_best"
    out = Path(pages.path)
    out.mkdir(parents=True, exist_ok=True)
    for i in range(len(ds)):
        obj = ds[i]
        img = Image.open(obj)
        text = pytesseract.image_to_data(img, lang=lang_pack, config=f"--tessdata-dir {tessdata}")
        (out / f"{i:06d}.json").write_text(json.dumps({"key": obj.key, "ocr": text}))


@dsl.component(base_image=OCR_IMAGE)
def merge_pages(parts: List[dsl.Dataset], merged: dsl.Output[dsl.Dataset]):
    import shutil
    from pathlib import Path
    dst = Path(merged.path)
    dst.mkdir(parents=True, exist_ok=True)
    for n, p in enumerate(parts):
        shutil.copytree(p.path, dst / f"part-{n:03d}")


@dsl.container_component
def donut_finetune(pages: dsl.Input[dsl.Dataset], annotations: str, model: dsl.Output[dsl.Model]):
    return dsl.ContainerSpec(
        image=DONUT_IMAGE,
        command=['python', '-m', 'donut.train'],
        args=['--pretrained', 's3://acme-docs-models/donut-base/v1.2/',
              '--annotations', annotations,
              '--pages-dir', pages.path,
              '--epochs', '12',
              '--save-dir', model.path])


@dsl.container_component
def push_model(model: dsl.Input[dsl.Model], registry_prefix: str):
    return dsl.ContainerSpec(
        image='amazon/aws-cli:2.15.30',
        command=['sh', '-c'],
        args=['aws s3 sync "$0" "$1" --only-show-errors', model.path, registry_prefix])


@dsl.container_component
def notify_ops(pipeline: str):
    return dsl.ContainerSpec(
        image='curlimages/curl:8.8.0', command=['sh', '-c'],
        args=['curl -fsS -X POST "$OPS_HOOK" -d "pipeline=$0 status={{workflow.status}}"', pipeline])


@dsl.pipeline(name='invoice-ocr-donut')
def invoice_ocr(scans_prefix: str = 's3://acme-docs-raw/invoices/2024/06/',
                annotations: str = 's3://acme-docs-labels/invoices/v7/annotations.jsonl',
                ocr_pvc: str = 'ocr-tessdata', lang_pack: str = 'eng+deu'):
    bye = notify_ops(pipeline='invoice-ocr-donut')
    kubernetes.use_secret_as_env(bye, secret_name='ops-hook', secret_key_to_env={'url': 'OPS_HOOK'})
    with dsl.ExitHandler(bye, name='ocr-train'):
        with dsl.ParallelFor(['part-000', 'part-001', 'part-002'], parallelism=3) as shard:
            ocr = ocr_shard(scans_prefix=scans_prefix, shard=shard, lang_pack=lang_pack)
            ocr.set_cpu_limit('8').set_memory_limit('16G')
            kubernetes.mount_pvc(ocr, pvc_name=ocr_pvc, mount_path='/models')
            kubernetes.use_config_map_as_volume(ocr, config_map_name='ocr-layout', mount_path='/etc/ocr')
        merged = merge_pages(parts=dsl.Collected(ocr.outputs['pages']))
        ft = donut_finetune(pages=merged.outputs['merged'], annotations=annotations)
        ft.set_accelerator_type('nvidia.com/gpu').set_accelerator_limit(2)
        push_model(model=ft.outputs['model'], registry_prefix='s3://acme-docs-models/donut-invoices/v7/')


if __name__ == '__main__':
    compiler.Compiler().compile(invoice_ocr, os.path.splitext(__file__)[0] + '.yaml')
