# ruff: noqa
"""Offshore seismic fault interpretation (VolumeOp, ParallelFor over file_outputs, ExitHandler, ResourceOp, load_component_from_text)."""
import kfp
from kfp import components, dsl

MERGE = components.load_component_from_text("""
name: Merge fault volumes
inputs:
- {name: survey, type: String}
- {name: interp_bucket, type: String}
implementation:
  container:
    image: ghcr.io/terraseis/fault-tools:2.4.0
    command: [python, -m, faulttools.merge]
    args:
    - --faults
    - concat: ["s3://", {inputValue: interp_bucket}, "/", {inputValue: survey}, "/faults/"]
    - --horizons
    - concat: ["s3://terraseis-interp/", {inputValue: survey}, "/horizons/picked_v3.zarr"]
    - --out
    - concat: ["s3://", {inputValue: interp_bucket}, "/", {inputValue: survey}, "/fault_model.zarr"]
""")


@dsl.pipeline(name="seismic-fault-interpretation", description="3D fault segmentation per inline block")
def seismic_faults(survey: str = "gom-mc-2024b", interp_bucket: str = "terraseis-interp",
                   weights: str = "s3://terraseis-models/faultseg3d/v2.1/model.pth"):
    notify = dsl.ContainerOp(
        name="notify-interpreters",
        image="curlimages/curl:8.8.0",
        command=["sh", "-c"],
        arguments=['curl -sf -X POST "$TEAMS_HOOK" -d "{\\"text\\": \\"fault run $0 finished\\"}"', survey],
    )
    with dsl.ExitHandler(notify):
        vol = dsl.VolumeOp(name="seismic-work", resource_name="seismic-work", size="400Gi",
                           modes=dsl.VOLUME_MODE_RWO, storage_class="gp3")
        fetch = dsl.ContainerOp(
            name="fetch-survey",
            image="amazon/aws-cli:2.17.0",
            command=["bash", "-c"],
            arguments=["""set -euo pipefail
SURVEY="$0"
SRC="s3://terraseis-raw/surveys/${SURVEY}/segy/"
aws s3 sync "$SRC" /work/segy/ --exclude "*" --include "*.sgy" --only-show-errors
python3 -c 'import json; print(json.dumps([[i, i + 199] for i in range(1000, 2000, 200)]))' > /work/blocks.json
""", survey],
            pvolumes={"/work": vol.volume},
            file_outputs={"blocks": "/work/blocks.json"},
        )
        with dsl.ParallelFor(fetch.outputs["blocks"], parallelism=3) as block:
            seg = dsl.ContainerOp(
                name="segment-faults",
                image="ghcr.io/terraseis/faultseg3d:2.1.0-cu121",
                command=["python", "segment.py"],
                arguments=["--segy-dir", "/work/segy", "--inline-block", block,
                           "--weights", weights,
                           "--output", "/work/faults/"],
                pvolumes={"/work": fetch.pvolume},
            )
            seg.set_gpu_limit(1)
        upload = dsl.ContainerOp(
            name="upload-faults",
            image="peakcom/s5cmd:v2.2.2",
            command=["/s5cmd"],
            arguments=["--numworkers", "16", "sync", "/work/faults/",
                       "s3://%s/%s/faults/" % (interp_bucket, survey)],
            pvolumes={"/work": fetch.pvolume},
        ).after(seg)
        merge = MERGE(survey=survey, interp_bucket=interp_bucket).after(upload)
        dsl.ResourceOp(
            name="record-run",
            k8s_resource={
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"generateName": "fault-run-", "labels": {"app": "faultseg"}},
                "data": {"survey": str(survey), "status": "merged"},
            },
            action="create",
        ).after(merge)


if __name__ == "__main__":
    kfp.compiler.Compiler().compile(seismic_faults, __file__.replace(".py", ".yaml"))
