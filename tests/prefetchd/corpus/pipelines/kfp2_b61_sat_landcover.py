# ruff: noqa
"""Sentinel-2 land-cover segmentation (U-Net) for a few regions (KFP v2 + kfp-kubernetes).

Scenes and labels live in S3 (pipeline parameters with defaults); a list of
regions (pipeline parameter) is tiled in parallel onto an existing shared PVC;
the country boundaries come from Natural Earth over plain https; training and
evaluation read the tiles from the PVC; export + publish only when the mIoU
clears the gate.

Compile: python kfp2_b61_sat_landcover.py  -> kfp2_b61_sat_landcover.yaml
"""
import os
from typing import List

from kfp import compiler, dsl, kubernetes
from kfp.dsl import Dataset, Input, Model, Output

IMAGE = 'ghcr.io/acme/eo-landcover:1.7.0'
TILE_PVC = 'eo-tiles-cache'
BOUNDARIES_URL = 'https://naciscdn.org/naturalearth/10m/cultural/ne_10m_admin_0_countries.zip'
MODEL_DEST = 's3://acme-models/eo/landcover-unet/model.onnx'


@dsl.component(base_image=IMAGE)
def validate_scenes(scenes_uri: str, max_cloud: float) -> int:
    import subprocess
    out = subprocess.run(['python', '-m', 'eo.validate', '--scenes', scenes_uri, '--max-cloud', str(max_cloud)],
                         check=True, capture_output=True, text=True)
    return int(out.stdout.strip())


@dsl.component(base_image=IMAGE)
def fetch_boundaries(url: str, boundaries: Output[Dataset]):
    import urllib.request
    urllib.request.urlretrieve(url, boundaries.path)


@dsl.component(base_image=IMAGE)
def tile_region(region_uri: str, region: str, boundaries: Input[Dataset], tiles_root: str) -> int:
    import subprocess
    out = subprocess.run(['python', '-m', 'eo.tile', '--scenes', region_uri, '--region', region,
                          '--boundaries', boundaries.path, '--size', '256', '--out', f'{tiles_root}/{region}'],
                         check=True, capture_output=True, text=True)
    return int(out.stdout.strip())


@dsl.component(base_image=IMAGE)
def class_weights(labels_uri: str) -> str:
    import subprocess
    out = subprocess.run(['python', '-m', 'eo.class_weights', '--labels', labels_uri],
                         check=True, capture_output=True, text=True)
    return out.stdout.strip()


@dsl.component(base_image=IMAGE)
def train_unet(tiles_root: str, labels_uri: str, weights: str, tile_counts: List[int], model: Output[Model]):
    import subprocess
    print('tiles per region:', tile_counts)
    subprocess.run(['python', '-m', 'eo.train', '--tiles', tiles_root, '--labels', labels_uri,
                    '--class-weights', weights, '--arch', 'unet-resnet34', '--out', model.path], check=True)


@dsl.component(base_image=IMAGE)
def evaluate_miou(model: Input[Model], tiles_root: str, labels_uri: str) -> float:
    import subprocess
    out = subprocess.run(['python', '-m', 'eo.evaluate', '--model', model.path, '--tiles', tiles_root,
                          '--split', 'holdout', '--labels', labels_uri],
                         check=True, capture_output=True, text=True)
    return float(out.stdout.strip())


@dsl.component(base_image=IMAGE)
def export_onnx(model: Input[Model], onnx_model: Output[Model]):
    import subprocess
    subprocess.run(['python', '-m', 'eo.export', '--model', model.path, '--out', onnx_model.path], check=True)


@dsl.container_component
def publish_model(onnx_model: Input[Model], dest: str):
    return dsl.ContainerSpec(image='amazon/aws-cli:2.15.30', command=['aws', 's3', 'cp'],
                             args=[onnx_model.path, dest])


@dsl.pipeline(name='sentinel2-landcover-unet')
def landcover_pipeline(scenes_uri: str = 's3://acme-eo/sentinel2/l2a/2024-summer/',
                       labels_uri: str = 's3://acme-eo/labels/esa-worldcover-2021/',
                       regions: list = ['alps', 'po-valley', 'sicily'],
                       min_miou: float = 0.55):
    val = validate_scenes(scenes_uri=scenes_uri, max_cloud=0.2)
    bnd = fetch_boundaries(url=BOUNDARIES_URL)

    with dsl.ParallelFor(regions) as region:
        tile = tile_region(region_uri=f'{scenes_uri}{region}/', region=region,
                           boundaries=bnd.outputs['boundaries'], tiles_root='/tiles').after(val)
        kubernetes.mount_pvc(tile, pvc_name=TILE_PVC, mount_path='/tiles', sub_path='landcover')

    cw = class_weights(labels_uri=labels_uri)

    tr = train_unet(tiles_root='/tiles', labels_uri=labels_uri, weights=cw.output,
                    tile_counts=dsl.Collected(tile.output))
    tr.set_accelerator_type('nvidia.com/gpu').set_accelerator_limit(1)
    kubernetes.mount_pvc(tr, pvc_name=TILE_PVC, mount_path='/tiles', sub_path='landcover')

    ev = evaluate_miou(model=tr.outputs['model'], tiles_root='/tiles', labels_uri=labels_uri)
    kubernetes.mount_pvc(ev, pvc_name=TILE_PVC, mount_path='/tiles', sub_path='landcover')

    with dsl.If(ev.output >= min_miou):
        onnx = export_onnx(model=tr.outputs['model'])
        publish_model(onnx_model=onnx.outputs['onnx_model'], dest=MODEL_DEST)


if __name__ == '__main__':
    compiler.Compiler().compile(landcover_pipeline, os.path.splitext(__file__)[0] + '.yaml')
