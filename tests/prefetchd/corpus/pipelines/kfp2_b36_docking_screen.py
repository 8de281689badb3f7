# ruff: noqa
"""GPU virtual screen of an Enamine REAL slice against one DUD-E target (KFP v2 + kfp-kubernetes).

The receptor comes in through an importer with metadata; grid maps are built
onto an existing PVC whose name is a pipeline parameter; known actives are
listed with a boto3 paginator and downloaded; each library shard is read with
smart_open, PAINS-filtered and, when anything survives, docked on a GPU with
retries (dsl.Condition inside dsl.ParallelFor); poses are collected and
rescored against DUD-E decoys loaded with datasets.load_dataset('parquet');
an enriched screen exports its hits with s3fs.

Compile: python kfp2_b36_docking_screen.py  -> kfp2_b36_docking_screen.yaml
"""
# ruff: noqa
import os
from typing import List

from kfp import compiler, dsl, kubernetes

DOCK_IMAGE = 'ghcr.io/example/unidock:1.1.2'
CHEM_IMAGE = 'ghcr.io/example/chem-tools:2024.06'
SHARDS = ['000', '001', '002', '003']


@dsl.component(base_image='python:3.11-slim', packages_to_install=['boto3==1.34.131'])
def fetch_actives(actives_prefix: str, actives: dsl.Output[dsl.Dataset]):
    import os

    import boto3

    bucket, prefix = actives_prefix[len('s3://'):].split('/', 1)
    s3 = boto3.client('s3')
    os.makedirs(actives.path, exist_ok=True)
    n = 0
    for page in s3.get_paginator('list_objects_v2').paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get('Contents', []):
            if obj['Key'].endswith('.sdf'):
                s3.download_file(bucket, obj['Key'], os.path.join(actives.path, os.path.basename(obj['Key'])))
                n += 1
    actives.metadata['n_actives'] = n


@dsl.component(base_image=CHEM_IMAGE)
def prepare_receptor(receptor: dsl.Input[dsl.Artifact], target: str, grid_root: str,
                     grid_config: dsl.Output[dsl.Artifact]):
    import json
    import os
    import subprocess

    pdb_id = receptor.metadata.get('pdb_id', 'unknown')
    out = os.path.join(grid_root, target, pdb_id)
    os.makedirs(out, exist_ok=True)
    subprocess.run(['python', '-m', 'chem_tools.grid', '--receptor', receptor.path, '--out', out,
                    '--spacing', '0.375'], check=True)
    with open(grid_config.path, 'w') as f:
        json.dump({'grid_dir': out, 'pdb_id': pdb_id, 'chain': receptor.metadata.get('chain')}, f)


@dsl.component(base_image=CHEM_IMAGE, packages_to_install=['smart_open[s3]==7.0.4'])
def filter_shard(library_uri: str, shard: str, ligands: dsl.Output[dsl.Dataset]) -> int:
    from chem_tools.filters import passes_pains
    from smart_open import open as sopen

    kept = 0
    with sopen(f'{library_uri}shard-{shard}.smi.gz', 'rt') as src, open(ligands.path, 'w') as dst:
        for line in src:
            smiles, zid = line.split()[:2]
            if passes_pains(smiles):
                dst.write(f'{smiles} {zid}\n')
                kept += 1
    ligands.metadata['shard'] = shard
    ligands.metadata['kept'] = kept
    return kept


@dsl.component(base_image=DOCK_IMAGE)
def dock_shard(ligands: dsl.Input[dsl.Dataset], grid_config: dsl.Input[dsl.Artifact], exhaustiveness: int,
               poses: dsl.Output[dsl.Dataset]):
    import json
    import subprocess

    with open(grid_config.path) as f:
        cfg = json.load(f)
    subprocess.run(['unidock', '--grid_dir', cfg['grid_dir'], '--ligand_index', ligands.path,
                    '--exhaustiveness', str(exhaustiveness), '--search_mode', 'balance',
                    '--out_parquet', poses.path], check=True)
    poses.metadata['shard'] = ligands.metadata.get('shard')
    poses.metadata['source_uri'] = ligands.uri


