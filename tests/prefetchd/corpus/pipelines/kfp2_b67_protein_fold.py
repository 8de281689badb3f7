# ruff: noqa
"""Protein structure prediction for one CASP target (KFP v2 + kfp-kubernetes).

Data locations reach the containers only through the SDK's argument
machinery: a ConcatPlaceholder builds the MSA URI from a bucket and a prefix
parameter, IfPresentPlaceholder adds optional flags, a component loaded from
YAML text declares an optional template database and a defaulted mmCIF
mirror, an importer registers the model weights from a parameterised URI,
and the fold step gets a sequence-database URI from a constant env var.
A scratch PVC whose claim name is a pipeline parameter carries the MSAs.

Compile: python kfp2_b67_protein_fold.py  -> kfp2_b67_protein_fold.yaml
"""
import os
from typing import Optional

from kfp import compiler, components, dsl, kubernetes
from kfp.dsl import Artifact, Dataset, Input, Model, Output

FOLD_IMAGE = 'ghcr.io/example/openfold:2.1.0'


@dsl.container_component
def fetch_msa(bucket: str, prefix: str, target_id: str, region: Optional[str] = None):
    # aws s3 sync s3://<bucket>/<prefix> /scratch/<target>/msa [--region <region>]
    return dsl.ContainerSpec(
        image='amazon/aws-cli:2.15.30',
        command=['aws', 's3', 'sync'],
        args=[
            dsl.ConcatPlaceholder(['s3://', bucket, '/', prefix]),
            dsl.ConcatPlaceholder(['/scratch/', target_id, '/msa']),
            dsl.IfPresentPlaceholder(input_name='region', then=['--region', region]),
        ])


search_templates_op = components.load_component_from_text('''
name: Search templates
description: HHsearch of the MSA against a template database; hit structures are fetched from an mmCIF mirror.
inputs:
- {name: msa_dir, type: String}
- {name: template_db, type: String, optional: true}
- {name: mmcif_mirror, type: String, default: 's3://example-pdb/mmcif/'}
- {name: max_hits, type: Integer, default: '20'}
outputs:
- {name: hits, type: Dataset}
implementation:
  container:
    image: ghcr.io/example/hhsuite:3.3.0
    command: [python, -m, fold_tools.search_templates]
    args:
    - --msa-dir
    - {inputValue: msa_dir}
    - if:
        cond: {isPresent: template_db}
        then: [--template-db, {inputValue: template_db}]
    - --mmcif
    - {inputValue: mmcif_mirror}
    - --max-hits
    - {inputValue: max_hits}
    - --out
    - {outputPath: hits}
''')


@dsl.container_component
def fold(target_id: str, weights: Input[Model], hits: Input[Dataset], obsolete_hits: Input[Dataset],
         structure: Output[Artifact], relax: Optional[str] = None, num_recycles: int = 3):
    # The wrapper script passes $PDB_SEQRES_URI as --seqres; FOLD_PRESET (config map) is a preset name.
    return dsl.ContainerSpec(
        image=FOLD_IMAGE,
        command=['sh', '-c', 'exec python -m openfold.predict --seqres "$PDB_SEQRES_URI" --preset "$FOLD_PRESET" "$@"',
                 'predict'],
        args=[
            '--msa', dsl.ConcatPlaceholder(['/scratch/', target_id, '/msa']),
            '--params', weights.path,
            '--hits', hits.path,
            '--hits', obsolete_hits.path,
            '--recycles', num_recycles,
            dsl.IfPresentPlaceholder(input_name='relax', then=['--relax', relax]),
            '--out', structure.path,
        ])


@dsl.container_component
def publish(structure: Input[Artifact], bucket: str, target_id: str):
    # Uploads the predicted structure; nothing is read from object storage.
    return dsl.ContainerSpec(
        image='amazon/aws-cli:2.15.30',
        command=['aws', 's3', 'cp', '--recursive'],
        args=[structure.path, dsl.ConcatPlaceholder(['s3://', bucket, '/predictions/', target_id, '/'])])


@dsl.pipeline(name='casp-target-fold')
def fold_pipeline(
    target_id: str = 'T1104',
    msa_bucket: str = 'example-proteomics',
    msa_prefix: str = 'casp15/msa/T1104/',
    weights_uri: str = 's3://example-models/openfold/params_2022-12-06/',
    template_db_uri: str = 's3://example-pdb/hhsuite/pdb70_2024-03/',
    scratch_pvc: str = 'fold-scratch',
):
    weights = dsl.importer(artifact_uri=weights_uri, artifact_class=Model, reimport=False)

    msa = fetch_msa(bucket=msa_bucket, prefix=msa_prefix, target_id=target_id)
    kubernetes.mount_pvc(msa, pvc_name=scratch_pvc, mount_path='/scratch')
    kubernetes.use_secret_as_env(msa, secret_name='proteomics-s3',
                                 secret_key_to_env={'access_key': 'AWS_ACCESS_KEY_ID',
                                                    'secret_key': 'AWS_SECRET_ACCESS_KEY'})

    # current templates: template DB from a parameter, mmCIF mirror from the component default
    st = search_templates_op(msa_dir='/scratch/T1104/msa', template_db=template_db_uri)
    st.after(msa)
    kubernetes.mount_pvc(st, pvc_name=scratch_pvc, mount_path='/scratch')

    # obsolete entries: no template DB (the if/isPresent branch is dropped), other mirror
    st_obs = search_templates_op(msa_dir='/scratch/T1104/msa', mmcif_mirror='s3://example-pdb/mmcif-obsolete/',
                                 max_hits=5)
    st_obs.after(msa)
    kubernetes.mount_pvc(st_obs, pvc_name=scratch_pvc, mount_path='/scratch')

    fd = fold(target_id=target_id, weights=weights.output, hits=st.outputs['hits'],
              obsolete_hits=st_obs.outputs['hits'])
    fd.set_env_variable('PDB_SEQRES_URI', 's3://example-pdb/seqres/pdb_seqres_2024-03.txt')
    kubernetes.use_config_map_as_env(fd, config_map_name='fold-settings',
                                     config_map_key_to_env={'preset': 'FOLD_PRESET'})
    kubernetes.mount_pvc(fd, pvc_name=scratch_pvc, mount_path='/scratch')
    fd.set_accelerator_type('nvidia.com/gpu').set_accelerator_limit(1)

    publish(structure=fd.outputs['structure'], bucket=msa_bucket, target_id=target_id)


if __name__ == '__main__':
    compiler.Compiler().compile(fold_pipeline, os.path.splitext(__file__)[0] + '.yaml')
