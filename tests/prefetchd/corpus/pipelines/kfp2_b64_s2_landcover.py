"""Sentinel-2 land-cover segmentation with a scratch PVC, an existing archive PVC and a gated model registration (KFP v2).

How the datasets are named here:
- query-stac reads a Hive-partitioned STAC index (collection=.../year=2024/month=06/) with pyarrow.
- download-scene loops over static scene dicts whose COG URL is an https URL of S3, one
  path-style (https://s3.us-west-2.amazonaws.com/sentinel-cogs/...) and one virtual-hosted
  (https://sentinel-cogs.s3.us-west-2.amazonaws.com/...); it writes to the scratch PVC under
  /scratch/<region>/<tile>.
- fetch-labels reads an existing PVC (name from a parameter) at a path joined from three
  parameters, and a class map object from a Ceph RGW endpoint (S3_ENDPOINT env) with bucket and
  key passed as two parameters (the key has spaces).
- the importer registers pretrained weights under a key with `=`; train-segmenter reads them.
- evaluate reads a glob of validation tiles (s3://.../val/*.tif); register-model (under dsl.If)
  uploads the model to S3 (a write).

Compile: python kfp2_b64_s2_landcover.py  -> kfp2_b64_s2_landcover.yaml
"""
# ruff: noqa
import os

from kfp import compiler, dsl, kubernetes
from kfp.dsl import Dataset, Input, Model, Output

GEO = 'ghcr.io/example/eo-seg:1.4.2'

SCENES = [
    {'tile': '10TEK',
     'cog_url': 'https://s3.us-west-2.amazonaws.com/sentinel-cogs/sentinel-s2-l2a-cogs/10/T/EK/2024/6/S2A_10TEK_20240615_0_L2A/TCI.tif'},
    {'tile': '10TFK',
     'cog_url': 'https://sentinel-cogs.s3.us-west-2.amazonaws.com/sentinel-s2-l2a-cogs/10/T/FK/2024/6/S2B_10TFK_20240618_0_L2A/TCI.tif'},
]


@dsl.component(base_image=GEO)
def query_stac(stac_index_uri: str, max_cloud: float, scenes: Output[Dataset]):
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq
    d = ds.dataset(stac_index_uri, format='parquet', partitioning='hive')
    t = d.to_table(filter=ds.field('eo_cloud_cover') < max_cloud, columns=['id', 'tile', 'datetime'])
    pq.write_table(t, scenes.path)


@dsl.component(base_image=GEO)
def download_scene(tile: str, cog_url: str, region: str):
    import os
    import urllib.request
    dst = os.path.join('/scratch', region, tile)
    os.makedirs(dst, exist_ok=True)
    urllib.request.urlretrieve(cog_url, os.path.join(dst, 'TCI.tif'))


@dsl.component(base_image=GEO)
def chip_tiles(scenes: Input[Dataset], region: str, chip_size: int):
    import subprocess
    subprocess.run(['python', '-m', 'eo.chip', '--scenes', scenes.path, '--in', f'/scratch/{region}',
                    '--out', f'/scratch/{region}/chips', '--size', str(chip_size)], check=True)


@dsl.component(base_image=GEO)
def fetch_labels(labels_set: str, region: str, year: str, classmap_bucket: str, classmap_key: str):
    import os
    import shutil
    import boto3
    src = os.path.join('/archive', labels_set, region, year)
    dst = os.path.join('/scratch', region, 'labels')
    shutil.copytree(src, dst, dirs_exist_ok=True)
    s3 = boto3.client('s3', endpoint_url=os.environ['S3_ENDPOINT'])
    s3.download_file(classmap_bucket, classmap_key, os.path.join(dst, 'classmap.json'))


@dsl.component(base_image=GEO)
def train_segmenter(weights: Input[Model], region: str, epochs: int, model: Output[Model]):
    import subprocess
    subprocess.run(['python', '-m', 'eo.train', '--init', weights.path, '--chips', f'/scratch/{region}/chips',
                    '--labels', f'/scratch/{region}/labels', '--epochs', str(epochs), '--out', model.path],
                   check=True)


@dsl.component(base_image=GEO)
def evaluate(model: Input[Model], val_glob: str) -> float:
    import subprocess
    out = subprocess.run(['python', '-m', 'eo.eval', '--model', model.path, '--tiles', val_glob],
                         check=True, capture_output=True, text=True)
    return float(out.stdout.strip().splitlines()[-1])


@dsl.container_component
def register_model(model: Input[Model], dest: str):
    return dsl.ContainerSpec(image='amazon/aws-cli:2.15.30', command=['aws', 's3', 'cp'],
                             args=[model.path, dest])


@dsl.pipeline(name='s2-landcover-segmentation')
def s2_pipeline(
        stac_index_uri: str = 's3://eo-index/stac/collection=sentinel-2-l2a/year=2024/month=06/',
        region: str = 'cascadia',
        archive_pvc: str = 'eo-archive',
        labels_set: str = 'worldcover',
        labels_year: str = '2021',
        classmap_bucket: str = 'eo-labels',
        classmap_key: str = 'classmaps/ESA WorldCover v200.json',
        weights_uri: str = 's3://eo-models/prithvi-100m/version=2.0/Prithvi_100M.pt',
        val_glob: str = 's3://eo-benchmarks/landcover/val/*.tif'):
    pvc = kubernetes.CreatePVC(pvc_name_suffix='-s2-scratch', access_modes=['ReadWriteOnce'],
                               size='200Gi', storage_class_name='standard')
    q = query_stac(stac_index_uri=stac_index_uri, max_cloud=20.0)
    with dsl.ParallelFor(SCENES) as sc:
        dl = download_scene(tile=sc.tile, cog_url=sc.cog_url, region=region)
        kubernetes.mount_pvc(dl, pvc_name=pvc.outputs['name'], mount_path='/scratch')
    ch = chip_tiles(scenes=q.outputs['scenes'], region=region, chip_size=256).after(dl)
    kubernetes.mount_pvc(ch, pvc_name=pvc.outputs['name'], mount_path='/scratch')
    lb = fetch_labels(labels_set=labels_set, region=region, year=labels_year,
                      classmap_bucket=classmap_bucket, classmap_key=classmap_key)
    lb.set_env_variable('S3_ENDPOINT', 'https://rgw.eo.example.internal')
    kubernetes.mount_pvc(lb, pvc_name=pvc.outputs['name'], mount_path='/scratch')
    kubernetes.mount_pvc(lb, pvc_name=archive_pvc, mount_path='/archive', sub_path='landcover')
    imp = dsl.importer(artifact_uri=weights_uri, artifact_class=dsl.Model, reimport=False)
    tr = train_segmenter(weights=imp.output, region=region, epochs=25).after(ch, lb)
    kubernetes.mount_pvc(tr, pvc_name=pvc.outputs['name'], mount_path='/scratch')
    ev = evaluate(model=tr.outputs['model'], val_glob=val_glob)
    kubernetes.DeletePVC(pvc_name=pvc.outputs['name']).after(ev)
    with dsl.If(ev.output > 0.6):
        register_model(model=tr.outputs['model'],
                       dest='s3://eo-models/landcover/candidates/s2-cascadia/model.pt')

if __name__ == '__main__':
    compiler.Compiler().compile(s2_pipeline, os.path.splitext(__file__)[0] + '.yaml')
