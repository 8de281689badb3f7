# ruff: noqa
"""County-level corn yield model from Sentinel-2 NDVI composites.

Agronomy analytics team, weekly run during the growing season.
"""
from kfp import compiler, dsl, kubernetes
from kfp.dsl import Dataset, Input, Model, Output


@dsl.container_component
def stage_imagery(tiles_root: str, season: str):
    # Only the NDVI composites are needed; the raw bands stay in the bucket.
    return dsl.ContainerSpec(
        image="amazon/aws-cli:2.17.0",
        command=["sh", "-c"],
        args=[
            'aws s3 sync "$0/$1/" "/mnt/imagery/$1/" --exclude "*" --include "*_NDVI.tif" --no-progress',
            tiles_root,
            season,
        ],
    )


@dsl.component(
    base_image="python:3.11-slim",
    packages_to_install=["pandas==2.2.2", "s3fs==2024.6.1", "pyarrow==16.1.0"],
)
def fetch_yield_history(yield_bucket: str, history: Output[Dataset]):
    import pandas as pd

    df = pd.read_csv(f"s3://{yield_bucket}/usda-nass/county_yields_2010_2024.csv")
    df = df[(df["commodity"] == "CORN") & (df["unit"] == "BU / ACRE")]
    df = df.rename(columns={"value": "yield_bu_ac"})
    df[["state_fips", "county_fips", "year", "yield_bu_ac"]].to_parquet(history.path, index=False)


@dsl.component(
    base_image="ghcr.io/agri-insights/geo-py:2025.03",
    packages_to_install=["rasterstats==0.19.0"],
)
def build_features(
    season: str,
    imagery_root: str,
    soil: Input[Dataset],
    yields: Input[Dataset],
    features: Output[Dataset],
):
    import glob
    import os

    import geopandas as gpd
    import pandas as pd
    from rasterstats import zonal_stats

    counties = gpd.read_parquet(soil.path)
    rows = []
    for tif in sorted(glob.glob(os.path.join(imagery_root, season, "*_NDVI.tif"))):
        week = os.path.basename(tif).split("_")[0]
        stats = zonal_stats(counties, tif, stats=["mean", "max", "std"])
        for fips, st in zip(counties["county_fips"], stats):
            rows.append({"county_fips": fips, "week": week, **{f"ndvi_{k}": v for k, v in st.items()}})
    ndvi = pd.DataFrame(rows).pivot_table(index="county_fips", columns="week")
    ndvi.columns = [f"{a}_{b}" for a, b in ndvi.columns]
    hist = pd.read_parquet(yields.path)
    out = counties.drop(columns="geometry").merge(ndvi.reset_index(), on="county_fips")
    out = out.merge(hist, on="county_fips", how="left")
    out.to_parquet(features.path, index=False)


@dsl.component(
    base_image="python:3.11-slim",
    packages_to_install=["pandas==2.2.2", "pyarrow==16.1.0", "lightgbm==4.3.0"],
)
def train_yield_model(features: Input[Dataset], model: Output[Model], num_rounds: int = 600):
    import lightgbm as lgb
    import pandas as pd

    df = pd.read_parquet(features.path)
    train = df[df["year"] < 2024]
    y = train.pop("yield_bu_ac")
    booster = lgb.train(
        {"objective": "regression", "learning_rate": 0.03, "num_leaves": 31},
        lgb.Dataset(train.drop(columns=["county_fips", "state_fips"]), y),
        num_boost_round=num_rounds,
    )
    booster.save_model(model.path)


@dsl.component(
    base_image="python:3.11-slim",
    packages_to_install=["pandas==2.2.2", "s3fs==2024.6.1", "pyarrow==16.1.0", "lightgbm==4.3.0"],
)
def evaluate_county(county: str, yield_bucket: str, model: Input[Model]) -> float:
    import lightgbm as lgb
    import numpy as np
    import pandas as pd

    holdout = pd.read_parquet(f"s3://{yield_bucket}/holdout/2024/{county}.parquet")
    booster = lgb.Booster(model_file=model.path)
    y = holdout.pop("yield_bu_ac")
    pred = booster.predict(holdout.drop(columns=["county_fips", "state_fips"]))
    rmse = float(np.sqrt(np.mean((pred - y) ** 2)))
    print(f"{county}: RMSE {rmse:.2f} bu/ac")
    return rmse


@dsl.container_component
def export_model(model: Input[Model], model_bucket: str, season: str):
    return dsl.ContainerSpec(
        image="amazon/aws-cli:2.17.0",
        command=["sh", "-c"],
        args=['aws s3 cp "$0" "s3://$1/crop-yield/$2/model.txt"', model.path, model_bucket, season],
    )


@dsl.pipeline(name="corn-yield-county-model")
def crop_yield_pipeline(
    tiles_root: str = "s3://agri-sentinel-tiles/ndvi",
    season: str = "2025",
    yield_bucket: str = "agri-yield-truth",
    model_bucket: str = "agri-ml-models",
):
    pvc = kubernetes.CreatePVC(
        pvc_name_suffix="-crop-imagery",
        access_modes=["ReadWriteOnce"],
        size="200Gi",
        storage_class_name="gp3",
    )

    stage = stage_imagery(tiles_root=tiles_root, season=season)
    kubernetes.mount_pvc(stage, pvc_name=pvc.outputs["name"], mount_path="/mnt/imagery")

    history = fetch_yield_history(yield_bucket=yield_bucket)

    soil = dsl.importer(
        artifact_uri="s3://agri-ref-data/soilgrids/us-midwest/county_soil_props_250m.parquet",
        artifact_class=Dataset,
        reimport=False,
    )

    feats = build_features(
        season=season,
        imagery_root="/mnt/imagery",
        soil=soil.output,
        yields=history.outputs["history"],
    ).after(stage)
    kubernetes.mount_pvc(feats, pvc_name=pvc.outputs["name"], mount_path="/mnt/imagery")
    feats.set_memory_limit("16G").set_cpu_limit("4")

    train = train_yield_model(features=feats.outputs["features"])

    with dsl.ParallelFor(items=["story-ia", "polk-ia", "mclean-il"], parallelism=3) as county:
        evaluate_county(county=county, yield_bucket=yield_bucket, model=train.outputs["model"])

    export_model(model=train.outputs["model"], model_bucket=model_bucket, season=season)

    kubernetes.DeletePVC(pvc_name=pvc.outputs["name"]).after(feats)


if __name__ == "__main__":
    compiler.Compiler().compile(crop_yield_pipeline, __file__.replace(".py", ".yaml"))
