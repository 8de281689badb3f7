# ruff: noqa
"""Somatic tumor/normal calling for the Onco-500 panel (KFP v1 SDK -> Argo Workflow).

The molecular-pathology bioinformatics group's batch run. The hg38 reference
sits on a shared claim named by a pipeline parameter (mounted read-only with
a sub-path); a fixed work claim holds the batch. CRAM pairs are listed as
static dicts (one Mutect2 per pair); the OncoKB API token is a mounted Secret;
the QC step takes its thresholds location from a ConfigMap (envFrom). The
report goes to S3.

Compile (kfp 1.8.x): python kfp1_b59_tumor_normal.py  -> kfp1_b59_tumor_normal.yaml
"""
import os

import kfp
from kfp import dsl
from kfp.aws import use_aws_secret
from kubernetes.client import (V1Affinity, V1ConfigMapEnvSource, V1EmptyDirVolumeSource, V1EnvFromSource,
                               V1EnvVar, V1EnvVarSource, V1LocalObjectReference, V1NodeAffinity,
                               V1NodeSelector, V1NodeSelectorRequirement, V1NodeSelectorTerm,
                               V1ObjectFieldSelector, V1PersistentVolumeClaimVolumeSource,
                               V1SecretVolumeSource, V1SecurityContext, V1Toleration, V1Volume,
                               V1VolumeMount)

GATK_IMAGE = 'broadinstitute/gatk:4.5.0.0'
AWS_IMAGE = 'amazon/aws-cli:2.15.30'
TOOLS_IMAGE = 'registry.acme-genomics.internal/molpath/somatic-tools:1.9.3'

PAIRS = [
    {'pair': 'PT-0412', 'tumor': 's3://acme-genomics-raw/onco-500/batch-0712/PT-0412/tumor.cram',
     'normal': 's3://acme-genomics-raw/onco-500/batch-0712/PT-0412/normal.cram'},
    {'pair': 'PT-0419', 'tumor': 's3://acme-genomics-raw/onco-500/batch-0712/PT-0419/tumor.cram',
     'normal': 's3://acme-genomics-raw/onco-500/batch-0712/PT-0419/normal.cram'},
    {'pair': 'PT-0433', 'tumor': 's3://acme-genomics-raw/onco-500/batch-0712/PT-0433/tumor.cram',
     'normal': 's3://acme-genomics-raw/onco-500/batch-0712/PT-0433/normal.cram'},
]


def reference(op, claim):
    op.add_volume(V1Volume(name='reference', persistent_volume_claim=V1PersistentVolumeClaimVolumeSource(
        claim_name=claim, read_only=True)))
    op.container.add_volume_mount(V1VolumeMount(name='reference', mount_path='/ref', sub_path='hg38',
                                                read_only=True))
    return op


def work(op):
    op.add_volume(V1Volume(name='work', persistent_volume_claim=V1PersistentVolumeClaimVolumeSource(
        claim_name='somatic-work')))
    op.container.add_volume_mount(V1VolumeMount(name='work', mount_path='/work', sub_path='batch-0712'))
    return op


def highmem(op):
    op.add_affinity(V1Affinity(node_affinity=V1NodeAffinity(
        required_during_scheduling_ignored_during_execution=V1NodeSelector(node_selector_terms=[
            V1NodeSelectorTerm(match_expressions=[V1NodeSelectorRequirement(
                key='node.kubernetes.io/instance-type', operator='In', values=['r6i.8xlarge', 'r6i.12xlarge'])])]))))
    op.add_toleration(V1Toleration(key='dedicated', operator='Equal', value='genomics', effect='NoSchedule'))
    return op


