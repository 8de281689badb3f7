# ruff: noqa
"""Hake/krill echosounder classification from NOAA EK60 raw files (KFP v1)."""
import kfp
from kfp import dsl
from kubernetes.client.models import V1EnvVar
from kfp.components import create_component_from_func


def list_cruises(ship: str, since_year: int) -> list:
    import boto3
    from botocore import UNSIGNED
    from botocore.config import Config
    s3 = boto3.client("s3", config=Config(signature_version=UNSIGNED))
    cruises = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket="noaa-wcsd-pds", Prefix=f"data/raw/{ship}/", Delimiter="/"):
        for cp in page.get("CommonPrefixes", []):
            name = cp["Prefix"].split("/")[-2]
            if name[:4].isdigit() and int(name[:4]) >= since_year:
                cruises.append(name)
    return cruises


def train_classifier(ship: str, labels_root: str, min_f1: float) -> float:
    import os
    import boto3
    import joblib
    import pandas as pd
    import s3fs
    import xarray as xr
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.model_selection import cross_val_score
    endpoint = os.environ.get("S3_ENDPOINT", "http://ceph-rgw.fisheries.svc:7480")
    fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": endpoint})
    frames = []
    for store in fs.glob(f"fish-zarr/{ship}/*.zarr"):
        sv = xr.open_zarr(fs.get_mapper(store))
        frames.append(sv["Sv"].mean("ping_time").to_dataframe().reset_index())
    X = pd.concat(frames)
    catch = pd.read_csv(os.path.join(labels_root, "trawl_catch_2019_2023.csv"),
                        storage_options={"client_kwargs": {"endpoint_url": endpoint}})
    data = X.merge(catch, on=["cruise", "transect"])
    clf = RandomForestClassifier(n_estimators=400, n_jobs=-1)
    f1 = float(cross_val_score(clf, data.drop(columns=["species"]), data.species, scoring="f1_macro", cv=5).mean())
    clf.fit(data.drop(columns=["species"]), data.species)
    joblib.dump(clf, "/tmp/rf.joblib")
    boto3.client("s3", endpoint_url=endpoint).upload_file("/tmp/rf.joblib", "fish-models", f"{ship}/rf.joblib")
    return f1


list_op = create_component_from_func(list_cruises, base_image="ghcr.io/fishacoustics/py:2025.05")
train_op = create_component_from_func(train_classifier, base_image="ghcr.io/fishacoustics/py:2025.05")


def convert_op(ship, cruise):
    return dsl.ContainerOp(
        name="convert-raw",
        image="ghcr.io/fishacoustics/echopype:0.9.0",
        command=["echopype-convert"],
        arguments=["--sonar-model", "EK60",
                   "--input", f"s3://noaa-wcsd-pds/data/raw/{ship}/{cruise}/EK60/",
                   "--output", f"s3://fish-zarr/{ship}/{cruise}.zarr",
                   "--anon-input"],
    )


def publish_op(ship):
    return dsl.ContainerOp(
        name="publish-model",
        image="amazon/aws-cli:2.17.0",
        command=["bash", "-c"],
        arguments=['''set -eu
SHIP="$0"
SRC="s3://fish-models/${SHIP}/rf.joblib"
for dst in "s3://fish-serving/${SHIP}/current/" "s3://fish-serving/${SHIP}/history/$(date +%Y%m%d)/"; do
  aws --endpoint-url "$S3_ENDPOINT" s3 cp "$SRC" "$dst"
done
''', ship],
    ).add_env_variable(V1EnvVar(name="S3_ENDPOINT", value="http://ceph-rgw.fisheries.svc:7480"))


@dsl.pipeline(name="fish-acoustics", description="EK60 -> zarr -> species classifier")
def fish(ship: str = "Bell_M._Shimada", since_year: int = 2019,
         labels_root: str = "s3://fish-labels/nwfsc", min_f1: float = 0.8):
    cr = list_op(ship, since_year)
    with dsl.ParallelFor(cr.output, parallelism=6) as cruise:
        conv = convert_op(ship, cruise)
        conv.set_retry(2)
    tr = train_op(ship, labels_root, min_f1).after(conv)
    tr.container.add_env_variable(V1EnvVar(name="S3_ENDPOINT", value="http://ceph-rgw.fisheries.svc:7480"))
    with dsl.Condition(tr.output >= min_f1, name="good-f1"):
        publish_op(ship)


if __name__ == "__main__":
    kfp.compiler.Compiler().compile(fish, __file__.replace(".py", ".yaml"))
