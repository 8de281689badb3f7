# ruff: noqa
"""Structure-based virtual screen against two kinase targets (KFP v2).

A sub-pipeline prepares a ligand library (fetch the SMILES file from S3 with
a component loaded from YAML text, then standardise it with RDKit against a
structural-alert table); it is called twice, for the actives and for the
DUD-E decoys, with different arguments. Docking fans out over a list of
target dicts (receptor grid per target), the poses are collected and ranked
against known actives, and the hits are published.

Compile: python kfp2_b53_docking_screen.py  -> kfp2_b53_docking_screen.yaml
"""
import os
from typing import List

from kfp import compiler, components, dsl, kubernetes
from kfp.dsl import Dataset, Input, Output

RDKIT = 'ghcr.io/drugdisc/rdkit-tools:2024.09.3'

fetch_smiles = components.load_component_from_text('''
name: Fetch SMILES
description: Copy one SMILES file from object storage.
inputs:
- {name: smiles_uri, type: String, description: s3:// URI of a .smi file}
outputs:
- {name: smiles, type: Dataset}
implementation:
  container:
    image: amazon/aws-cli:2.17.0
    command: [aws, s3, cp, --only-show-errors, {inputValue: smiles_uri}, {outputPath: smiles}]
''')


@dsl.component(base_image=RDKIT)
def standardize_smiles(smiles: Input[Dataset], ph: float, max_mw: float, alerts_uri: str,
                       prepared: Output[Dataset]):
    import pandas as pd
    import s3fs
    from rdkit import Chem
    from rdkit.Chem import Descriptors
    fs = s3fs.S3FileSystem()
    with fs.open(alerts_uri, 'rb') as f:
        alerts = [Chem.MolFromSmarts(s) for s in pd.read_csv(f)['smarts']]
    keep = []
    with open(smiles.path) as f:
        for line in f:
            mol = Chem.MolFromSmiles(line.split()[0])
            if mol is None or Descriptors.MolWt(mol) > max_mw:
                continue
            if any(mol.HasSubstructMatch(a) for a in alerts):
                continue
            keep.append(Chem.MolToSmiles(mol))
    with open(prepared.path, 'w') as f:
        f.write('\n'.join(keep))
    print('protonation pH', ph, 'kept', len(keep))


@dsl.pipeline(name='prepare-ligand-library')
def prepare_library(smiles_uri: str, ph: float = 7.4, max_mw: float = 550.0,
                    alerts_uri: str = 's3://drugdisc-reference/alerts/pains_brenk_v3.csv') -> Dataset:
    fetched = fetch_smiles(smiles_uri=smiles_uri)
    std = standardize_smiles(smiles=fetched.outputs['smiles'], ph=ph, max_mw=max_mw, alerts_uri=alerts_uri)
    return std.outputs['prepared']


@dsl.component(base_image=RDKIT)
def merge_libraries(actives: Input[Dataset], decoys: Input[Dataset], library: Output[Dataset]):
    with open(library.path, 'w') as out:
        for tag, ds in (('active', actives), ('decoy', decoys)):
            with open(ds.path) as f:
                for line in f:
                    out.write(f'{line.strip()}\t{tag}\n')


@dsl.component(base_image='ghcr.io/drugdisc/gnina:1.1-cuda12.2')
def dock_ligands(library: Input[Dataset], target: str, grid_uri: str, exhaustiveness: int,
                 poses: Output[Dataset]):
    import subprocess
    subprocess.run(['aws', 's3', 'sync', '--only-show-errors', grid_uri, '/tmp/grid'], check=True)
    subprocess.run(['gnina', '-r', '/tmp/grid/receptor.pdbqt', '--autobox_ligand', '/tmp/grid/ligand.pdbqt',
                    '-l', library.path, '--exhaustiveness', str(exhaustiveness), '-o', poses.path], check=True)
    print('docked against', target)


@dsl.component(base_image=RDKIT)
def rank_hits(poses: Input[List[Dataset]], known_actives_uri: str, top_n: int, ranked: Output[Dataset]):
    import boto3
    bucket, _, key = known_actives_uri[len('s3://'):].partition('/')
    boto3.client('s3').download_file(bucket, key, '/tmp/known_actives.csv')
    rows = []
    for p in poses:
        with open(p.path) as f:
            rows.extend(f.readlines())
    with open(ranked.path, 'w') as f:
        f.writelines(rows[:top_n])


@dsl.container_component
def publish_hits(ranked: Input[Dataset], dest_uri: str):
    return dsl.ContainerSpec(image='amazon/aws-cli:2.17.0', command=['aws', 's3', 'cp', '--only-show-errors'],
                             args=[ranked.path, dest_uri])


@dsl.pipeline(name='kinase-docking-screen')
def docking_screen(
        actives_uri: str = 's3://drugdisc-libs/enamine-real/2024q3/kinase_focused.smi',
        decoys_uri: str = 's3://drugdisc-libs/dude-decoys/kinases/decoys_final.smi',
        targets: list = [
            {'kinase': 'egfr', 'grid': 's3://drugdisc-structures/grids/egfr_1m17/'},
            {'kinase': 'braf', 'grid': 's3://drugdisc-structures/grids/braf_4mne/'},
        ],
        reference_root: str = 's3://drugdisc-reference',
        results_root: str = 's3://drugdisc-results/screens',
        screen_id: str = 'kinase-2024-11',
        exhaustiveness: int = 16):
    actives = prepare_library(smiles_uri=actives_uri)
    decoys = prepare_library(smiles_uri=decoys_uri, ph=7.0, max_mw=600.0)
    merged = merge_libraries(actives=actives.output, decoys=decoys.output)
    with dsl.ParallelFor(targets, parallelism=2) as t:
        dock = dock_ligands(library=merged.outputs['library'], target=t.kinase, grid_uri=t.grid,
                            exhaustiveness=exhaustiveness)
        dock.set_retry(num_retries=2, backoff_duration='60s', backoff_factor=2.0)
        dock.set_accelerator_type('nvidia.com/gpu').set_accelerator_limit(1)
        kubernetes.add_node_selector(dock, label_key='cloud.google.com/gke-accelerator', label_value='nvidia-l4')
        kubernetes.add_toleration(dock, key='nvidia.com/gpu', operator='Exists', effect='NoSchedule')
    ranked = rank_hits(poses=dsl.Collected(dock.outputs['poses']),
                       known_actives_uri=f'{reference_root}/chembl34/kinase_known_actives.csv', top_n=500)
    pub = publish_hits(ranked=ranked.outputs['ranked'], dest_uri=f'{results_root}/{screen_id}/top_hits.tsv')
    pub.set_caching_options(False)


if __name__ == '__main__':
    compiler.Compiler().compile(docking_screen, os.path.splitext(__file__)[0] + '.yaml')
