# ruff: noqa
"""Batch structure prediction for a binder-design campaign (KFP v2).

Protein-design platform pipeline. The sequence databases live in S3 and are
registered once with dsl.importer; each target (id + FASTA URI) in the campaign list gets
an MSA search, a template search, an AlphaFold-multimer fold (weights from a
shared read-only PVC) and an Amber relax. A report step gathers every
relaxed structure and uploads a campaign summary; an exit task posts to the
team channel whatever happens.

Compile: python kfp2_b49_binder_fold.py  -> kfp2_b49_binder_fold.yaml
"""
import os
from typing import List

from kfp import compiler, dsl, kubernetes
from kfp.dsl import Artifact, Dataset, Input, Output

FOLD_IMAGE = 'ghcr.io/acme-bio/alphafold-multimer:2.3.2-cuda12'
TOOLS_IMAGE = 'ghcr.io/acme-bio/hhsuite-jackhmmer:3.3.0'


@dsl.component(base_image=TOOLS_IMAGE)
def msa_search(fasta_uri: str, uniref: Input[Dataset], msa: Output[Dataset]):
    import subprocess

    subprocess.run(['aws', 's3', 'cp', fasta_uri, '/tmp/query.fasta'], check=True)
    subprocess.run(['jackhmmer', '-o', '/dev/null', '-A', msa.path, '--cpu', '16', '-N', '1',
                    '/tmp/query.fasta', uniref.path + '/uniref90.fasta'], check=True)


@dsl.component(base_image=TOOLS_IMAGE)
def template_search(msa: Input[Dataset], pdb_mmcif: Input[Dataset], templates: Output[Dataset]):
    import subprocess

    # hhsearch against the seqres index; mmCIF files are opened straight from the bucket
    # (mounted with mountpoint-s3 at the same prefix), so only the URI is passed on.
    subprocess.run(['python', '-m', 'af_templates', '--msa', msa.path, '--mmcif-uri', pdb_mmcif.uri,
                    '--out', templates.path], check=True)


@dsl.component(base_image=FOLD_IMAGE)
def fold_multimer(msa: Input[Dataset], templates: Input[Dataset], target_id: str, structure: Output[Artifact]):
    import subprocess

    subprocess.run(['python', '/app/alphafold/run_alphafold.py', '--model_preset=multimer',
                    '--data_dir=/params', '--precomputed_msa', msa.path, '--templates', templates.path,
                    '--target', target_id, '--output_dir', structure.path], check=True)


@dsl.component(base_image=FOLD_IMAGE)
def amber_relax(structure: Input[Artifact], relaxed: Output[Artifact]):
    import subprocess

    subprocess.run(['python', '-m', 'alphafold.relax', '--in', structure.path, '--out', relaxed.path], check=True)


@dsl.component(base_image='ghcr.io/acme-bio/campaign-tools:1.9.0')
def campaign_report(relaxed: Input[List[Artifact]], campaign: str, report_prefix: str):
    import subprocess

    paths = [r.path for r in relaxed]
    subprocess.run(['python', '-m', 'campaign_report', '--structures', *paths,
                    '--upload', f'{report_prefix}/{campaign}/summary.html'], check=True)


@dsl.container_component
def notify(campaign: str):
    return dsl.ContainerSpec(image='curlimages/curl:8.7.1', command=['sh', '-c'],
                             args=['curl -s -X POST -d "fold campaign $0 finished" https://chat.acme-bio.internal/hooks/design',
                                   campaign])


@dsl.pipeline(name='binder-campaign-fold')
def binder_fold(
    campaign: str = 'il23r-binders-r3',
    targets: list = [
        {'id': 'IL23R_B0412', 'fasta': 's3://acme-design-campaigns/il23r-binders-r3/fasta/IL23R_B0412.fasta'},
        {'id': 'IL23R_B0977', 'fasta': 's3://acme-design-campaigns/il23r-binders-r3/fasta/IL23R_B0977.fasta'},
        {'id': 'IL23R_B1310', 'fasta': 's3://acme-design-campaigns/il23r-binders-r3/fasta/IL23R_B1310.fasta'},
    ],
    params_pvc: str = 'alphafold-params-2022-12',
):
    bye = notify(campaign=campaign)
    with dsl.ExitHandler(bye, name='fold-campaign'):
        uniref = dsl.importer(artifact_uri='s3://acme-seqdb/uniref90/2024_03/', artifact_class=Dataset,
                              reimport=False)
        pdb = dsl.importer(artifact_uri='s3://acme-seqdb/pdb_mmcif/2024-06-01/mmcif_files/',
                           artifact_class=Dataset, reimport=False)
        with dsl.ParallelFor(targets, parallelism=2) as target:
            msa = msa_search(fasta_uri=target.fasta, uniref=uniref.output)
            tmpl = template_search(msa=msa.outputs['msa'], pdb_mmcif=pdb.output)
            fold = fold_multimer(msa=msa.outputs['msa'], templates=tmpl.outputs['templates'], target_id=target.id)
            fold.set_accelerator_type('nvidia.com/gpu').set_accelerator_limit(1)
            kubernetes.mount_pvc(fold, pvc_name=params_pvc, mount_path='/params')
            relax = amber_relax(structure=fold.outputs['structure'])
        campaign_report(relaxed=dsl.Collected(relax.outputs['relaxed']), campaign=campaign,
                        report_prefix='s3://acme-design-results/fold-campaigns')


if __name__ == '__main__':
    compiler.Compiler().compile(binder_fold, os.path.splitext(__file__)[0] + '.yaml')
