# ruff: noqa
"""Pharmacy stock-out forecasting: sales staged on a VolumeOp claim, per-store forecasts, alerts behind a flag."""
import kfp
from kfp import dsl
from kfp.components import create_component_from_func

STORES = [{"store": "s014", "horizon": "14"}, {"store": "s027", "horizon": "28"}]


def forecast_store(store: str, horizon: str, region: str, data_dir: str) -> str:
    import glob, os
    import pandas as pd
    from statsforecast import StatsForecast
    from statsforecast.models import AutoETS
    frames = [pd.read_parquet(p) for p in sorted(glob.glob(os.path.join(data_dir, "sales", "*.parquet")))]
    sales = pd.concat(frames)
    holidays = pd.read_csv("s3://rx-ref/holidays/{}/{}.csv".format(region, store))
    ndc = pd.read_csv(os.path.join(data_dir, "ndc.csv"))
    sf = StatsForecast(models=[AutoETS()], freq="D")
    fc = sf.forecast(df=sales[sales.store == store].merge(ndc, on="ndc"), h=int(horizon), X_df=holidays)
    fc.to_parquet(f"s3://rx-forecasts/{region}/{store}/h{horizon}.parquet")
    os.makedirs(os.path.join(data_dir, "alerts"), exist_ok=True)
    fc[fc.AutoETS < 1].to_csv(os.path.join(data_dir, "alerts", f"{store}.csv"))
    return store


forecast_op = create_component_from_func(forecast_store, base_image="ghcr.io/rx-analytics/forecast:0.9.2")


def pull_sales_op(region: str):
    return dsl.ContainerOp(
        name="pull-sales",
        image="amazon/aws-cli:2.17.0",
        command=["bash", "-c"],
        arguments=[
            'set -eu\n'
            'REGION="$0"\n'
            'aws s3 cp "s3://rx-sales/daily/${REGION}/" /data/sales/ --recursive --exclude "*" --include "2025-0[4-6]-*.parquet"\n'
            'aws s3api get-object --bucket rx-ref --key formulary/ndc_2025q2.csv /data/ndc.csv > /dev/null\n'
            'ls -la /data/sales | tail -n 3\n',
            region,
        ],
    )


@dsl.pipeline(name="pharmacy-stockout", description="per-store stock-out forecasts")
def pipeline(region: str = "midwest", publish: str = "true"):
    cleanup = dsl.ContainerOp(name="cleanup-staging", image="amazon/aws-cli:2.17.0", command=["sh", "-c"],
                              arguments=['aws s3 rm "s3://rx-staging/$0/" --recursive --quiet || true', region])
    with dsl.ExitHandler(cleanup):
        vop = dsl.VolumeOp(name="rx-scratch", resource_name="rx-scratch", size="50Gi", modes=dsl.VOLUME_MODE_RWO)
        pull = pull_sales_op(region).add_pvolumes({"/data": vop.volume})
        with dsl.ParallelFor(STORES) as it:
            fc = forecast_op(store=it.store, horizon=it.horizon, region=region, data_dir="/data")
            fc.add_pvolumes({"/data": pull.pvolume})
        with dsl.Condition(publish == "true"):
            pub = dsl.ContainerOp(
                name="publish-alerts", image="amazon/aws-cli:2.17.0", command=["sh", "-c"],
                arguments=['aws s3 sync /data/alerts/ "s3://rx-alerts/$0/$(date +%F)/"', region],
                pvolumes={"/data": pull.pvolume}).after(fc)


if __name__ == "__main__":
    kfp.compiler.Compiler().compile(pipeline, __file__.replace(".py", ".yaml"))
