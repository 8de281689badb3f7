# ruff: noqa
"""Alpine glacier surface-melt segmentation from Sentinel-2 L2A + Copernicus DEM.

Stages the DEM and one month of S2 tiles per MGRS tile onto a per-run volume,
trains a U-Net against WGMS mass-balance labels, and optionally publishes the
melt-extent maps to the public bucket."""
from hera.workflows import (
    DAG,
    Artifact,
    Container,
    Parameter,
    S3Artifact,
    Workflow,
    models as m,
    script,
)


@script(
    image="ghcr.io/cryo-lab/melt-unet:0.9.3-cu121",
    inputs=[
        Parameter(name="month"),
        Parameter(name="run_tag"),
        S3Artifact(
            name="mass-balance",
            path="/inputs/mass_balance.csv",
            endpoint="s3.eu-central-1.amazonaws.com",
            bucket="cryo-lab-glams",
            key="wgms/fog-2024-06/mass_balance.csv",
            region="eu-central-1",
        ),
    ],
    volume_mounts=[m.VolumeMount(name="scratch", mount_path="/scratch")],
    resources=m.ResourceRequirements(limits={"nvidia.com/gpu": "1", "memory": "48Gi"}),
)
def train_melt_model(month: str, run_tag: str):
    import glob
    import os

    import boto3
    import pandas as pd
    import torch

    from melt_unet import UNet, S2MeltDataset

    labels = pd.read_csv("/inputs/mass_balance.csv")
    ds = S2MeltDataset(sorted(glob.glob(f"/scratch/s2/*/{month}/*.tif")), dem="/scratch/dem/alps_glo30.tif", labels=labels)
    model = UNet(in_ch=ds.n_bands + 1, n_classes=2).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    for epoch in range(40):
        for x, y in torch.utils.data.DataLoader(ds, batch_size=16, shuffle=True, num_workers=8):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x.cuda()), y.cuda())
            loss.backward()
            opt.step()
    os.makedirs("/scratch/out", exist_ok=True)
    torch.save(model.state_dict(), "/scratch/out/unet.pt")
    s3 = boto3.client("s3")
    s3.upload_file("/scratch/out/unet.pt", "cryo-lab-models", f"melt-unet/{run_tag}/unet.pt")
    model.eval()
    ds.write_predictions(model, "/scratch/maps/")


with Workflow(
    generate_name="glacier-melt-",
    entrypoint="main",
    service_account_name="cryo-pipelines",
    arguments=[
        Parameter(name="month", value="2024-08"),
        Parameter(name="run_tag", value="alps-2024-08"),
        Parameter(name="publish", value="false"),
    ],
    volume_claim_templates=[
        m.PersistentVolumeClaim(
            metadata=m.ObjectMeta(name="scratch"),
            spec=m.PersistentVolumeClaimSpec(
                access_modes=["ReadWriteOnce"],
                storage_class_name="gp3",
                resources=m.VolumeResourceRequirements(requests={"storage": m.Quantity("300Gi")}),
            ),
        )
    ],
    on_exit="notify",
) as w:
    stage_dem = Container(
        name="stage-dem",
        image="amazon/aws-cli:2.17.0",
        command=["sh", "-c"],
        args=[
            "mkdir -p /scratch/dem && aws s3 cp "
            "s3://cryo-lab-ref/dem/copernicus-glo30/alps_glo30.tif /scratch/dem/alps_glo30.tif --only-show-errors"
        ],
        volume_mounts=[m.VolumeMount(name="scratch", mount_path="/scratch")],
    )
    fetch_s2 = Container(
        name="fetch-sentinel2",
        image="peakcom/s5cmd:v2.2.2",
        inputs=[Parameter(name="mgrs_tile"), Parameter(name="month")],
        command=["/s5cmd"],
        args=[
            "--numworkers", "64",
            "cp",
            "s3://cryo-lab-sentinel2/l2a/{{inputs.parameters.mgrs_tile}}/{{inputs.parameters.month}}/*_B*.tif",
            "/scratch/s2/{{inputs.parameters.mgrs_tile}}/{{inputs.parameters.month}}/",
        ],
        volume_mounts=[m.VolumeMount(name="scratch", mount_path="/scratch")],
    )
    publish_maps = Container(
        name="publish-maps",
        image="rclone/rclone:1.67",
        inputs=[Parameter(name="month")],
        command=["rclone"],
        args=[
            "copy", "/scratch/maps/", "gcs:cryo-lab-public-maps/alps/{{inputs.parameters.month}}/",
            "--gcs-bucket-policy-only", "--transfers", "16",
        ],
        env=[m.EnvVar(name="RCLONE_CONFIG_GCS_TYPE", value="google cloud storage")],
        volume_mounts=[m.VolumeMount(name="scratch", mount_path="/scratch", read_only=True)],
    )
    notify = Container(
        name="notify",
        image="curlimages/curl:8.8.0",
        command=["sh", "-c"],
        args=[
            'curl -sS -X POST -H "Content-Type: application/json" '
            '-d "{\\"text\\": \\"glacier-melt {{workflow.name}} finished: {{workflow.status}}\\"}" "$SLACK_WEBHOOK"'
        ],
        env=[m.EnvVar(name="SLACK_WEBHOOK", value_from=m.EnvVarSource(secret_key_ref=m.SecretKeySelector(name="cryo-slack", key="webhook")))],
    )

    with DAG(name="main"):
        dem = stage_dem()
        s2 = fetch_s2(
            arguments={"mgrs_tile": "{{item}}", "month": "{{workflow.parameters.month}}"},
            with_items=["32TLS", "32TMS", "32TNS", "32TLR"],
        )
        train = train_melt_model(
            arguments={"month": "{{workflow.parameters.month}}", "run_tag": "{{workflow.parameters.run_tag}}"}
        )
        pub = publish_maps(
            arguments={"month": "{{workflow.parameters.month}}"},
            when="{{workflow.parameters.publish}} == true",
        )
        [dem, s2] >> train >> pub

if __name__ == "__main__":
    with open(__file__.replace(".py", ".yaml"), "w") as f:
        f.write(w.to_yaml())
