# ruff: noqa
"""Germline WGS cohort: per-sample alignment + DeepVariant, joint genotyping, VEP (KFP v2 + kfp-kubernetes).

The genomics core's cohort run. The GRCh38 reference lives on a shared PVC
whose name is a pipeline parameter (sub-path per build); VEP's cache is a
fixed PVC. FASTQs are pulled per sample onto a generic ephemeral volume; the
Mills known-indels location is configured per cluster in a ConfigMap, dbSNP is
a constant env var; the GIAB truth set is registered by an importer. The LIMS
is notified from an exit task.

Compile: python kfp2_b59_germline_wgs.py  -> kfp2_b59_germline_wgs.yaml
"""
import os
from typing import List

from kfp import compiler, dsl, kubernetes
from kfp.dsl import Dataset, Input, Metrics, Output

GATK_IMAGE = 'broadinstitute/gatk:4.5.0.0'
BWA_IMAGE = 'ghcr.io/acme-genomics/bwa-mem2-samtools:2.2.1-1.20'
DV_IMAGE = 'google/deepvariant:1.6.1-gpu'
VEP_IMAGE = 'ensemblorg/ensembl-vep:release_110.1'
HAPPY_IMAGE = 'jmcdani20/hap.py:v0.3.12'
AWS_IMAGE = 'amazon/aws-cli:2.15.30'


@dsl.container_component
def verify_reference():
    return dsl.ContainerSpec(image=BWA_IMAGE, command=['sh', '-c'],
                             args=['cd /ref && md5sum -c GRCh38.md5 && samtools faidx GRCh38.fa chrM > /dev/null'])


@dsl.container_component
def align_reads(fastq_uri: str, sample: str, bam: dsl.Output[dsl.Dataset]):
    return dsl.ContainerSpec(
        image=BWA_IMAGE, command=['sh', '-c'],
        args=['aws s3 cp --recursive "$0" /fastq/ && '
              'bwa-mem2 mem -t 32 -R "@RG\\tID:$1\\tSM:$1" /ref/GRCh38.fa /fastq/*_R1.fastq.gz /fastq/*_R2.fastq.gz '
              '| samtools sort -@ 8 -T /tmp/sort -o "$2" - && samtools index "$2"',
              fastq_uri, sample, bam.path])


@dsl.container_component
def call_variants(bam: dsl.Input[dsl.Dataset], sample: str, gvcf: dsl.Output[dsl.Dataset]):
    return dsl.ContainerSpec(
        image=DV_IMAGE, command=['/opt/deepvariant/bin/run_deepvariant'],
        args=['--model_type=WGS', '--ref=/ref/GRCh38.fa', dsl.ConcatPlaceholder(['--reads=', bam.path]),
              dsl.ConcatPlaceholder(['--sample_name=', sample]),
              '--output_vcf=/tmp/out.vcf.gz', dsl.ConcatPlaceholder(['--output_gvcf=', gvcf.path]),
              '--num_shards=16'])


@dsl.component(base_image=GATK_IMAGE, packages_to_install=['s3fs==2024.6.1'])
def joint_genotype(gvcfs: List[Dataset], cohort_vcf: Output[Dataset]):
    import os
    import subprocess
    import s3fs
    fs = s3fs.S3FileSystem()
    fs.get(os.environ['DBSNP_URI'], '/tmp/dbsnp.vcf.gz')
    fs.get(os.environ['DBSNP_URI'] + '.tbi', '/tmp/dbsnp.vcf.gz.tbi')
    fs.get(os.environ['MILLS_URI'], '/tmp/mills.vcf.gz')
    args = ['gatk', 'CombineGVCFs', '-R', '/ref/GRCh38.fa', '-O', '/tmp/combined.g.vcf.gz']
    for g in gvcfs:
        args += ['-V', g.path]
    subprocess.run(args, check=True)
    subprocess.run(['gatk', 'GenotypeGVCFs', '-R', '/ref/GRCh38.fa', '-V', '/tmp/combined.g.vcf.gz',
                    '--dbsnp', '/tmp/dbsnp.vcf.gz', '-O', cohort_vcf.path], check=True)


@dsl.container_component
def annotate_vep(cohort_vcf: dsl.Input[dsl.Dataset], annotated: dsl.Output[dsl.Dataset]):
    return dsl.ContainerSpec(
        image=VEP_IMAGE, command=['vep'],
        args=['--offline', '--cache', '--dir_cache', '/vep', '--assembly', 'GRCh38',
              '--config', '/opt/vep/config/vep.ini', '--fork', '8', '--vcf', '--compress_output', 'bgzip',
              '-i', cohort_vcf.path, '-o', annotated.path])


@dsl.container_component
def benchmark_concordance(query: dsl.Input[dsl.Dataset], truth: dsl.Input[dsl.Dataset],
                          report: dsl.Output[dsl.Dataset]):
    return dsl.ContainerSpec(
        image=HAPPY_IMAGE, command=['/opt/hap.py/bin/hap.py'],
        args=[truth.path, query.path, '-r', '/ref/GRCh38.fa', '--threads', '8', '-o', report.path])


@dsl.container_component
def export_cohort(annotated: dsl.Input[dsl.Dataset], dest: str):
    return dsl.ContainerSpec(image=AWS_IMAGE, command=['aws', 's3', 'cp'], args=[annotated.path, dest])


