# ruff: noqa
"""Monthly demand model + price-elasticity curves for the hotel revenue-management team."""
from kfp import compiler, dsl, kubernetes
from kfp.dsl import Dataset, Input, Model, Output


@dsl.component(
    base_image="python:3.11-slim",
    packages_to_install=["pandas==2.2.2", "pyarrow==16.1.0", "s3fs==2024.6.1"],
)
def load_bookings(bookings_glob: str, min_lead_days: int) -> int:
    import pandas as pd
    import s3fs

    fs = s3fs.S3FileSystem()
    parts = fs.glob(bookings_glob)
    df = pd.concat([pd.read_parquet(f"s3://{p}", filesystem=fs) for p in parts], ignore_index=True)
    df = df[(df.status != "cancelled_no_show") & (df.lead_time_days >= min_lead_days)]
    df.to_parquet("/fs/bookings/bookings.parquet", index=False)
    return len(df)


@dsl.container_component
def sync_competitor_rates(comp_rates_prefix: str):
    return dsl.ContainerSpec(
        image="amazon/aws-cli:2.17.0",
        command=["aws", "s3", "sync"],
        args=[
            comp_rates_prefix,
            "/fs/comp-rates/",
            "--exclude", "*",
            "--include", "*.csv.gz",
            "--only-show-errors",
        ],
    )


@dsl.component(
    base_image="python:3.11-slim",
    packages_to_install=["pandas==2.2.2", "pyarrow==16.1.0", "s3fs==2024.6.1", "holidays==0.50"],
)
def build_features(features: Output[Dataset]):
    import glob

    import pandas as pd

    bookings = pd.read_parquet("/fs/bookings/bookings.parquet")
    comp = pd.concat(pd.read_csv(f) for f in glob.glob("/fs/comp-rates/**/*.csv.gz", recursive=True))
    cal = pd.read_csv("s3://staylane-ref/calendars/holidays_events_eu_2025.csv", parse_dates=["date"])

    daily = (
        bookings.groupby(["hotel_id", "stay_date", "room_type"])
        .agg(rooms=("rooms", "sum"), adr=("adr", "mean"), lead=("lead_time_days", "median"))
        .reset_index()
    )
    comp_med = comp.groupby(["hotel_id", "stay_date"]).rate.median().rename("comp_rate").reset_index()
    feats = daily.merge(comp_med, on=["hotel_id", "stay_date"], how="left").merge(
        cal, left_on="stay_date", right_on="date", how="left"
    )
    feats["price_index"] = feats.adr / feats.comp_rate
    feats.to_parquet(features.path, index=False)
    feats.to_parquet("/fs/features/latest.parquet", index=False)


@dsl.component(
    base_image="python:3.11-slim",
    packages_to_install=["lightgbm==4.4.0", "pandas==2.2.2", "pyarrow==16.1.0", "scikit-learn==1.5.0"],
)
def train_lgbm(features: Input[Dataset], model: Output[Model]):
    import lightgbm as lgb
    import pandas as pd

    df = pd.read_parquet(features.path)
    X = df.drop(columns=["rooms", "date"])
    booster = lgb.train(
        {"objective": "poisson", "learning_rate": 0.03, "num_leaves": 63, "monotone_constraints_method": "advanced"},
        lgb.Dataset(X, df.rooms, categorical_feature=["hotel_id", "room_type"]),
        num_boost_round=1500,
    )
    booster.save_model(model.path)


@dsl.component(
    base_image="python:3.11-slim",
    packages_to_install=["catboost==1.2.5", "pandas==2.2.2", "pyarrow==16.1.0"],
)
def train_catboost(features: Input[Dataset], model: Output[Model]):
    import pandas as pd
    from catboost import CatBoostRegressor

    df = pd.read_parquet(features.path)
    m = CatBoostRegressor(loss_function="Poisson", iterations=3000, depth=8, learning_rate=0.05, verbose=200)
    m.fit(df.drop(columns=["rooms", "date"]), df.rooms, cat_features=["hotel_id", "room_type"])
    m.save_model(model.path)


