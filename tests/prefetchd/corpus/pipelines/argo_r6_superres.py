# ruff: noqa
"""Image super-resolution (Hera, WorkflowTemplate, steps): an S3 input artifact for the
HR validation set, an existing read-only PVC with subPath for DIV2K, a parallel group,
withItems over dicts (scale, checkpoint), a torch script reading through s3fs, onExit."""
from hera.workflows import Script, Step, Artifact, Container, Parameter, S3Artifact, Steps, WorkflowTemplate, script
from hera.workflows.models import PersistentVolumeClaimVolumeSource, Volume, VolumeMount

DIV2K = VolumeMount(name="div2k", mount_path="/data/div2k", sub_path="DIV2K_v1", read_only=True)


FINETUNE_SRC = """\
import subprocess
import s3fs
import torch
fs = s3fs.S3FileSystem()
with fs.open("{{inputs.parameters.init_ckpt}}", "rb") as f:
    state = torch.load(f, map_location="cpu")
torch.save(state, "/tmp/init.pth")
subprocess.check_call(["python", "train.py", "--hr-dir", "/data/div2k/train_HR",
                       "--scale", "{{inputs.parameters.scale}}", "--resume", "/tmp/init.pth",
                       "--save-dir", "/tmp/out"])
fs.put("/tmp/out/final.pth", "{{inputs.parameters.out_prefix}}/x{{inputs.parameters.scale}}/final.pth")
"""


with WorkflowTemplate(
    name="esrgan-superres",
    entrypoint="main",
    on_exit="cleanup",
    arguments=[Parameter(name="out_prefix", value="s3://acme-vision-models/realesrgan/ft-2025-04"),
               Parameter(name="div2k_claim", value="div2k-ro")],
    volumes=[Volume(name="div2k", persistent_volume_claim=PersistentVolumeClaimVolumeSource(
        claim_name="{{workflow.parameters.div2k_claim}}", read_only=True))],
) as w:
    Script(name="finetune-esrgan", image="ghcr.io/acme-vision/sr:1.3.0-cu121", command=["python"],
           source=FINETUNE_SRC,
           inputs=[Parameter(name="scale"), Parameter(name="init_ckpt"), Parameter(name="out_prefix")],
           volume_mounts=[DIV2K])
    degrade = Container(
        name="synth-degradations",
        image="ghcr.io/acme-vision/sr:1.3.0-cu121",
        command=["python", "degrade.py"],
        args=["--hr-dir", "/data/div2k/train_HR", "--kernel-bank", "s3://acme-vision/sr/kernels/realesrgan-kernels.npz",
              "--stats-out", "/tmp/stats.json"],
        volume_mounts=[DIV2K],
    )
    perceptual = Container(
        name="fetch-vgg",
        image="amazon/aws-cli:2.17.0",
        command=["aws", "s3", "cp", "s3://acme-vision-models/vgg19/vgg19-dcbb9e9d.pth", "/tmp/vgg19.pth"],
    )
    evaluate = Container(
        name="evaluate-psnr",
        image="ghcr.io/acme-vision/sr:1.3.0-cu121",
        inputs=[S3Artifact(name="val", path="/data/val", bucket="acme-vision", key="sr/benchmarks/set14-urban100/")],
        command=["python", "eval_sr.py"],
        args=["--val-dir", "/data/val", "--weights", "{{workflow.parameters.out_prefix}}/x4/final.pth",
              "--report", "{{workflow.parameters.out_prefix}}/eval/psnr.csv"],
    )
    cleanup = Container(
        name="cleanup",
        image="amazon/aws-cli:2.17.0",
        command=["sh", "-c"],
        args=["aws s3 rm --recursive s3://acme-vision-scratch/esrgan/{{workflow.name}}/ || true"],
    )
    with Steps(name="main") as s:
        with s.parallel():
            degrade()
            perceptual()
        Step(
            name="finetune", template="finetune-esrgan",
            arguments={"scale": "{{item.scale}}", "init_ckpt": "{{item.ckpt}}",
                       "out_prefix": "{{workflow.parameters.out_prefix}}"},
            with_items=[{"scale": "2", "ckpt": "s3://acme-vision-models/realesrgan/RealESRGAN_x2plus.pth"},
                        {"scale": "4", "ckpt": "s3://acme-vision-models/realesrgan/RealESRGAN_x4plus.pth"}])
        evaluate()

open(__file__.rsplit(".", 1)[0] + ".yaml", "w").write(w.to_yaml())
