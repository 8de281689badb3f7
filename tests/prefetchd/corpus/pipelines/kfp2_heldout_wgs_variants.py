# ruff: noqa
"""KFP v2 (held-out test): whole-genome germline variant calling for a small cohort.
Idioms: CreatePVC for a shared reference cache + DeletePVC, s5cmd with a glob inside sh -c
built from $0 (a pipeline parameter), ParallelFor over a list-of-dicts parameter whose
field is an S3 prefix consumed by `aws s3 cp --recursive` in sh -c, dsl.Collected of BAMs,
dask.dataframe.read_parquet over an f-string with storage_options, a "/".join write path
uploaded with s3fs put, set_retry.

Compile: /tmp/kfp2/bin/python kfp2_heldout_wgs_variants.py
"""
import os
from typing import List

from kfp import compiler, dsl, kubernetes

GATK = 'ghcr.io/acme-genomics/gatk-bwa:4.5.0.0'


@dsl.container_component
def stage_reference(build: str):
    return dsl.ContainerSpec(
        image='peakcom/s5cmd:v2.2.2',
        command=['sh', '-c'],
        args=['s5cmd --numworkers 32 cp "s3://acme-genomics-ref/$0/*" /ref/ && ls -lh /ref', build])


@dsl.container_component
def align_sample(fastq_prefix: str, sample_id: str, build: str, bam: dsl.Output[dsl.Artifact]):
    return dsl.ContainerSpec(
        image=GATK,
        command=['sh', '-c'],
        args=['set -eu; aws s3 cp --recursive "$0" /work/fastq/ --exclude "*" --include "*.fastq.gz" && '
              'bwa-mem2 mem -t 32 -R "@RG\\tID:$1\\tSM:$1" /ref/$2.fa /work/fastq/*_R1*.fastq.gz /work/fastq/*_R2*.fastq.gz '
              '| samtools sort -@8 -o "$3" - && samtools index "$3"',
              fastq_prefix, sample_id, build, bam.path])


@dsl.component(base_image=GATK, packages_to_install=['dask[dataframe]==2024.5.2', 's3fs==2024.3.1'])
def joint_genotype(bams: List[dsl.Artifact], cohort: str, build: str) -> str:
    import subprocess

    import dask.dataframe as dd
    import s3fs
    gvcfs = []
    for b in bams:
        out = b.path + ".g.vcf.gz"
        subprocess.run(["gatk", "HaplotypeCaller", "-R", f"/ref/{build}.fa", "-I", b.path, "-O", out, "-ERC", "GVCF"], check=True)
        gvcfs.append(out)
    subprocess.run(["gatk", "CombineGVCFs", "-R", f"/ref/{build}.fa", *sum([["-V", g] for g in gvcfs], []),
                    "-O", "/tmp/cohort.g.vcf.gz"], check=True)
    subprocess.run(["gatk", "GenotypeGVCFs", "-R", f"/ref/{build}.fa", "-V", "/tmp/cohort.g.vcf.gz",
                    "-O", "/tmp/joint.vcf.gz"], check=True)
    af = dd.read_parquet(f"s3://acme-genomics-ref/gnomad-v4/{build}/sites/", columns=["locus", "AF"],
                         storage_options={"requester_pays": True})
    print("gnomAD sites:", af.shape[0].compute())
    dest = "/".join(["s3://acme-genomics-results", cohort, build, "joint.vcf.gz"])
    s3fs.S3FileSystem().put("/tmp/joint.vcf.gz", dest)
    return dest


@dsl.pipeline(name='wgs-germline-cohort')
def wgs(cohort: str = 'giab-pilot', build: str = 'GRCh38',
        samples: List[dict] = [{'id': 'NA12878', 'fastq': 's3://acme-genomics/fastq/NA12878/'},
                               {'id': 'NA24385', 'fastq': 's3://acme-genomics/fastq/NA24385/'}]):
    ref = kubernetes.CreatePVC(pvc_name_suffix='-refcache', access_modes=['ReadWriteMany'], size='200Gi',
                               storage_class_name='efs-sc')
    stage = stage_reference(build=build)
    kubernetes.mount_pvc(stage, pvc_name=ref.outputs['name'], mount_path='/ref')
    with dsl.ParallelFor(samples) as s:
        aln = align_sample(fastq_prefix=s.fastq, sample_id=s.id, build=build).after(stage)
        aln.set_cpu_limit('32').set_memory_limit('64G').set_retry(num_retries=2)
        kubernetes.mount_pvc(aln, pvc_name=ref.outputs['name'], mount_path='/ref')
    jg = joint_genotype(bams=dsl.Collected(aln.outputs['bam']), cohort=cohort, build=build)
    kubernetes.mount_pvc(jg, pvc_name=ref.outputs['name'], mount_path='/ref')
    kubernetes.DeletePVC(pvc_name=ref.outputs['name']).after(jg)


if __name__ == '__main__':
    compiler.Compiler().compile(wgs, os.path.splitext(__file__)[0] + '.yaml')
