# ruff: noqa
"""Departure-delay classifier (>15 min) for the ops-control dashboard.

Monthly retrain on BTS on-time performance + METAR hourly weather joined with
the curated airport reference table. Slack notification runs as exit handler.
"""
from kfp import compiler, dsl
from kfp.dsl import Dataset, Input, Metrics, Model, Output


@dsl.component(base_image="python:3.11-slim", packages_to_install=["polars==1.5.0", "s3fs==2024.6.1"])
def ingest_ontime(ontime_root: str, year: int, month: int, flights: Output[Dataset]):
    import polars as pl
    src = f"{ontime_root}/year={year}/month={month:02d}/"
    df = pl.read_parquet(src + "*.parquet", storage_options={"region": "us-east-1"})
    df = df.filter(pl.col("Cancelled") == 0).select(
        ["FlightDate", "Reporting_Airline", "Origin", "Dest", "CRSDepTime", "DepDelay", "Distance"])
    df.write_parquet(flights.path)


@dsl.container_component
def ingest_metar(metar_prefix: str, weather: Output[Dataset]):
    return dsl.ContainerSpec(
        image="gcr.io/google.com/cloudsdktool/google-cloud-cli:489.0.0-slim",
        command=["bash", "-c"],
        args=[f"mkdir -p {weather.path} && gsutil -m cp -r {metar_prefix} {weather.path}/"],
    )


@dsl.component(base_image="python:3.11-slim", packages_to_install=["polars==1.5.0"])
def join_features(flights: Input[Dataset], weather: Input[Dataset], airports: Input[Dataset], features: Output[Dataset]):
    import glob
    import polars as pl
    f = pl.read_parquet(flights.path)
    w = pl.concat([pl.read_csv(p) for p in glob.glob(f"{weather.path}/**/*.csv", recursive=True)])
    a = pl.read_parquet(airports.path)
    f = f.join(a.select(["iata", "icao", "hub_tier"]), left_on="Origin", right_on="iata", how="left")
    f = f.with_columns(pl.col("CRSDepTime").floordiv(100).alias("dep_hour"))
    out = f.join(w, left_on=["icao", "FlightDate", "dep_hour"], right_on=["station", "date", "hour"], how="left")
    out.with_columns((pl.col("DepDelay") > 15).cast(pl.Int8).alias("label")).write_parquet(features.path)


@dsl.component(base_image="python:3.11-slim", packages_to_install=["xgboost==2.1.1", "polars==1.5.0", "pyarrow==16.1.0"])
def train_xgb(features: Input[Dataset], max_depth: int, model: Output[Model]):
    import polars as pl
    import xgboost as xgb
    df = pl.read_parquet(features.path).to_pandas()
    y = df.pop("label")
    X = df.select_dtypes("number").drop(columns=["DepDelay"])
    clf = xgb.XGBClassifier(max_depth=max_depth, n_estimators=800, learning_rate=0.05, tree_method="hist",
                            eval_metric="aucpr")
    clf.fit(X, y)
    clf.save_model(model.path)


@dsl.component(base_image="python:3.11-slim", packages_to_install=["xgboost==2.1.1", "pandas==2.2.2", "s3fs==2024.6.1", "scikit-learn==1.5.1"])
def evaluate(model: Input[Model], metrics: Output[Metrics]):
    import pandas as pd
    import xgboost as xgb
    from sklearn.metrics import average_precision_score, roc_auc_score
    hold = pd.read_parquet("s3://skyops-bts/holdout/winter-2024/features.parquet")
    y = hold.pop("label")
    clf = xgb.XGBClassifier()
    clf.load_model(model.path)
    p = clf.predict_proba(hold.select_dtypes("number").drop(columns=["DepDelay"]))[:, 1]
    metrics.log_metric("auc", float(roc_auc_score(y, p)))
    metrics.log_metric("ap", float(average_precision_score(y, p)))


@dsl.container_component
def notify_slack(pipeline_name: str):
    return dsl.ContainerSpec(
        image="curlimages/curl:8.7.1",
        command=["sh", "-c"],
        args=[f"curl -sf -X POST -H 'Content-type: application/json' "
              f"--data '{{\"text\":\"{pipeline_name} finished\"}}' $SLACK_WEBHOOK_URL"],
    )


@dsl.pipeline(name="flight-delay-monthly")
def flight_delay_monthly(
    ontime_root: str = "s3://skyops-bts/ontime",
    year: int = 2025,
    month: int = 4,
    metar_prefix: str = "gs://skyops-weather/metar/hourly/2025-04/",
    max_depth: int = 8,
):
    exit_task = notify_slack(pipeline_name="flight-delay-monthly")
    with dsl.ExitHandler(exit_task, name="retrain"):
        airports = dsl.importer(
            artifact_uri="s3://skyops-ref/airports/airports_v2025.parquet",
            artifact_class=Dataset, reimport=False)
        fl = ingest_ontime(ontime_root=ontime_root, year=year, month=month)
        wx = ingest_metar(metar_prefix=metar_prefix)
        feats = join_features(flights=fl.outputs["flights"], weather=wx.outputs["weather"],
                              airports=airports.output)
        model = train_xgb(features=feats.outputs["features"], max_depth=max_depth)
        model.set_cpu_limit("16").set_memory_limit("64G")
        evaluate(model=model.outputs["model"])


if __name__ == "__main__":
    compiler.Compiler().compile(flight_delay_monthly, __file__.replace(".py", ".yaml"))
