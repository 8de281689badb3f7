# ruff: noqa
"""Broiler-house welfare monitoring (gait / panting) from ceiling cameras and microphones.
Per farm, the week's video clips and audio are pulled onto a shared volume, packed into webdataset tar shards with the
week's annotations and uploaded, a VideoMAE model is fine-tuned on 4 GPUs from the shards, the panting head is
evaluated on a Hugging Face parquet holdout, and when its F1 clears the bar the model is registered. A run record is
written however the run ends."""
import kfp
from kfp import dsl
from kfp.aws import use_aws_secret
from kfp.components import create_component_from_func

WF_IMAGE = "ghcr.io/agrisense/welfare-vision:0.14.2"
FARMS = [{"farm": "f07", "bucket": "agri-cams-east"},
         {"farm": "f12", "bucket": "agri-cams-east"},
         {"farm": "f19", "bucket": "agri-cams-west"}]


def pull_audio(farm: str, bucket: str, week: str):
    import fsspec

    fs = fsspec.filesystem("s3")
    fs.get(f"s3://{bucket}/farms/{farm}/audio/{week}/", f"/clips/{farm}/audio/", recursive=True)


def make_shards(week: str, shard_size: int):
    import glob
    import os
    import subprocess

    import pandas as pd
    import webdataset as wds

    ann = pd.read_csv(f"s3://agri-ml-labels/welfare/{week}/annotations.csv").set_index("clip_id")
    os.makedirs("/tmp/shards", exist_ok=True)
    with wds.ShardWriter("/tmp/shards/train-%06d.tar", maxcount=shard_size) as sink:
        for path in sorted(glob.glob("/clips/*/video/*.mp4")):
            clip = os.path.splitext(os.path.basename(path))[0]
            if clip not in ann.index:
                continue
            with open(path, "rb") as f:
                sink.write({"__key__": clip, "mp4": f.read(), "json": ann.loc[clip].to_json()})
    subprocess.run(["aws", "s3", "sync", "/tmp/shards/", f"s3://agri-ml-data/welfare/{week}/shards/", "--only-show-errors"],
                   check=True)


def eval_panting(week: str) -> float:
    import s3fs
    import torch
    from datasets import load_dataset

    from welfare.heads import load_panting_head, f1_score

    fs = s3fs.S3FileSystem()
    fs.get(f"agri-ml-models/welfare/{week}/", "/tmp/model/", recursive=True)
    head = load_panting_head("/tmp/model", device="cuda")
    hold = load_dataset("parquet", data_files={"test": "s3://agri-ml-labels/welfare/panting-holdout/*.parquet"},
                        split="test", storage_options={"anon": False})
    with torch.no_grad():
        return float(f1_score(head, hold))


def report_run(week: str, farms: str):
    import json

    from smart_open import open as sopen

    with sopen(f"s3://agri-ml-audit/welfare/{week}.json", "w") as f:
        json.dump({"week": week, "farms": json.loads(farms)}, f)


audio_op = create_component_from_func(pull_audio, base_image=WF_IMAGE)
shards_op = create_component_from_func(make_shards, base_image=WF_IMAGE)
eval_op = create_component_from_func(eval_panting, base_image=WF_IMAGE)
report_op = create_component_from_func(report_run, base_image="ghcr.io/agrisense/py-tools:3.11")


@dsl.pipeline(name="broiler-welfare-weekly", description="Gait and panting detection for broiler houses")
def welfare(week: str = "2025-W47",
            base_model: str = "s3://agri-ml-models/hf/videomae-base-finetuned-kinetics/",
            shard_size: int = 256,
            min_f1: float = 0.7):
    record = report_op(week=week, farms='["f07", "f12", "f19"]').apply(use_aws_secret("agri-aws"))

    with dsl.ExitHandler(record):
        vol = dsl.VolumeOp(name="clips-volume", resource_name="welfare-clips", size="400Gi",
                           modes=dsl.VOLUME_MODE_RWM, storage_class="efs-sc")

        with dsl.ParallelFor(FARMS) as item:
            clips = dsl.ContainerOp(
                name="pull-clips",
                image="amazon/aws-cli:2.17.0",
                command=["sh", "-c"],
                arguments=['aws s3 sync "s3://$0/farms/$1/video/$2/" "/clips/$1/video/" --exclude "*.tmp" --only-show-errors',
                           item.bucket, item.farm, week],
                pvolumes={"/clips": vol.volume},
            ).apply(use_aws_secret("agri-aws"))
            audio = audio_op(farm=item.farm, bucket=item.bucket, week=week).add_pvolumes({"/clips": vol.volume})
            audio.apply(use_aws_secret("agri-aws"))

        shards = shards_op(week=week, shard_size=shard_size).add_pvolumes({"/clips": vol.volume}).after(clips, audio)
        shards.apply(use_aws_secret("agri-aws"))

        train = dsl.ContainerOp(
            name="finetune-videomae",
            image=WF_IMAGE,
            command=["torchrun", "--nproc_per_node", "4", "-m", "welfare.train"],
            arguments=["--shards", f"s3://agri-ml-data/welfare/{week}/shards/train-{{000000..000063}}.tar",
                       "--model_name_or_path", base_model,
                       "--output_dir", f"s3://agri-ml-models/welfare/{week}/",
                       "--learning_rate", "3e-5",
                       "--num_train_epochs", "8"],
        ).apply(use_aws_secret("agri-aws")).after(shards)
        train.set_gpu_limit(4)
        train.add_node_selector_constraint("node.kubernetes.io/instance-type", "g5.12xlarge")
        train.set_memory_limit("180G")

        ev = eval_op(week=week).after(train).apply(use_aws_secret("agri-aws"))
        ev.set_gpu_limit(1)

        with dsl.Condition(ev.output > min_f1):
            dsl.ContainerOp(
                name="register-model",
                image=WF_IMAGE,
                command=["python", "-m", "welfare.register"],
                arguments=["--model-uri", f"s3://agri-ml-models/welfare/{week}/",
                           "--registry", "s3://agri-ml-registry/welfare/",
                           "--stage", "production"],
            ).apply(use_aws_secret("agri-aws"))


if __name__ == "__main__":
    kfp.compiler.Compiler().compile(welfare, __file__.replace(".py", ".yaml"))
