# ruff: noqa
"""Benthic cover segmentation for reef survey transects (Hera / Argo)."""
from hera.workflows import (DAG, Artifact, Container, Parameter, S3Artifact, Workflow, models as m, script)

work_vol = m.PersistentVolumeClaim(
    metadata=m.ObjectMeta(name="work"),
    spec=m.PersistentVolumeClaimSpec(access_modes=["ReadWriteOnce"], storage_class_name="gp3",
                                     resources=m.VolumeResourceRequirements(requests={"storage": m.Quantity("150Gi")})),
)
work_mount = [m.VolumeMount(name="work", mount_path="/work")]


@script(image="ghcr.io/reefwatch/benthic-seg:0.14.2",
        inputs=[Parameter(name="arch"), Parameter(name="survey")],
        volume_mounts=work_mount,
        resources=m.ResourceRequirements(limits={"nvidia.com/gpu": "1", "memory": "40Gi"}))
def train_segmenter(arch: str, survey: str):
    import subprocess
    subprocess.run(["python", "-m", "benthic_seg.train", "--arch", arch,
                    "--images", "/work/img", "--points", "/work/labels/coralnet_points.csv",
                    "--label-set", "/work/labels/labelset.json", "--epochs", "40", "--out", "/work/runs/" + arch], check=True)
    subprocess.run(["aws", "s3", "sync", "/work/runs/" + arch, f"s3://reefwatch-models/{survey}/{arch}/"], check=True)


with Workflow(
    generate_name="benthic-cover-",
    entrypoint="main",
    arguments=[Parameter(name="survey", value="gbr-2025-q2"),
               Parameter(name="holdout", value="s3://reefwatch-labels/holdout/heron-island-2024/")],
    volume_claim_templates=[work_vol],
    on_exit="notify",
    service_account_name="reefwatch-runner",
) as w:
    stage = Container(
        name="stage-imagery", image="peakcom/s5cmd:v2.2.2",
        args=["cp", "s3://reefwatch-imagery/transects/{{workflow.parameters.survey}}/*.jpg", "/work/img/"],
        volume_mounts=work_mount,
    )
    labels = Container(
        name="fetch-annotations", image="busybox:1.36",
        command=["sh", "-c"],
        args=["mkdir -p /work/labels && cp /in/coralnet_points.csv /in/labelset.json /work/labels/"],
        inputs=[S3Artifact(name="points", path="/in/coralnet_points.csv", bucket="reefwatch-labels", key="annotations/gbr-2025-q2/coralnet_points.csv",
                           endpoint="s3.amazonaws.com", region="ap-southeast-2"),
                S3Artifact(name="labelset", path="/in/labelset.json", bucket="reefwatch-labels", key="labelsets/benthic-v4.json",
                           endpoint="s3.amazonaws.com", region="ap-southeast-2")],
        volume_mounts=work_mount,
    )
    evaluate = Container(
        name="evaluate", image="ghcr.io/reefwatch/benthic-seg:0.14.2",
        command=["python", "-m", "benthic_seg.evaluate"],
        args=["--holdout", "{{workflow.parameters.holdout}}",
              "--runs", "/work/runs", "--report", "/work/report.json"],
        volume_mounts=work_mount,
        outputs=[Artifact(name="report", path="/work/report.json")],
    )
    notify = Container(
        name="notify", image="curlimages/curl:8.7.1", command=["sh", "-c"],
        args=['curl -sf -X POST "$TEAMS_WEBHOOK" -d "{\\"text\\": \\"benthic-cover {{workflow.name}} {{workflow.status}}\\"}"'],
    )
    with DAG(name="main"):
        s = stage()
        l = labels()
        t = train_segmenter(arguments={"arch": "{{item}}", "survey": "{{workflow.parameters.survey}}"},
                            with_items=["segformer-b2", "mask2former-swin-t"])
        e = evaluate()
        [s, l] >> t >> e

open(__file__.replace(".py", ".yaml"), "w").write(w.to_yaml())
