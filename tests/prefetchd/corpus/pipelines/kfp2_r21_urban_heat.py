# ruff: noqa
"""Urban heat island: Landsat land-surface temperature regression per city and year (KFP v2 + kfp-kubernetes)."""
from typing import List
from kfp import compiler, dsl, kubernetes
from kfp.dsl import Model, Output

GEO = "ghcr.io/uhi-lab/geo-py:2025.04"


@dsl.component(base_image=GEO)
def list_scenes(lst_root: str, city: str, year: str, max_cloud: float) -> List[str]:
    import pandas as pd
    idx = pd.read_csv(f"{lst_root}/{city}/scene_index.csv")
    idx = idx[(idx.acq_year == int(year)) & (idx.cloud_cover < max_cloud)]
    return sorted(idx.scene_id.tolist())


@dsl.container_component
def fetch_scene(lst_root: str, city: str, scene: str):
    return dsl.ContainerSpec(
        image="amazon/aws-cli:2.17.0",
        command=["sh", "-c"],
        args=['mkdir -p /scratch/lst && aws s3 cp "$0/$1/$2/$2_ST_B10.TIF" /scratch/lst/ && '
              'aws s3 cp "/scratch/lst/$2_ST_B10.TIF" "s3://uhi-work/lst-cogs/$1/$2.tif"',
              lst_root, city, scene])


@dsl.container_component
def stage_aux(city: str):
    return dsl.ContainerSpec(
        image="amazon/aws-cli:2.17.0",
        command=["bash", "-c"],
        args=['set -e; CITY="$0"; mkdir -p "/aux/$CITY"; '
              'printf "%s\\n" impervious_2021 tree_canopy_2022 building_heights_2023 | '
              'xargs -P 3 -I{} aws s3 cp "s3://uhi-aux/$CITY/{}.tif" "/aux/$CITY/{}.tif"',
              city])


@dsl.component(base_image=GEO)
def fit_model(city: str, years: List[str], model: Output[Model]):
    import glob
    import joblib
    import numpy as np
    import rioxarray
    import s3fs
    from sklearn.ensemble import HistGradientBoostingRegressor
    X, y = [], []
    aux = [rioxarray.open_rasterio(p) for p in sorted(glob.glob(f"/aux/{city}/*.tif"))]
    for yr in years:
        for cog in s3fs.S3FileSystem().glob(f"uhi-work/lst-cogs/{city}/LC0*_{yr}*.tif"):
            lst = rioxarray.open_rasterio(f"s3://{cog}")
            X.append(np.stack([a.values.ravel() for a in aux], 1)); y.append(lst.values.ravel())
    reg = HistGradientBoostingRegressor().fit(np.concatenate(X), np.concatenate(y))
    joblib.dump(reg, model.path)
    s3fs.S3FileSystem().put(model.path, f"s3://uhi-models/{city}/hgb_lst.joblib")


@dsl.pipeline(name="urban-heat-island")
def urban_heat(city: str = "phoenix",
               years: List[str] = ["2019", "2021", "2023"],
               lst_root: str = "s3://uhi-landsat/c2l2-st",
               max_cloud: float = 20.0,
               aux_pvc: str = "uhi-aux-cache"):
    aux = stage_aux(city=city)
    kubernetes.mount_pvc(aux, pvc_name=aux_pvc, mount_path="/aux")
    kubernetes.use_secret_as_env(aux, secret_name="uhi-aws", secret_key_to_env={"key": "AWS_ACCESS_KEY_ID", "secret": "AWS_SECRET_ACCESS_KEY"})
    with dsl.ParallelFor(years, parallelism=3) as year:
        ls = list_scenes(lst_root=lst_root, city=city, year=year, max_cloud=max_cloud)
        with dsl.ParallelFor(ls.output, parallelism=8) as scene:
            fs = fetch_scene(lst_root=lst_root, city=city, scene=scene)
            kubernetes.empty_dir_mount(fs, volume_name="scratch", mount_path="/scratch", size_limit="20Gi")
            kubernetes.use_secret_as_env(fs, secret_name="uhi-aws", secret_key_to_env={"key": "AWS_ACCESS_KEY_ID", "secret": "AWS_SECRET_ACCESS_KEY"})
    fit = fit_model(city=city, years=years).after(fs, aux)
    kubernetes.mount_pvc(fit, pvc_name=aux_pvc, mount_path="/aux")
    kubernetes.add_toleration(fit, key="workload", operator="Equal", value="highmem", effect="NoSchedule")
    kubernetes.add_node_selector(fit, "node.kubernetes.io/instance-type", "r7i.8xlarge")


if __name__ == "__main__":
    compiler.Compiler().compile(urban_heat, __file__.replace(".py", ".yaml"))