@dsl.component(
    base_image="python:3.11-slim",
    packages_to_install=["lightgbm==4.4.0", "catboost==1.2.5", "pandas==2.2.2", "pyarrow==16.1.0"],
)
def backtest(model: Input[Model], model_family: str, holdout_weeks: int) -> float:
    import numpy as np
    import pandas as pd

    df = pd.read_parquet("/fs/features/latest.parquet")
    cut = df.stay_date.max() - pd.Timedelta(weeks=holdout_weeks)
    test = df[df.stay_date > cut]
    X = test.drop(columns=["rooms", "date"])
    if model_family == "lightgbm":
        import lightgbm as lgb

        pred = lgb.Booster(model_file=model.path).predict(X)
    else:
        from catboost import CatBoostRegressor

        pred = CatBoostRegressor().load_model(model.path).predict(X)
    return float(np.abs(pred - test.rooms).sum() / test.rooms.sum())


@dsl.component(
    base_image="python:3.11-slim",
    packages_to_install=["lightgbm==4.4.0", "catboost==1.2.5", "pandas==2.2.2", "pyarrow==16.1.0", "s3fs==2024.6.1"],
)
def publish_price_curves(model: Input[Model], model_family: str, run_month: str, wape: float):
    import numpy as np
    import pandas as pd

    df = pd.read_parquet("/fs/features/latest.parquet")
    grid = np.linspace(0.7, 1.3, 25)
    rows = []
    for pi in grid:
        X = df.drop(columns=["rooms", "date"]).assign(price_index=pi)
        if model_family == "lightgbm":
            import lightgbm as lgb

            y = lgb.Booster(model_file=model.path).predict(X)
        else:
            from catboost import CatBoostRegressor

            y = CatBoostRegressor().load_model(model.path).predict(X)
        rows.append(df[["hotel_id", "stay_date", "room_type"]].assign(price_index=pi, demand=y))
    out = pd.concat(rows)
    out.to_parquet(f"s3://staylane-pricing/curves/{run_month}/curves.parquet", index=False)
    pd.DataFrame([{"wape": wape, "family": model_family}]).to_json(
        f"s3://staylane-pricing/curves/{run_month}/_meta.json", orient="records"
    )


@dsl.pipeline(name="hotel-demand-pricing")
def hotel_pricing(
    bookings_glob: str = "s3://staylane-data-lake/bookings/year=2025/month=05/*.parquet",
    comp_rates_prefix: str = "s3://staylane-scraped/competitor-rates/2025-05/",
    features_pvc: str = "pricing-feature-store",
    model_family: str = "lightgbm",
    run_month: str = "2025-05",
    min_lead_days: int = 0,
    holdout_weeks: int = 6,
):
    bookings = load_bookings(bookings_glob=bookings_glob, min_lead_days=min_lead_days)
    bookings.set_retry(num_retries=3, backoff_duration="30s", backoff_factor=2.0, backoff_max_duration="600s")
    kubernetes.mount_pvc(bookings, pvc_name=features_pvc, mount_path="/fs", sub_path="pricing/v2")

    rates = sync_competitor_rates(comp_rates_prefix=comp_rates_prefix)
    rates.set_caching_options(False)
    kubernetes.mount_pvc(rates, pvc_name=features_pvc, mount_path="/fs", sub_path="pricing/v2")
    kubernetes.use_secret_as_env(
        rates,
        secret_name="aws-pricing-ro",
        secret_key_to_env={"access_key_id": "AWS_ACCESS_KEY_ID", "secret_access_key": "AWS_SECRET_ACCESS_KEY"},
    )

    feats = build_features().after(bookings, rates)
    kubernetes.mount_pvc(feats, pvc_name=features_pvc, mount_path="/fs", sub_path="pricing/v2")

    with dsl.If(model_family == "lightgbm"):
        lgbm = train_lgbm(features=feats.outputs["features"]).set_cpu_limit("16").set_memory_limit("64G")
    with dsl.Else():
        cat = train_catboost(features=feats.outputs["features"]).set_cpu_limit("16").set_memory_limit("64G")

    chosen = dsl.OneOf(lgbm.outputs["model"], cat.outputs["model"])
    bt = backtest(model=chosen, model_family=model_family, holdout_weeks=holdout_weeks)
    kubernetes.mount_pvc(bt, pvc_name=features_pvc, mount_path="/fs", sub_path="pricing/v2")

    pub = publish_price_curves(model=chosen, model_family=model_family, run_month=run_month, wape=bt.output)
    kubernetes.mount_pvc(pub, pvc_name=features_pvc, mount_path="/fs", sub_path="pricing/v2")


if __name__ == "__main__":
    compiler.Compiler().compile(hotel_pricing, __file__.replace(".py", ".yaml"))