@dsl.container_component
def notify_lims(run_label: str):
    return dsl.ContainerSpec(
        image='curlimages/curl:8.8.0', command=['sh', '-c'],
        args=['curl -fsS -X POST -H "Authorization: Bearer $LIMS_TOKEN" '
              '-d "{\\"run\\": \\"$0\\", \\"pod\\": \\"$POD_NAME\\"}" '
              'https://lims.acme-genomics.internal/api/v2/pipeline-runs', run_label])


def _reference(task, ref_pvc):
    kubernetes.mount_pvc(task, pvc_name=ref_pvc, mount_path='/ref', sub_path='GRCh38')


def _genomics_pool(task):
    kubernetes.add_node_selector(task, label_key='acme.io/pool', label_value='genomics-highmem')
    kubernetes.add_toleration(task, key='dedicated', operator='Equal', value='genomics', effect='NoSchedule')


@dsl.pipeline(name='germline-wgs-cohort')
def wgs_pipeline(samples: List[str] = ['NA12878', 'NA24385', 'NA24631'],
                 fastq_root: str = 's3://acme-genomics-raw/wgs/fastq',
                 ref_pvc: str = 'genomics-ref-cache',
                 cohort_dest: str = 's3://acme-genomics-results/cohorts/giab-2024-07/cohort.vep.vcf.gz'):
    notify = notify_lims(run_label='giab-2024-07')
    kubernetes.use_secret_as_env(notify, secret_name='lims-api', secret_key_to_env={'token': 'LIMS_TOKEN'})
    kubernetes.use_field_path_as_env(notify, env_name='POD_NAME', field_path='metadata.name')

    with dsl.ExitHandler(notify, name='cohort-run'):
        truth = dsl.importer(artifact_uri='s3://acme-genomics-ref/giab/v4.2.1/HG001_GRCh38_benchmark.vcf.gz',
                             artifact_class=Dataset, reimport=False,
                             metadata={'build': 'GRCh38', 'source': 'GIAB v4.2.1'})

        vr = verify_reference()
        _reference(vr, ref_pvc)

        with dsl.ParallelFor(samples, parallelism=2) as sample:
            al = align_reads(fastq_uri=f'{fastq_root}/{sample}/', sample=sample).after(vr)
            al.set_cpu_limit('32').set_memory_limit('128G')
            _reference(al, ref_pvc)
            _genomics_pool(al)
            kubernetes.add_ephemeral_volume(al, volume_name='fastq', mount_path='/fastq',
                                            access_modes=['ReadWriteOnce'], size='400Gi',
                                            storage_class_name='local-nvme')
            kubernetes.empty_dir_mount(al, volume_name='sort-tmp', mount_path='/tmp', size_limit='200Gi')
            kubernetes.use_secret_as_env(al, secret_name='genomics-s3-reader',
                                         secret_key_to_env={'access_key': 'AWS_ACCESS_KEY_ID',
                                                            'secret_key': 'AWS_SECRET_ACCESS_KEY'})
            kubernetes.set_image_pull_secrets(al, ['acme-genomics-ghcr'])

            cv = call_variants(bam=al.outputs['bam'], sample=sample)
            cv.set_accelerator_type('nvidia.com/gpu').set_accelerator_limit(1)
            cv.set_retry(num_retries=3, backoff_duration='120s')
            _reference(cv, ref_pvc)
            kubernetes.add_toleration(cv, key='nvidia.com/gpu', operator='Exists', effect='NoSchedule')
            kubernetes.add_node_selector(cv, label_key='acme.io/pool', label_value='gpu-t4')

        jg = joint_genotype(gvcfs=dsl.Collected(cv.outputs['gvcf']))
        jg.set_memory_limit('64G')
        jg.set_env_variable('DBSNP_URI', 's3://acme-genomics-ref/dbsnp/b156/GRCh38.dbSNP156.vcf.gz')
        _reference(jg, ref_pvc)
        _genomics_pool(jg)
        kubernetes.use_config_map_as_env(jg, config_map_name='genomics-known-sites',
                                         config_map_key_to_env={'mills_indels_uri': 'MILLS_URI'})
        kubernetes.use_secret_as_env(jg, secret_name='genomics-s3-reader',
                                     secret_key_to_env={'access_key': 'AWS_ACCESS_KEY_ID',
                                                        'secret_key': 'AWS_SECRET_ACCESS_KEY'})

        vep = annotate_vep(cohort_vcf=jg.outputs['cohort_vcf'])
        vep.set_memory_limit('32G')
        kubernetes.mount_pvc(vep, pvc_name='vep-cache-110', mount_path='/vep')
        kubernetes.use_config_map_as_volume(vep, config_map_name='vep-plugins-config', mount_path='/opt/vep/config')
        kubernetes.set_timeout(vep, seconds=21600)

        bench = benchmark_concordance(query=jg.outputs['cohort_vcf'], truth=truth.output)
        _reference(bench, ref_pvc)
        kubernetes.add_pod_label(bench, label_key='acme.io/qc', label_value='giab')

        ex = export_cohort(annotated=vep.outputs['annotated'], dest=cohort_dest).after(bench)
        ex.set_caching_options(enable_caching=False)
        kubernetes.use_secret_as_env(ex, secret_name='genomics-s3-writer',
                                     secret_key_to_env={'access_key': 'AWS_ACCESS_KEY_ID',
                                                        'secret_key': 'AWS_SECRET_ACCESS_KEY'})


if __name__ == '__main__':
    compiler.Compiler().compile(wgs_pipeline, os.path.splitext(__file__)[0] + '.yaml')
