# ruff: noqa
# ruff: noqa
"""Cohort CRAM QC before a joint-calling freeze (KFP v1 SDK -> Argo).

A VolumeOp work volume holds the GRCh38 reference (staged once) and the
per-sample QC outputs. For each sample of the release (static ParallelFor
over dicts) samtools stats and mosdepth read the sample's CRAM straight from
S3; mosdepth gets the calling-regions BED through a V1EnvVar. MultiQC then
aggregates the volume (outputPath for the report and the failing-sample
count, a pushgateway sidecar for metrics); the QC summary is published only when no
sample failed. Components are loaded from YAML text.

Compile (kfp 1.8.x): python kfp1_b35_cram_qc.py  -> kfp1_b35_cram_qc.yaml
"""
import os

import kfp
from kfp import components, dsl
from kubernetes.client.models import V1EnvVar

SAMPLES = [
    {'sample': 'HG00096', 'cram': 's3://acme-genomics/cram/1kg-highcov/HG00096.final.cram'},
    {'sample': 'HG00097', 'cram': 's3://acme-genomics/cram/1kg-highcov/HG00097.final.cram'},
    {'sample': 'HG00099', 'cram': 's3://acme-genomics/cram/1kg-highcov/HG00099.final.cram'},
    {'sample': 'HG00100', 'cram': 's3://acme-genomics/cram/1kg-highcov/HG00100.final.cram'},
]

stage_reference_op = components.load_component_from_text('''
name: Stage reference
inputs:
- {name: reference_uri, type: String}
implementation:
  container:
    image: amazon/aws-cli:2.15.30
    command: [sh, -c, 'aws s3 cp --recursive "$0" /work/ref/']
    args: [{inputValue: reference_uri}]
''')

samtools_stats_op = components.load_component_from_text('''
name: Samtools stats
inputs:
- {name: sample, type: String}
- {name: cram_uri, type: String}
implementation:
  container:
    image: quay.io/biocontainers/samtools:1.19.2--h50ea8bc_1
    command: [sh, -c]
    args:
    - mkdir -p /work/qc/$0 && samtools stats --reference /work/ref/GRCh38_full_analysis_set_plus_decoy_hla.fa "$1" > /work/qc/$0/$0.stats
    - {inputValue: sample}
    - {inputValue: cram_uri}
''')

mosdepth_op = components.load_component_from_text('''
name: Mosdepth
inputs:
- {name: sample, type: String}
- {name: cram_uri, type: String}
implementation:
  container:
    image: quay.io/biocontainers/mosdepth:0.3.8--hd299d5a_0
    command: [sh, -c]
    args:
    - mkdir -p /work/qc/$0 && mosdepth --by "$CALLING_REGIONS" --fasta /work/ref/GRCh38_full_analysis_set_plus_decoy_hla.fa -n /work/qc/$0/$0 "$1"
    - {inputValue: sample}
    - {inputValue: cram_uri}
''')

multiqc_op = components.load_component_from_text('''
name: MultiQC
outputs:
- {name: summary, type: Directory}
- {name: failing, type: Integer}
implementation:
  container:
    image: quay.io/biocontainers/multiqc:1.21--pyhdfd78af_0
    command: [sh, -c]
    args:
    - multiqc /work/qc -o "$0" && python /opt/qc/count_failing.py "$0" > "$1"
    - {outputPath: summary}
    - {outputPath: failing}
''')

publish_op = components.load_component_from_text('''
name: Publish QC
inputs:
- {name: summary, type: Directory}
- {name: release, type: String}
- {name: reports_root, type: String}
implementation:
  container:
    image: amazon/aws-cli:2.15.30
    command: [aws, s3, sync]
    args:
    - {inputPath: summary}
    - concat: [{inputValue: reports_root}, /, {inputValue: release}, /multiqc/]
''')


@dsl.pipeline(name='cram-qc-freeze')
def cram_qc(release: str = '1kg-highcov-r3',
            reference_uri: str = 's3://acme-genomics/reference/GRCh38/',
            reports_root: str = 's3://acme-genomics-reports/qc'):
    vop = dsl.VolumeOp(name='qc-volume', resource_name='qc-work', size='200Gi',
                       modes=dsl.VOLUME_MODE_RWO)
    ref = stage_reference_op(reference_uri=reference_uri).add_pvolumes({'/work': vop.volume})

    with dsl.ParallelFor(SAMPLES) as s:
        st = samtools_stats_op(sample=s.sample, cram_uri=s.cram).add_pvolumes({'/work': ref.pvolume})
        md = mosdepth_op(sample=s.sample, cram_uri=s.cram).add_pvolumes({'/work': ref.pvolume})
        md.container.add_env_variable(V1EnvVar(
            name='CALLING_REGIONS', value='s3://acme-genomics/reference/GRCh38/wgs_calling_regions.hg38.bed'))

    mqc = multiqc_op().add_pvolumes({'/work': vop.volume})
    mqc.add_sidecar(dsl.Sidecar(name='pushgateway', image='prom/pushgateway:v1.8.0'))
    mqc.after(st, md)

    with dsl.Condition(mqc.outputs['failing'] == '0', name='all-pass'):
        publish_op(summary=mqc.outputs['summary'], release=release, reports_root=reports_root)


if __name__ == '__main__':
    kfp.compiler.Compiler().compile(cram_qc, os.path.splitext(__file__)[0] + '.yaml')
