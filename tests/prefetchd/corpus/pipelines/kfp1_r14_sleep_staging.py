# ruff: noqa
"""Sleep-stage classifier (W/N1/N2/N3/REM) from overnight PSG EEG.

Legacy KFP v1 pipeline still running on the neuro team's cluster.
"""
import kfp
from kfp import dsl
from kfp.onprem import use_k8s_secret


def rclone_env(op):
    op.container.add_env_variable(kfp.dsl._container_op.V1EnvVar(name="RCLONE_CONFIG_PSG_TYPE", value="s3"))
    op.container.add_env_variable(kfp.dsl._container_op.V1EnvVar(name="RCLONE_CONFIG_PSG_PROVIDER", value="AWS"))
    op.container.add_env_variable(kfp.dsl._container_op.V1EnvVar(name="RCLONE_CONFIG_PSG_ENV_AUTH", value="true"))
    return op


@dsl.pipeline(name="sleep-staging-train", description="5-fold CV of a U-Sleep style stager")
def sleep_staging(cohort: str = "sleep-cassette", model_bucket: str = "neurolab-models", min_kappa: float = 0.75):
    vol = dsl.VolumeOp(name="psg-volume", resource_name="psg", size="200Gi",
                       modes=dsl.VOLUME_MODE_RWO, storage_class="gp3")

    download = dsl.ContainerOp(
        name="download-edf",
        image="rclone/rclone:1.67",
        command=["rclone"],
        arguments=["copy", f"psg:neurolab-psg/psg/{cohort}/edf", "/mnt/psg/edf",
                   "--transfers", "32", "--checkers", "64", "--include", "*.edf"],
        pvolumes={"/mnt/psg": vol.volume},
    )
    rclone_env(download).apply(use_k8s_secret("psg-s3-creds", {"AWS_ACCESS_KEY_ID": "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY": "AWS_SECRET_ACCESS_KEY"}))

    preprocess = dsl.ContainerOp(
        name="epoch-and-filter",
        image="ghcr.io/neurolab/psg-prep:0.9.3",
        command=["python", "-m", "psg_prep.epoch"],
        arguments=["--edf-dir", "/mnt/psg/edf",
                   "--hypnograms", f"s3://neurolab-psg/psg/{cohort}/hypnograms.parquet",
                   "--channels", "Fpz-Cz,Pz-Oz,EOG", "--resample-hz", "100",
                   "--bandpass", "0.3,35", "--out", "/mnt/psg/epochs"],
        pvolumes={"/mnt/psg": download.pvolume},
    )

    with dsl.ParallelFor([0, 1, 2, 3, 4]) as fold:
        train = dsl.ContainerOp(
            name="train-fold",
            image="ghcr.io/neurolab/usleep-train:1.3.0-cu121",
            command=["python", "-m", "usleep.train"],
            arguments=["--epochs-dir", "/mnt/psg/epochs", "--fold", fold, "--n-folds", "5",
                       "--out", f"s3://{model_bucket}/usleep/{cohort}/fold-{fold}/"],
            pvolumes={"/mnt/psg": preprocess.pvolume},
        )
        train.set_gpu_limit(1).set_memory_limit("32G")

    aggregate = dsl.ContainerOp(
        name="aggregate-cv",
        image="python:3.11-slim",
        command=["sh", "-c"],
        arguments=[
            "pip install -q boto3==1.34.149 && python - <<'PY'\n"
            "import boto3, json, statistics, sys\n"
            "s3 = boto3.client('s3')\n"
            "k = []\n"
            "for f in range(5):\n"
            f"    o = s3.get_object(Bucket='{model_bucket}', Key=f'usleep/{cohort}/fold-{{f}}/metrics.json')\n"
            "    k.append(json.load(o['Body'])['cohen_kappa'])\n"
            "m = statistics.mean(k)\n"
            "print('mean kappa', m)\n"
            "open('/tmp/kappa', 'w').write(str(m))\n"
            "PY"
        ],
        file_outputs={"kappa": "/tmp/kappa"},
    ).after(train)

    with dsl.Condition(aggregate.outputs["kappa"] >= min_kappa):
        dsl.ContainerOp(
            name="register-model",
            image="amazon/aws-cli:2.17.0",
            command=["sh", "-c"],
            arguments=[f"aws s3 cp --recursive s3://{model_bucket}/usleep/{cohort}/fold-0/ "
                       f"s3://{model_bucket}/registry/usleep/{cohort}/latest/"],
        )


if __name__ == "__main__":
    kfp.compiler.Compiler().compile(sleep_staging, __file__.replace(".py", ".yaml"))
