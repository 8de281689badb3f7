# ruff: noqa
from hera.workflows import Container, Parameter, Steps, WorkflowTemplate, script
from hera.workflows.models import PersistentVolumeClaim, PersistentVolumeClaimSpec, ObjectMeta, VolumeResourceRequirements, VolumeMount


@script(image="ghcr.io/acme-matsci/dft:2024.10", inputs=[Parameter(name="functional")],
        volume_mounts=[VolumeMount(name="scratch", mount_path="/scratch")])
def relax():
    import glob
    import os
    import zarr
    pseudo = zarr.open("s3://acme-matsci/pseudo/sssp-1.3.zarr", mode="r")
    cifs = glob.glob("/scratch/cifs/*.cif")
    out = "/scratch/relax/{{inputs.parameters.functional}}"
    os.makedirs(out, exist_ok=True)
    for c in cifs:
        open(os.path.join(out, os.path.basename(c) + ".json"), "w").write("{}")


with WorkflowTemplate(
    name="mace-finetune-dft",
    entrypoint="main",
    arguments=[Parameter(name="chemsys", value="Li-Fe-P-O")],
    volume_claim_templates=[PersistentVolumeClaim(
        metadata=ObjectMeta(name="scratch"),
        spec=PersistentVolumeClaimSpec(access_modes=["ReadWriteOnce"],
                                       resources=VolumeResourceRequirements(requests={"storage": "200Gi"})))],
) as w:
    fetch = Container(
        name="fetch-structures",
        image="amazon/aws-cli:2.18.0",
        command=["aws", "s3", "sync"],
        args=["s3://acme-matsci/mp-2024/cifs/{{workflow.parameters.chemsys}}/", "/scratch/cifs/"],
        volume_mounts=[VolumeMount(name="scratch", mount_path="/scratch")],
    )
    train = Container(
        name="train-mace",
        image="ghcr.io/acme-matsci/mace:0.3.6-cu121",
        command=["python", "-m", "mace.cli.run_train"],
        args=["--data-dir", "/scratch/relax",
              "--init-from", "s3://acme-matsci-models/mace-mp-0/medium.model",
              "--output-dir", "s3://acme-matsci-models/mace-ft/{{workflow.parameters.chemsys}}/"],
        volume_mounts=[VolumeMount(name="scratch", mount_path="/scratch", read_only=True)],
    )
    with Steps(name="main"):
        fetch()
        relax(with_items=["PBE", "r2SCAN"], arguments={"functional": "{{item}}"})
        train()

open(__file__.replace(".py", ".yaml"), "w").write(w.to_yaml())
