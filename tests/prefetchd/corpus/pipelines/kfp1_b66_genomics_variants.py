# ruff: noqa
"""Cohort gVCF calling with GATK (KFP v1 SDK -> Argo).

fetch-reference syncs a reference folder (written without a trailing slash)
onto an existing PVC; list-samples pages through the cohort's CRAM prefix with
boto3 (bucket and cohort are separate parameters) and returns sample ids, which
drive a ParallelFor over a task output (withParam): each iteration copies its
CRAM + index in a shell script and writes a gVCF under a per-run scratch prefix
keyed by {{workflow.uid}}. joint-genotype reads that per-run scratch, a dbSNP
file and the reference; qc-report (dsl.Condition on a string parameter) runs
bcftools on the joint VCF and reads a chromosome-glob of panel sites. An exit
handler deletes the per-run scratch prefix.

Compile (kfp 1.8.x): python kfp1_b66_genomics_variants.py  -> kfp1_b66_genomics_variants.yaml
"""
import os

import kfp
from kfp import dsl, onprem
from kfp.components import create_component_from_func

GATK = 'ghcr.io/example/gatk-aws:4.5.0.0'


def list_samples(bucket: str, cohort: str, limit: int) -> list:
    import boto3
    pages = boto3.client('s3').get_paginator('list_objects_v2').paginate(Bucket=bucket, Prefix=f'{cohort}/cram/')
    ids = []
    for page in pages:
        for obj in page.get('Contents', []):
            if obj['Key'].endswith('.cram'):
                ids.append(obj['Key'].rsplit('/', 1)[1][:-len('.cram')])
    return sorted(ids)[:limit]


def qc_report(vcf_uri: str, report_uri: str,
              panel_glob: str = 's3://example-genomics-ref/1kg/sites/chr*.sites.vcf.gz'):
    import subprocess
    import fsspec
    panel = [f'{p}' for p in fsspec.open_files(panel_glob)]
    stats = subprocess.run(['bcftools', 'stats', '--threads', '4', vcf_uri], check=True, capture_output=True,
                           text=True).stdout
    html = f'<pre>{stats}</pre><p>{len(panel)} panel files</p>'
    with fsspec.open(report_uri, 'w') as f:
        f.write(html)


list_samples_op = create_component_from_func(list_samples, base_image='python:3.11-slim',
                                             packages_to_install=['boto3==1.34.113'])
qc_op = create_component_from_func(qc_report, base_image='ghcr.io/example/bcftools-py:1.20')


@dsl.pipeline(name='cohort-gvcf-calling')
def gvcf_pipeline(cohort_bucket: str = 'example-genomics-cohorts', cohort: str = 'ukb-200k',
                  max_samples: int = 64, run_qc: str = 'true'):
    cleanup = dsl.ContainerOp(name='cleanup-scratch', image='amazon/aws-cli:2.15.30',
                              command=['aws', 's3', 'rm', '--recursive'],
                              arguments=['s3://example-genomics-scratch/{{workflow.uid}}/'])
    with dsl.ExitHandler(cleanup):
        ref = dsl.ContainerOp(name='fetch-reference', image='amazon/aws-cli:2.15.30', command=['aws', 's3', 'sync'],
                              arguments=['s3://example-genomics-ref/GRCh38', '/ref/GRCh38',
                                         '--exclude', '*', '--include', 'Homo_sapiens_assembly38.*'])
        ref.apply(onprem.mount_pvc(pvc_name='genomics-ref', volume_name='ref', volume_mount_path='/ref'))

        ls = list_samples_op(bucket=cohort_bucket, cohort=cohort, limit=max_samples)

        with dsl.ParallelFor(ls.output, parallelism=16) as sample:
            call = dsl.ContainerOp(
                name='call-variants', image=GATK, command=['bash', '-c'],
                arguments=[
                    'set -euo pipefail; '
                    f'aws s3 cp s3://{cohort_bucket}/{cohort}/cram/{sample}.cram /scratch/in.cram; '
                    f'aws s3 cp s3://{cohort_bucket}/{cohort}/cram/{sample}.cram.crai /scratch/in.cram.crai; '
                    'gatk --java-options -Xmx12g HaplotypeCaller -R /ref/GRCh38/Homo_sapiens_assembly38.fasta '
                    f'-I /scratch/in.cram -O /scratch/{sample}.g.vcf.gz -ERC GVCF; '
                    f'aws s3 cp /scratch/{sample}.g.vcf.gz s3://example-genomics-scratch/{{{{workflow.uid}}}}/gvcf/'])
            call.apply(onprem.mount_pvc(pvc_name='genomics-ref', volume_name='ref', volume_mount_path='/ref'))
            call.after(ref)

        joint = dsl.ContainerOp(
            name='joint-genotype', image=GATK, command=['bash', '-c'],
            arguments=[
                'set -euo pipefail; '
                'aws s3 sync s3://example-genomics-scratch/{{workflow.uid}}/gvcf/ /scratch/gvcf/; '
                'aws s3 cp s3://example-genomics-ref/dbsnp/Homo_sapiens_assembly38.dbsnp138.vcf.gz /scratch/; '
                'ls /scratch/gvcf/*.g.vcf.gz | sed "s/^/-V /" > /scratch/args; '
                'gatk CombineGVCFs -R /ref/GRCh38/Homo_sapiens_assembly38.fasta --arguments_file /scratch/args '
                '-O /scratch/combined.g.vcf.gz; '
                'gatk GenotypeGVCFs -R /ref/GRCh38/Homo_sapiens_assembly38.fasta -V /scratch/combined.g.vcf.gz '
                '--dbsnp /scratch/Homo_sapiens_assembly38.dbsnp138.vcf.gz -O /scratch/cohort.vcf.gz; '
                f'aws s3 cp /scratch/cohort.vcf.gz s3://example-genomics-calls/{cohort}/joint/cohort.vcf.gz'])
        joint.apply(onprem.mount_pvc(pvc_name='genomics-ref', volume_name='ref', volume_mount_path='/ref'))
        joint.after(call)

        with dsl.Condition(run_qc == 'true'):
            qc_op(vcf_uri=f's3://example-genomics-calls/{cohort}/joint/cohort.vcf.gz',
                  report_uri=f's3://example-genomics-reports/{cohort}/qc.html').after(joint)


if __name__ == '__main__':
    kfp.compiler.Compiler().compile(gvcf_pipeline, os.path.splitext(__file__)[0] + '.yaml')
