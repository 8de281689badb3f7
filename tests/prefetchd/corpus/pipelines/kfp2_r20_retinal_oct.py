# ruff: noqa
"""Retinal OCT AMD/DME classifier: CreatePVC scratch, secrets as env, external-site evaluation loop."""
from kfp import compiler, dsl, kubernetes
from kfp.dsl import Dataset, Input, Model, Output

PY = "ghcr.io/eyelab/oct-py:2025.06"


@dsl.container_component
def stage_volumes(scan_bucket: str, cohort: str, release: str):
    return dsl.ContainerSpec(
        image="amazon/aws-cli:2.17.0",
        command=["sh", "-c"],
        args=['aws s3 sync "$0/$1/$2/" /work/vol/ --exclude "*" --include "*.dcm" --only-show-errors && du -sh /work/vol',
              scan_bucket, cohort, release],
    )


@dsl.component(base_image=PY)
def split_patients(label_uri: str, release: str, seed: int, splits: Output[Dataset]):
    import pandas as pd
    from sklearn.model_selection import GroupShuffleSplit

    df = pd.read_csv(label_uri)
    gss = GroupShuffleSplit(n_splits=1, test_size=0.15, random_state=seed)
    tr, va = next(gss.split(df, groups=df["patient_id"]))
    df["split"] = "train"
    df.loc[df.index[va], "split"] = "val"
    df.to_csv(splits.path, index=False)
    df.to_csv(f"s3://eyelab-labels/oct/splits_{release}.csv", index=False)


@dsl.container_component
def train_classifier(splits: Input[Dataset], model: Output[Model], epochs: int):
    return dsl.ContainerSpec(
        image="ghcr.io/eyelab/retfound-train:1.4.0-cu121",
        command=["torchrun", "--nproc_per_node=4", "-m", "retfound.finetune"],
        args=["--volumes", "/work/vol", "--splits", splits.path,
              "--pretrained", "s3://eyelab-models/retfound/RETFound_oct_weights.pth",
              "--epochs", epochs, "--output-dir", model.path],
    )


@dsl.component(base_image=PY)
def eval_external(model: Input[Model], site: str, test_uri: str, release: str):
    import json

    import fsspec
    from eyelab.eval import evaluate

    fs = fsspec.filesystem("s3")
    fs.get(test_uri, "/tmp/ext/", recursive=True)
    metrics = evaluate(model.path + "/best.pt", "/tmp/ext/")
    with fsspec.open(f"s3://eyelab-results/oct/{release}/{site}/metrics.json", "w") as f:
        json.dump(metrics, f)


SITES = [{"site": "moorfields", "test_uri": "s3://eyelab-external/moorfields/oct-test-2024/"},
         {"site": "duke-dme", "test_uri": "s3://eyelab-external/duke/dme-srinivasan/"}]


@dsl.pipeline(name="retinal-oct-classifier")
def retinal_oct(cohort: str = "ukb-oct", scan_bucket: str = "s3://eyelab-oct-raw", release: str = "2025.2",
                label_uri: str = "s3://eyelab-labels/oct/gradings_v7.csv", seed: int = 17, epochs: int = 30):
    pvc = kubernetes.CreatePVC(pvc_name_suffix="-oct-work", access_modes=["ReadWriteOnce"], size="300Gi",
                               storage_class_name="gp3")
    stage = stage_volumes(scan_bucket=scan_bucket, cohort=cohort, release=release)
    kubernetes.mount_pvc(stage, pvc_name=pvc.outputs["name"], mount_path="/work")
    kubernetes.use_secret_as_env(stage, secret_name="eyelab-s3-creds",
                                 secret_key_to_env={"access_key": "AWS_ACCESS_KEY_ID", "secret_key": "AWS_SECRET_ACCESS_KEY"})
    sp = split_patients(label_uri=label_uri, release=release, seed=seed)
    tr = train_classifier(splits=sp.outputs["splits"], epochs=epochs).after(stage)
    tr.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(4)
    kubernetes.mount_pvc(tr, pvc_name=pvc.outputs["name"], mount_path="/work")
    kubernetes.use_secret_as_env(tr, secret_name="eyelab-s3-creds",
                                 secret_key_to_env={"access_key": "AWS_ACCESS_KEY_ID", "secret_key": "AWS_SECRET_ACCESS_KEY"})
    kubernetes.add_toleration(tr, key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")
    with dsl.ParallelFor(SITES, parallelism=2) as s:
        ev = eval_external(model=tr.outputs["model"], site=s.site, test_uri=s.test_uri, release=release)
        kubernetes.use_secret_as_env(ev, secret_name="eyelab-s3-creds",
                                     secret_key_to_env={"access_key": "AWS_ACCESS_KEY_ID", "secret_key": "AWS_SECRET_ACCESS_KEY"})
    kubernetes.DeletePVC(pvc_name=pvc.outputs["name"]).after(ev)


if __name__ == "__main__":
    compiler.Compiler().compile(retinal_oct, __file__.replace(".py", ".yaml"))
