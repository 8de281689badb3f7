# ruff: noqa
"""Kinase-panel docking with MD refinement of strong binders (KFP v1 SDK -> Argo).

The in-stock Mcule library is globbed and read with s3fs and standardised
with RDKit; the OpenFF force field is synced from S3 once; per target of a
JSON-list pipeline parameter (receptor URIs in the items) pockets are
detected and the library docked on a GPU with retries; targets whose best
score beats the cutoff get a short OpenMM refinement uploaded with boto3;
a summary joins the results with BindingDB affinities; an exit handler posts
to Slack.

Compile (kfp 1.8.x): python kfp1_b36_kinase_docking.py  -> kfp1_b36_kinase_docking.yaml
"""
# ruff: noqa
import json
import os

import kfp
from kfp import dsl
from kfp.aws import use_aws_secret
from kfp.components import InputPath, OutputPath, func_to_container_op
from kubernetes.client.models import V1EnvVar, V1EnvVarSource, V1SecretKeySelector

TARGETS = [
    {'target': 'abl1', 'pdb': 's3://dd-structures/pdb/2hyy/receptor.pdbqt'},
    {'target': 'egfr', 'pdb': 's3://dd-structures/pdb/1m17/receptor.pdbqt'},
    {'target': 'cdk2', 'pdb': 's3://dd-structures/pdb/1hck/receptor.pdbqt'},
]
VINA = 'ghcr.io/example/vina-gpu:1.2.5'
CHEM = 'ghcr.io/example/chem-tools:2024.06'


def prepare_ligands(library_glob: str, max_mw: float, ligands_path: OutputPath('SDF')):
    import gzip

    import s3fs
    from rdkit import Chem
    from rdkit.Chem import Descriptors
    from rdkit.Chem.MolStandardize import rdMolStandardize

    fs = s3fs.S3FileSystem()
    writer = Chem.SDWriter(ligands_path)
    for key in sorted(fs.glob(library_glob)):
        with fs.open(key, 'rb') as raw, gzip.open(raw) as gz:
            for mol in Chem.ForwardSDMolSupplier(gz):
                if mol is None or Descriptors.MolWt(mol) > max_mw:
                    continue
                writer.write(rdMolStandardize.Cleanup(mol))
    writer.close()


def md_refine(target: str, poses_path: InputPath('SDF'), forcefield_path: InputPath(), results_prefix: str):
    import os

    import boto3
    from chem_tools.md import refine_top_poses

    out_dir = f'/tmp/md/{target}'
    refine_top_poses(poses_path, forcefield_dir=forcefield_path, n_poses=20, ns=2.0, out_dir=out_dir)
    bucket, prefix = results_prefix[len('s3://'):].split('/', 1)
    s3 = boto3.client('s3')
    for name in os.listdir(out_dir):
        s3.upload_file(os.path.join(out_dir, name), bucket, f'{prefix}{target}/{name}')


def summarize(affinities_uri: str, results_prefix: str) -> str:
    import pandas as pd

    known = pd.read_csv(affinities_uri, sep='\t', usecols=['Ligand SMILES', 'Target Name', 'Ki (nM)'])
    print(f'{len(known)} BindingDB affinities; MD results under {results_prefix}')
    return f'{len(known)} reference affinities'


ligands_op = func_to_container_op(prepare_ligands, base_image=CHEM,
                                  packages_to_install=['s3fs==2024.6.0'])
md_op = func_to_container_op(md_refine, base_image='ghcr.io/example/openmm:8.1.1-cuda12',
                             packages_to_install=['boto3==1.34.131'])
summarize_op = func_to_container_op(summarize, base_image='python:3.11-slim',
                                    packages_to_install=['pandas==2.2.2', 's3fs==2024.6.0'])


@dsl.pipeline(name='kinase-panel-docking')
def kinase_docking(targets: str = json.dumps(TARGETS),
                   library_glob: str = 's3://chem-vendors/mcule/in-stock/2024-06/*.sdf.gz',
                   score_cutoff: float = -9.5):
    notify = dsl.ContainerOp(
        name='notify-slack', image='curlimages/curl:8.8.0',
        command=['sh', '-c'],
        arguments=['curl -sf -X POST -H "Content-Type: application/json" '
                   '-d "{\\"text\\": \\"kinase-panel-docking {{workflow.name}}: {{workflow.status}}\\"}" "$SLACK_WEBHOOK"'],
    )
    notify.container.add_env_variable(V1EnvVar(
        name='SLACK_WEBHOOK',
        value_from=V1EnvVarSource(secret_key_ref=V1SecretKeySelector(name='slack-webhook', key='url'))))
    with dsl.ExitHandler(notify):
        lig = ligands_op(library_glob=library_glob, max_mw=550.0)
        lig.apply(use_aws_secret('aws-chem', 'AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY', 'eu-west-1'))

        ff = dsl.ContainerOp(
            name='fetch-forcefield', image='amazon/aws-cli:2.15.30',
            command=['aws', 's3', 'sync', '--only-show-errors'],
            arguments=['s3://dd-forcefields/openff-2.1.0/', '/ff'],
            file_outputs={'forcefield': '/ff'},
        ).apply(use_aws_secret('aws-chem', 'AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY', 'eu-west-1'))

        with dsl.ParallelFor(targets, parallelism=2) as t:
            pocket = dsl.ContainerOp(
                name='detect-pocket', image=CHEM,
                command=['python', '-m', 'chem_tools.fpocket'],
                arguments=['--receptor', t.pdb, '--out', '/tmp/pocket.json'],
                file_outputs={'box': '/tmp/pocket.json'},
            ).apply(use_aws_secret('aws-chem', 'AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY', 'eu-west-1'))
            dock = dsl.ContainerOp(
                name='dock', image=VINA,
                command=['vina-gpu-dock'],
                arguments=['--receptor', t.pdb,
                           '--ligands', dsl.InputArgumentPath(lig.outputs['ligands']),
                           '--box', dsl.InputArgumentPath(pocket.outputs['box']),
                           '--exhaustiveness', '32', '--out', '/out/poses.sdf', '--best', '/out/best.txt'],
                file_outputs={'poses': '/out/poses.sdf', 'best': '/out/best.txt'},
            ).apply(use_aws_secret('aws-chem', 'AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY', 'eu-west-1'))
            dock.set_gpu_limit(1).set_retry(2)
            with dsl.Condition(dock.outputs['best'] < score_cutoff):
                md = md_op(target=t.target, poses=dock.outputs['poses'], forcefield=ff.outputs['forcefield'],
                           results_prefix='s3://dd-results/kinase-panel/md/')
                md.set_gpu_limit(1)
                md.apply(use_aws_secret('aws-chem', 'AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY', 'eu-west-1'))

        summary = summarize_op(affinities_uri='s3://dd-benchmarks/bindingdb/2024m5/kinases.tsv.gz',
                               results_prefix='s3://dd-results/kinase-panel/md/').after(md)
        summary.apply(use_aws_secret('aws-chem', 'AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY', 'eu-west-1'))


if __name__ == '__main__':
    kfp.compiler.Compiler().compile(kinase_docking, os.path.splitext(__file__)[0] + '.yaml')