@dsl.component(base_image=CHEM_IMAGE, packages_to_install=['pyarrow==16.1.0', 's3fs==2024.6.0'])
def aggregate_hits(poses: dsl.Input[List[dsl.Dataset]], top_k: int, hits: dsl.Output[dsl.Dataset]):
    import pyarrow.compute as pc
    import pyarrow.dataset as pads
    import pyarrow.parquet as pq

    table = pads.dataset([p.uri for p in poses], format='parquet').to_table()
    order = pc.sort_indices(table, sort_keys=[('score', 'ascending')])
    best = table.take(order[:top_k])
    pq.write_table(best, hits.path)
    hits.metadata['n_hits'] = best.num_rows
    hits.metadata['n_shards'] = len(poses)


@dsl.component(base_image=CHEM_IMAGE, packages_to_install=['datasets==2.20.0', 's3fs==2024.6.0'])
def rescore(hits: dsl.Input[dsl.Dataset], actives: dsl.Input[dsl.Dataset], decoy_files: str,
            metrics: dsl.Output[dsl.Metrics]) -> float:
    from chem_tools.enrichment import enrichment_factor
    from datasets import load_dataset

    decoys = load_dataset('parquet', data_files=decoy_files, split='train')
    ef1 = enrichment_factor(hits.path, actives.path, decoys, fraction=0.01)
    metrics.log_metric('ef1', ef1)
    return ef1


@dsl.component(base_image=CHEM_IMAGE, packages_to_install=['s3fs==2024.6.0', 'pyarrow==16.1.0'])
def export_hits(hits: dsl.Input[dsl.Dataset], dest: str):
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq
    import s3fs

    fs = s3fs.S3FileSystem()
    with fs.open(dest, 'wb') as f:
        pacsv.write_csv(pq.read_table(hits.path), f)


@dsl.pipeline(name='dude-virtual-screen')
def docking_screen(target: str = 'egfr',
                   library_uri: str = 's3://chem-libs/enamine-real/2024q2/',
                   structures_pvc: str = 'receptor-grids',
                   campaign: str = 'egfr-2024q2',
                   top_k: int = 500):
    receptor = dsl.importer(artifact_uri='s3://dd-structures/pdb/2ity/receptor.pdbqt',
                            artifact_class=dsl.Artifact, reimport=True,
                            metadata={'pdb_id': '2ITY', 'chain': 'A', 'protonated_ph': 7.4})
    actives = fetch_actives(actives_prefix=f's3://dd-benchmarks/dude/{target}/actives/')
    prep = prepare_receptor(receptor=receptor.output, target=target, grid_root='/grids')
    kubernetes.mount_pvc(prep, pvc_name=structures_pvc, mount_path='/grids', sub_path='dude')

    with dsl.ParallelFor(SHARDS, parallelism=4) as shard:
        flt = filter_shard(library_uri=library_uri, shard=shard)
        with dsl.Condition(flt.outputs['Output'] > 0):
            dock = dock_shard(ligands=flt.outputs['ligands'], grid_config=prep.outputs['grid_config'],
                              exhaustiveness=16)
            dock.set_accelerator_type('nvidia.com/gpu').set_accelerator_limit(1)
            dock.set_retry(2, backoff_duration='30s')
            kubernetes.mount_pvc(dock, pvc_name=structures_pvc, mount_path='/grids', sub_path='dude')

    agg = aggregate_hits(poses=dsl.Collected(dock.outputs['poses']), top_k=top_k)
    rs = rescore(hits=agg.outputs['hits'], actives=actives.outputs['actives'],
                 decoy_files=f's3://dd-benchmarks/dude/{target}/decoys/*.parquet')
    with dsl.Condition(rs.outputs['Output'] >= 10.0):
        export_hits(hits=agg.outputs['hits'], dest=f's3://dd-results/campaigns/{campaign}/hits.csv')


if __name__ == '__main__':
    compiler.Compiler().compile(docking_screen, os.path.splitext(__file__)[0] + '.yaml')
