# ruff: noqa
"""County crop-yield forecast from Sentinel-2 NDVI (importer with metadata, If/Else + OneOf, shell staging)."""
from kfp import compiler, dsl
from kfp.dsl import Dataset, Input, Model, Output

GEO = "ghcr.io/agrisense/geo-ml:3.8.2"


@dsl.component(base_image=GEO)
def load_field_boundaries(region: str, fields: Output[Dataset]):
    import s3fs

    fs = s3fs.S3FileSystem()
    fs.get(f"agrisense-geo/fields/{region}/boundaries.parquet", fields.path)


@dsl.container_component
def stage_ndvi(region: str, season: str, ndvi: Output[Dataset]):
    return dsl.ContainerSpec(
        image="rclone/rclone:1.67",
        command=["sh", "-c"],
        args=[
            """set -eu
REGION="$0"
SEASON="$1"
DEST="$2"
SRC=":s3,provider=AWS,env_auth=true:agrisense-sentinel/l2a-ndvi/${REGION}/${SEASON}/"
mkdir -p "$DEST"
rclone copy "$SRC" "$DEST" --include "ndvi_*.tif" --transfers 32
ls "$DEST" | wc -l
""",
            region, season, ndvi.path,
        ],
    )


@dsl.component(base_image=GEO)
def predict_yield(fields: Input[Dataset], ndvi: Input[Dataset], model: Input[Model],
                  predictions: Output[Dataset]) -> float:
    import glob

    import lightgbm as lgb
    import pandas as pd

    print("scoring with", model.uri, model.metadata.get("trained_on"))
    booster = lgb.Booster(model_file=model.path)
    tiles = sorted(glob.glob(ndvi.path + "/ndvi_*.tif"))
    feats = pd.read_parquet(fields.path)
    feats["n_tiles"] = len(tiles)
    feats["yield_t_ha"] = booster.predict(feats.drop(columns=["field_id"]))
    feats.to_parquet(predictions.path)
    return float(feats["yield_t_ha"].notna().mean())


@dsl.component(base_image=GEO)
def calibrate_gbm(predictions: Input[Dataset], region: str, report: Output[Dataset]):
    import pandas as pd

    print("calibrating", predictions.uri)
    usda = pd.read_csv(f"s3://agrisense-ref/usda-nass/{region}/county_yield_2015_2024.csv")
    p = pd.read_parquet(predictions.path)
    p.merge(usda, on="county_fips").to_csv(report.path, index=False)


@dsl.component(base_image=GEO)
def climatology_fallback(region: str, report: Output[Dataset]):
    import pandas as pd

    clim = pd.read_csv("s3://agrisense-ref/climatology/county_yield_1990_2024.csv")
    clim[clim["region"] == region].groupby("county_fips").mean().to_csv(report.path)


@dsl.component(base_image=GEO)
def publish_forecast(report: Input[Dataset], region: str, season: str):
    import boto3

    boto3.client("s3").upload_file(report.path, "agrisense-forecasts", f"{region}/{season}/county_yield.csv")


@dsl.pipeline(name="county-yield-forecast")
def yield_forecast(region: str = "us-midwest", season: str = "2025", min_coverage: float = 0.8):
    fields = load_field_boundaries(region=region)
    ndvi = stage_ndvi(region=region, season=season)
    model = dsl.importer(
        artifact_uri="s3://agrisense-models/yield-lgbm/2025.05/model.txt",
        artifact_class=Model,
        reimport=False,
        metadata={"framework": "lightgbm", "trained_on": "2015-2024", "target": "yield_t_ha"},
    )
    pred = predict_yield(fields=fields.outputs["fields"], ndvi=ndvi.outputs["ndvi"], model=model.output)
    with dsl.If(pred.outputs["Output"] >= min_coverage):
        cal = calibrate_gbm(predictions=pred.outputs["predictions"], region=region)
    with dsl.Else():
        clim = climatology_fallback(region=region)
    publish_forecast(report=dsl.OneOf(cal.outputs["report"], clim.outputs["report"]), region=region, season=season)


if __name__ == "__main__":
    compiler.Compiler().compile(yield_forecast, __file__.replace(".py", ".yaml"))
