# ruff: noqa
"""Snow water equivalent (SWE) nowcast for a river basin: MinIO endpoint via env, loop over stations listed at
run time, existing MODIS cache PVC named by a parameter, python -c with sys.argv, warm start from last year's model."""
from typing import List

from kfp import compiler, dsl, kubernetes
from kfp.dsl import Dataset, Input, Output

PY = "registry.hydro.example.org/swe/py:2025.03"
MINIO = "http://minio.hydro-data.svc.cluster.local:9000"


@dsl.component(base_image=PY)
def list_stations(basin: str) -> List[str]:
    import json
    import os

    import boto3

    s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
    body = s3.get_object(Bucket="hydro-snotel", Key=f"meta/{basin}/stations.json")["Body"].read()
    return [s["triplet"].replace(":", "_") for s in json.loads(body) if s["active"]]


@dsl.container_component
def fetch_station(station: str, water_year: int, obs: Output[Dataset]):
    return dsl.ContainerSpec(
        image=PY,
        command=["python", "-c",
                 "import sys, pandas as pd; df = pd.read_parquet(sys.argv[1]); "
                 "df[df.qc_flag == 'V'].to_parquet(sys.argv[2])"],
        args=[dsl.ConcatPlaceholder(["s3://hydro-snotel/daily/wy", water_year, "/", station, ".parquet"]), obs.path],
    )


@dsl.container_component
def modis_snowcover(basin: str, water_year: int, sca: Output[Dataset]):
    return dsl.ContainerSpec(
        image="registry.hydro.example.org/swe/raster:2025.03",
        command=["python", "-m", "swe.modis_sca"],
        args=["--tiles", dsl.ConcatPlaceholder(["/modis/mod10a1/", basin]),
              "--dem", dsl.ConcatPlaceholder(["s3://hydro-terrain/dem/", basin, "_30m.tif"]),
              "--year", water_year, "--out", sca.path],
    )


@dsl.component(base_image=PY)
def fit_swe(obs: List[Dataset], sca: Input[Dataset], basin: str, water_year: int, prior_model: str) -> float:
    import joblib
    import fsspec
    import pandas as pd
    from swe.model import fit

    df = pd.concat([pd.read_parquet(o.path) for o in obs])
    with fsspec.open(prior_model, "rb") as f:
        prior = joblib.load(f)
    model, rmse = fit(df, pd.read_parquet(sca.path), warm_start=prior)
    with fsspec.open(f"s3://hydro-models/swe/{basin}/wy{water_year}/model.pkl", "wb") as f:
        joblib.dump(model, f)
    return rmse


@dsl.pipeline(name="swe-nowcast")
def swe_nowcast(basin: str = "upper-colorado", water_year: int = 2025, modis_pvc: str = "modis-mod10a1-cache",
                prior_model: str = "s3://hydro-models/swe/upper-colorado/wy2024/model.pkl"):
    ls = list_stations(basin=basin)
    ls.set_env_variable("AWS_ENDPOINT_URL", MINIO)
    kubernetes.use_secret_as_env(ls, secret_name="hydro-minio", secret_key_to_env={"ak": "AWS_ACCESS_KEY_ID", "sk": "AWS_SECRET_ACCESS_KEY"})
    with dsl.ParallelFor(ls.output, parallelism=8) as st:
        fs = fetch_station(station=st, water_year=water_year)
        fs.set_env_variable("AWS_ENDPOINT_URL", MINIO)
        kubernetes.use_secret_as_env(fs, secret_name="hydro-minio", secret_key_to_env={"ak": "AWS_ACCESS_KEY_ID", "sk": "AWS_SECRET_ACCESS_KEY"})
    sca = modis_snowcover(basin=basin, water_year=water_year)
    kubernetes.mount_pvc(sca, pvc_name=modis_pvc, mount_path="/modis")
    kubernetes.use_secret_as_env(sca, secret_name="hydro-minio", secret_key_to_env={"ak": "AWS_ACCESS_KEY_ID", "sk": "AWS_SECRET_ACCESS_KEY"})
    sca.set_env_variable("AWS_ENDPOINT_URL", MINIO)
    fit = fit_swe(obs=dsl.Collected(fs.outputs["obs"]), sca=sca.outputs["sca"], basin=basin, water_year=water_year,
                  prior_model=prior_model)
    fit.set_env_variable("AWS_ENDPOINT_URL", MINIO)
    kubernetes.use_secret_as_env(fit, secret_name="hydro-minio", secret_key_to_env={"ak": "AWS_ACCESS_KEY_ID", "sk": "AWS_SECRET_ACCESS_KEY"})


if __name__ == "__main__":
    compiler.Compiler().compile(swe_nowcast, __file__.replace(".py", ".yaml"))
