# ruff: noqa
"""Germline short-variant calling for a sequencing run (genomics core facility)."""
from kfp import compiler, dsl
from kubernetes.client import V1EnvVar

CEPH = "https://ceph-rgw.genomics.internal"
SAMPLES = [
    {"id": "NA12878", "lane": "L001"},
    {"id": "NA12891", "lane": "L002"},
    {"id": "NA12892", "lane": "L001"},
]


@dsl.pipeline(name="germline-cohort", description="bwa + GATK per sample, Hail joint genotyping")
def germline_cohort(run_id: str = "run-0412", ref_build: str = "GRCh38", gnomad_version: str = "v4.1"):
    cleanup = dsl.ContainerOp(
        name="cleanup",
        image="peakcom/s5cmd:v2.2.2",
        command=["/s5cmd"],
        arguments=["--endpoint-url", CEPH, "rm", f"s3://genomics-tmp/{run_id}/*"],
    )
    with dsl.ExitHandler(cleanup):
        scratch = dsl.VolumeOp(
            name="create-scratch",
            resource_name="gl-scratch",
            size="500Gi",
            modes=dsl.VOLUME_MODE_RWO,
            storage_class="ceph-rbd-fast",
        )

        ref = dsl.ContainerOp(
            name="fetch-reference",
            image="minio/mc:RELEASE.2024-06-24T19-40-33Z",
            command=["sh", "-c"],
            arguments=[
                f"set -eu; mc cp --recursive refs/genomics-refs/{ref_build}/bwa-index/ /scratch/ref/ && ls -l /scratch/ref"
            ],
            pvolumes={"/scratch": scratch.volume},
        )
        ref.container.add_env_variable(V1EnvVar(name="MC_HOST_refs", value=CEPH))

        with dsl.ParallelFor(SAMPLES) as sample:
            align = dsl.ContainerOp(
                name="align-sample",
                image="ghcr.io/genomics-core/bwa-s5cmd:0.7.18",
                command=["bash", "-c"],
                arguments=[
                    "set -euo pipefail\n"
                    f'mkdir -p /scratch/fastq/{sample.id} /scratch/bam\n'
                    f's5cmd --endpoint-url {CEPH} cp "s3://seq-runs/{run_id}/{sample.id}/*_{sample.lane}_R?_001.fastq.gz" /scratch/fastq/{sample.id}/\n'
                    f"bwa mem -t 16 -R '@RG\\tID:{sample.id}\\tSM:{sample.id}' /scratch/ref/genome.fa "
                    f"/scratch/fastq/{sample.id}/*_R1_001.fastq.gz /scratch/fastq/{sample.id}/*_R2_001.fastq.gz "
                    f"| samtools sort -@8 -o /scratch/bam/{sample.id}.bam -\n"
                ],
                pvolumes={"/scratch": ref.pvolume},
            )
            call = dsl.ContainerOp(
                name="call-variants",
                image="broadinstitute/gatk:4.5.0.0",
                command=["gatk", "HaplotypeCaller"],
                arguments=[
                    "-R", "/scratch/ref/genome.fa",
                    "-I", f"/scratch/bam/{sample.id}.bam",
                    "-O", f"/scratch/gvcf/{sample.id}.g.vcf.gz",
                    "-ERC", "GVCF",
                ],
                pvolumes={"/scratch": align.pvolume},
            )

        joint = dsl.ContainerOp(
            name="joint-genotype",
            image="ghcr.io/genomics-core/hail-spark:0.2.130",
            command=["spark-submit"],
            arguments=[
                "--master", "local[32]",
                "--conf", f"spark.hadoop.fs.s3a.endpoint={CEPH}",
                "--conf", "spark.hadoop.fs.s3a.path.style.access=true",
                "--driver-memory", "96g",
                "/opt/jobs/joint_genotype.py",
                "--gvcf-dir", "/scratch/gvcf/",
                "--gnomad", f"s3a://genomics-annotations/gnomad/{gnomad_version}/sites.ht",
                "--out", f"s3a://genomics-results/cohorts/{run_id}/joint.mt",
                "--stats-out", "/scratch/qc/stats.tsv",
            ],
            pvolumes={"/scratch": scratch.volume},
        ).after(call)

        qc = dsl.ContainerOp(
            name="qc-report",
            image="ghcr.io/genomics-core/r-aws:4.4.1",
            command=["Rscript", "-e"],
            arguments=[
                "library(aws.s3)\n"
                "stats <- read.delim('/scratch/qc/stats.tsv')\n"
                "th <- s3read_using(read.csv, object = 's3://genomics-qc/thresholds/germline-v2.csv')\n"
                "ok <- all(stats$ti_tv >= th$min_ti_tv) && all(stats$het_hom <= th$max_het_hom)\n"
                f"s3write_using(stats, write.csv, object = 's3://genomics-results/cohorts/{run_id}/qc_summary.csv')\n"
                "writeLines(if (ok) 'pass' else 'fail', '/tmp/qc_status')\n"
            ],
            pvolumes={"/scratch": joint.pvolume},
            file_outputs={"status": "/tmp/qc_status"},
        )
        qc.container.add_env_variable(V1EnvVar(name="AWS_S3_ENDPOINT", value="ceph-rgw.genomics.internal"))

        with dsl.Condition(qc.outputs["status"] == "pass"):
            pub = dsl.ContainerOp(
                name="publish-vcf",
                image="rclone/rclone:1.67",
                command=["sh", "-c"],
                arguments=[
                    "set -eu\n"
                    "rclone copyto partner:consortium-shared/manifests/schema-v3.json /tmp/schema.json\n"
                    "rclone check --one-way /scratch/vcf/ /scratch/vcf/ >/dev/null\n"
                    f"rclone copy /scratch/vcf/ partner:consortium-dropbox/cohorts/{run_id}/\n"
                ],
                pvolumes={"/scratch": qc.pvolume},
            )
            for k, v in {"TYPE": "s3", "PROVIDER": "AWS", "REGION": "eu-west-1", "ENV_AUTH": "true"}.items():
                pub.container.add_env_variable(V1EnvVar(name=f"RCLONE_CONFIG_PARTNER_{k}", value=v))


if __name__ == "__main__":
    import pathlib
    compiler.Compiler().compile(germline_cohort, str(pathlib.Path(__file__).with_suffix(".yaml")))