@dsl.pipeline(name='onco500-tumor-normal')
def somatic_pipeline(panel_bed_uri: str = 's3://acme-genomics-ref/panels/onco-500/v3/targets.bed',
                     ref_claim: str = 'onco-reference-hg38',
                     run_qc: str = 'true',
                     report_uri: str = 's3://acme-genomics-results/somatic/onco-500/batch-0712/'):
    panel = dsl.ContainerOp(
        name='stage-panel', image=AWS_IMAGE,
        command=['aws', 's3', 'cp'],
        arguments=[panel_bed_uri, '/work/panel/targets.bed'],
    ).apply(use_aws_secret('genomics-aws', 'AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY', 'us-west-2'))
    work(panel)

    with dsl.ParallelFor(PAIRS, parallelism=2) as item:
        m2 = dsl.ContainerOp(
            name='mutect2', image=GATK_IMAGE,
            command=['bash', '-c'],
            arguments=['set -euo pipefail; '
                       'aws s3 cp "$0" /scratch/tumor.cram && aws s3 cp "$1" /scratch/normal.cram && '
                       'gatk Mutect2 -R /ref/Homo_sapiens_assembly38.fasta -I /scratch/tumor.cram '
                       '-I /scratch/normal.cram -L /work/panel/targets.bed '
                       '--germline-resource /ref/af-only-gnomad.hg38.vcf.gz -O /work/calls/$2.unfiltered.vcf.gz',
                       item.tumor, item.normal, item.pair],
        ).after(panel).apply(use_aws_secret('genomics-aws', 'AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY',
                                            'us-west-2'))
        reference(m2, ref_claim)
        work(m2)
        m2.add_volume(V1Volume(name='scratch', empty_dir=V1EmptyDirVolumeSource()))
        m2.container.add_volume_mount(V1VolumeMount(name='scratch', mount_path='/scratch'))
        m2.container.set_cpu_limit('16').set_memory_limit('64Gi')
        m2.container.add_env_variable(V1EnvVar(
            name='POD_IP', value_from=V1EnvVarSource(field_ref=V1ObjectFieldSelector(field_path='status.podIP'))))
        highmem(m2)
        m2.set_retry(3, policy='OnFailure')
        m2.set_timeout(28800)

        flt = dsl.ContainerOp(
            name='filter-calls', image=GATK_IMAGE,
            command=['gatk', 'FilterMutectCalls'],
            arguments=['-R', '/ref/Homo_sapiens_assembly38.fasta',
                       '-V', '/work/calls/%s.unfiltered.vcf.gz' % item.pair,
                       '-O', '/work/calls/%s.filtered.vcf.gz' % item.pair],
        ).after(m2)
        reference(flt, ref_claim)
        work(flt)

    maf = dsl.ContainerOp(
        name='merge-maf', image=TOOLS_IMAGE,
        command=['python', '-m', 'somatic.vcf2maf_batch'],
        arguments=['--calls', '/work/calls', '--suffix', '.filtered.vcf.gz', '--out', '/work/merged.maf'],
    ).after(flt)
    reference(maf, ref_claim)
    work(maf)

    onco = dsl.ContainerOp(
        name='oncokb-annotate', image=TOOLS_IMAGE,
        command=['sh', '-c'],
        arguments=['python /opt/oncokb-annotator/MafAnnotator.py -i /work/merged.maf '
                   '-o /work/report/annotated.maf -b "$(cat /var/run/secrets/oncokb/token)" '
                   '-u https://www.oncokb.org/api/v1'],
    ).after(maf)
    work(onco)
    onco.add_volume(V1Volume(name='oncokb-token', secret=V1SecretVolumeSource(secret_name='oncokb-api-token')))
    onco.container.add_volume_mount(V1VolumeMount(name='oncokb-token', mount_path='/var/run/secrets/oncokb',
                                                  read_only=True))
    onco.container.set_security_context(V1SecurityContext(run_as_user=1000, run_as_non_root=True,
                                                          allow_privilege_escalation=False))

    with dsl.Condition(run_qc == 'true'):
        qc = dsl.ContainerOp(
            name='coverage-qc', image=TOOLS_IMAGE,
            command=['sh', '-c'],
            arguments=['aws s3 cp "$QC_THRESHOLDS_URI" /tmp/thresholds.yaml && '
                       'python -m somatic.coverage_qc --calls /work/calls --bed /work/panel/targets.bed '
                       '--thresholds /tmp/thresholds.yaml --out /work/report/qc.html'],
        ).after(maf).apply(use_aws_secret('genomics-aws', 'AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY',
                                          'us-west-2'))
        work(qc)
        qc.container.add_env_from(V1EnvFromSource(config_map_ref=V1ConfigMapEnvSource(name='onco500-qc-config')))
        qc.add_pod_label('acme.io/qc', 'coverage')

    upload = dsl.ContainerOp(
        name='upload-report', image=AWS_IMAGE,
        command=['aws', 's3', 'sync'],
        arguments=['/work/report/', report_uri],
    ).after(onco, qc).apply(use_aws_secret('genomics-aws-writer', 'AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY',
                                           'us-west-2'))
    work(upload)
    upload.add_pod_annotation('acme.io/data-classification', 'phi')

    conf = dsl.get_pipeline_conf()
    conf.set_image_pull_secrets([V1LocalObjectReference(name='acme-genomics-registry')])
    conf.set_default_pod_node_selector('acme.io/pool', 'genomics')
    conf.set_parallelism(6)


if __name__ == '__main__':
    kfp.compiler.Compiler().compile(somatic_pipeline, os.path.splitext(__file__)[0] + '.yaml')
