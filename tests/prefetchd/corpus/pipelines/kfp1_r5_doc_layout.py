# ruff: noqa
import kfp
from kfp import dsl, onprem
from kfp.components import create_component_from_func, InputPath, OutputPath


def detect_layout(publaynet_uri: str, weights_uri: str, pages_dir: str, n_pages_out: OutputPath(int)):
    import functools
    import glob
    import os
    import fsspec
    from torchdata.datapipes.iter import IterableWrapper
    loader = functools.partial(fsspec.open, mode="rb")
    with loader(weights_uri + "pytorch_model.bin") as f:
        state = f.read()
    calib = IterableWrapper([publaynet_uri]).open_files_by_fsspec(mode="rb").load_from_tar()
    pngs = sorted(glob.glob(os.path.join(pages_dir, "png", "*.png")))
    os.makedirs(os.path.join(pages_dir, "pred"), exist_ok=True)
    with open(n_pages_out, "w") as f:
        f.write(str(len(pngs)))


def export_coco(doc_type: str, pages_dir: str, out_prefix: str):
    import glob
    import json
    import fsspec
    preds = [json.load(open(p)) for p in glob.glob(f"{pages_dir}/pred/{doc_type}/*.json")]
    with open("/tmp/coco.json", "w") as f:
        json.dump({"annotations": preds}, f)
    fs = fsspec.filesystem("s3")
    fs.put("/tmp/coco.json", f"{out_prefix}/{doc_type}/coco.json")


detect_op = create_component_from_func(detect_layout, base_image="ghcr.io/acme-docs/layout:3.0.1-cu121")
export_op = create_component_from_func(export_coco, base_image="ghcr.io/acme-docs/layout:3.0.1")


@dsl.pipeline(name="doc-layout-detect")
def doc_layout(
    pages_claim: str = "doclay-pages",
    pdf_src: str = "s3://acme-docs/inbox/2024-11/",
    publaynet_uri: str = "s3://acme-docs/publaynet/val-0000.tar",
    weights_uri: str = "s3://acme-docs-models/layoutlmv3/base/",
    out_prefix: str = "s3://acme-docs-derived/layout/2024-11",
):
    render = dsl.ContainerOp(
        name="render-pages",
        image="ghcr.io/acme-docs/poppler-aws:24.02",
        command=["sh", "-c"],
        arguments=["aws s3 sync \"$0\" /pages/pdf/ --exclude '*' --include '*.pdf' && render-pages /pages/pdf /pages/png", pdf_src],
    ).apply(onprem.mount_pvc(pages_claim, "pages", "/pages"))
    det = detect_op(publaynet_uri=publaynet_uri, weights_uri=weights_uri, pages_dir="/pages")
    det.apply(onprem.mount_pvc(pages_claim, "pages", "/pages")).after(render)
    det.set_retry(3)
    with dsl.ParallelFor(["invoice", "contract", "form"]) as dt:
        ex = export_op(doc_type=dt, pages_dir="/pages", out_prefix=out_prefix)
        ex.apply(onprem.mount_pvc(pages_claim, "pages", "/pages")).after(det)


if __name__ == "__main__":
    kfp.compiler.Compiler().compile(doc_layout, __file__.replace(".py", ".yaml"))
