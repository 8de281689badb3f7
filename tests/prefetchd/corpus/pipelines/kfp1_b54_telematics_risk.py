# ruff: noqa
"""Usage-based motor insurance: telematics trip risk model (KFP v1 SDK -> Argo Workflow).

A month of raw trips and the OSM road network are synced into a per-run
work volume; the raw trips are snapshotted for the regulator's audit trail
(a second volume is restored from the snapshot and sampled); trips are
map-matched on a high-memory node and a PyTorch risk model is trained on a
GPU node; when the validation Gini is good enough the risk tables are
exported to the actuarial team's shared volume.

Compile (kfp 1.8.24): python kfp1_b54_telematics_risk.py -> kfp1_b54_telematics_risk.yaml
"""
import os

import kfp
from kfp import dsl, onprem
from kfp.aws import use_aws_secret
from kfp.components import load_component_from_text
from kubernetes.client.models import V1EnvVar

AWS_CLI = 'amazon/aws-cli:2.15.30'

map_match_op = load_component_from_text("""
name: Map match trips
description: Snaps GPS pings to road segments (HMM map matching).
inputs:
- {name: trips_dir, type: String}
- {name: road_segments, type: String}
- {name: max_gap_s, type: Integer, default: '30'}
outputs:
- {name: matched, type: Parquet}
implementation:
  container:
    image: ghcr.io/acme-ins/telematics-mapmatch:2.4.0
    command: [python, -m, mapmatch.run]
    args: [--trips-dir, {inputValue: trips_dir}, --roads, {inputValue: road_segments},
           --max-gap-s, {inputValue: max_gap_s}, --out, {outputPath: matched}]
""")

train_risk_op = load_component_from_text("""
name: Train trip risk model
description: Fine-tunes the trip2vec encoder with a Tweedie claim-frequency head.
inputs:
- {name: matched_trips, type: Parquet}
- {name: epochs, type: Integer, default: '20'}
- {name: model_tag, type: String}
outputs:
- {name: model, type: PyTorchModel}
- {name: val_gini, type: Float}
implementation:
  container:
    image: ghcr.io/acme-ins/telematics-risk-torch:1.9.0-cu121
    command: [python, /app/train.py]
    args: [--trips, {inputPath: matched_trips}, --epochs, {inputValue: epochs},
           --tag, {inputValue: model_tag}, --model-out, {outputPath: model},
           --gini-out, {outputPath: val_gini}]
""")

AWS = use_aws_secret('aws-secret', 'AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY')


@dsl.pipeline(name='telematics-trip-risk', description='Monthly UBI trip risk model')
def telematics_pipeline(trips_uri: str = 's3://acme-telematics/trips/year=2024/month=05/',
                        road_network_uri: str = 's3://acme-telematics-ref/osm/road_segments_eu_2024.parquet',
                        model_tag: str = 'ubi-v7',
                        epochs: int = 20):
    work = dsl.VolumeOp(name='create-trips-volume', resource_name='trips-work',
                        size='200Gi', modes=dsl.VOLUME_MODE_RWO)

    sync_trips = dsl.ContainerOp(
        name='sync-trips', image=AWS_CLI, command=['aws', 's3', 'sync'],
        arguments=[trips_uri, '/mnt/trips/raw/', '--only-show-errors'],
        pvolumes={'/mnt/trips': work.volume}).apply(AWS)
    sync_trips.set_retry(3)

    sync_roads = dsl.ContainerOp(
        name='sync-road-network', image=AWS_CLI, command=['aws', 's3', 'cp'],
        arguments=[road_network_uri, '/mnt/trips/ref/road_segments.parquet'],
        pvolumes={'/mnt/trips': work.volume}).apply(AWS)

    snap = dsl.VolumeSnapshotOp(name='snapshot-raw-trips', resource_name='trips-raw-snap',
                                volume=sync_trips.pvolume)
    snap.after(sync_roads)

    matched = map_match_op(trips_dir='/mnt/trips/raw',
                           road_segments='/mnt/trips/ref/road_segments.parquet')
    matched.add_pvolumes({'/mnt/trips': sync_trips.pvolume})
    matched.after(sync_roads)
    matched.add_node_selector_constraint('node.kubernetes.io/instance-type', 'r6i.4xlarge')
    matched.set_memory_request('100G')

    train = train_risk_op(matched_trips=matched.outputs['matched'], epochs=epochs, model_tag=model_tag)
    train.add_env_variable(V1EnvVar(name='BASE_ENCODER_URI',
                                    value='s3://acme-telematics-models/encoders/trip2vec-v3/'))
    train.set_gpu_limit(1)
    train.add_node_selector_constraint('nvidia.com/gpu.product', 'NVIDIA-A10G')
    train.apply(AWS)

    audit_vol = dsl.VolumeOp(name='create-audit-volume', resource_name='trips-audit',
                             data_source=snap.snapshot, size=snap.outputs['size'],
                             modes=dsl.VOLUME_MODE_RWO)
    audit = dsl.ContainerOp(
        name='audit-sample', image='ghcr.io/acme-ins/telematics-audit:0.6.1',
        command=['python', '-m', 'audit.sample'],
        arguments=['--trips', '/audit/raw', '--n', '5000',
                   '--out', f's3://acme-telematics-audit/samples/{model_tag}/{dsl.RUN_ID_PLACEHOLDER}/'],
        pvolumes={'/audit': audit_vol.volume}).apply(AWS)

    with dsl.Condition(train.outputs['val_gini'] > 0.3):
        export = dsl.ContainerOp(
            name='export-risk-tables', image='ghcr.io/acme-ins/telematics-risk-torch:1.9.0-cu121',
            command=['python', '/app/export_tables.py'],
            arguments=['--model', dsl.InputArgumentPath(train.outputs['model']),
                       '--tag', model_tag,
                       '--out', f'/actuarial/telematics/{model_tag}/'])
        export.apply(onprem.mount_pvc(pvc_name='actuarial-share', volume_name='actuarial',
                                      volume_mount_path='/actuarial'))


if __name__ == '__main__':
    kfp.compiler.Compiler().compile(telematics_pipeline, os.path.splitext(__file__)[0] + '.yaml')
