# ruff: noqa
"""Demand sensing with Prophet: per-region history from a lake (list parameter loop),
weather and promo calendars, an argparse CLI container for the holdout backtest,
a condition on the backtest MAPE and a publish step."""
import os
from typing import List

from kfp import compiler, dsl

IMG = 'ghcr.io/acme-retail/demand-sensing:3.1.0'


@dsl.component(base_image=IMG)
def build_history(lake: str, region: str, weeks: int, promo_calendar: str, history: dsl.Output[dsl.Dataset]):
    import pandas as pd
    sales_path = "{}/pos_sales/region={}/".format(lake.rstrip('/'), region)
    sales = pd.read_parquet(sales_path, columns=['ds', 'sku', 'units'])
    promos = pd.read_csv(promo_calendar, storage_options={'anon': False})
    df = sales.merge(promos, on='ds', how='left').tail(weeks * 7)
    df.to_parquet(history.path)


@dsl.component(base_image=IMG)
def fit_prophet(history: dsl.Input[dsl.Dataset], weather_uri: str, region: str,
                forecast: dsl.Output[dsl.Dataset]):
    import pandas as pd
    from prophet import Prophet
    h = pd.read_parquet(history.path)
    wx = pd.read_parquet(weather_uri + f'/{region}.parquet')
    m = Prophet(weekly_seasonality=True)
    m.add_regressor('temp_c')
    m.fit(h.merge(wx, on='ds'))
    m.predict(m.make_future_dataframe(28)).to_parquet(forecast.path)


@dsl.container_component
def backtest(forecasts: dsl.Input[dsl.Dataset], actuals: str, mape: dsl.OutputPath(float)):
    return dsl.ContainerSpec(
        image=IMG,
        command=['python', '/app/backtest.py'],
        args=['--forecast-dir', forecasts.path,
              '--actuals', actuals,
              '--metric', 'mape',
              '--metric-out', mape])


@dsl.component(base_image=IMG, packages_to_install=['s3fs'])
def publish_forecast(forecast: dsl.Input[dsl.Dataset], dest: str, region: str):
    import pandas as pd
    pd.read_parquet(forecast.path).to_parquet(f'{dest}/region={region}/forecast.parquet')


@dsl.pipeline(name='prophet-demand-sensing')
def demand(lake: str = 's3://acme-retail-lake/curated',
           regions: List[str] = ['emea', 'apac', 'amer'],
           weeks: int = 104,
           promo_calendar: str = 's3://acme-retail-lake/reference/promo_calendar_2025.csv',
           weather_uri: str = 's3://acme-wx/daily/2025',
           actuals: str = 's3://acme-retail-lake/curated/actuals/2025-w10.parquet',
           dest: str = 's3://acme-retail-forecasts/prophet/2025-w11'):
    with dsl.ParallelFor(items=regions) as region:
        h = build_history(lake=lake, region=region, weeks=weeks, promo_calendar=promo_calendar)
        f = fit_prophet(history=h.outputs['history'], weather_uri=weather_uri, region=region)
        b = backtest(forecasts=f.outputs['forecast'], actuals=actuals)
        with dsl.If(b.outputs['mape'] < 0.2, name='mape-ok'):
            publish_forecast(forecast=f.outputs['forecast'], dest=dest, region=region)


if __name__ == '__main__':
    compiler.Compiler().compile(demand, os.path.splitext(__file__)[0] + '.yaml')
