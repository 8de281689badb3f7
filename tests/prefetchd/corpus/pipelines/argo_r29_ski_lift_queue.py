# ruff: noqa
"""Ski-lift queue forecasting: turnstile gate scans per resort + NWP snowfall/wind -> a per-lift wait-time model; daily forecasts per resort."""
from hera.workflows import (DAG, Container, Env, SecretEnv, Parameter, Resources, Workflow, script, models as m)

QIMG = "ghcr.io/alpine-ops/queue-ml:0.14.2"


@script(image=QIMG, inputs=[Parameter(name="season")], resources=Resources(cpu_request="4", memory_request="24Gi"))
def weather_features(season: str):
    import xarray as xr

    ds = xr.open_zarr("s3://alpine-weather/meteoswiss/cosmo1e-daily.zarr", consolidated=True)
    ds = ds[["snowfall", "wind_speed_10m", "t2m"]].sel(time=slice("2024-11-15", "2025-04-30"))
    df = ds.to_dataframe().reset_index()
    df.to_parquet(f"s3://alpine-features/{season}/weather.parquet", index=False)


@script(image=QIMG, inputs=[Parameter(name="season")],
        resources=Resources(cpu_request="8", memory_request="48Gi", gpus=1),
        volume_mounts=[m.VolumeMount(name="gates", mount_path="/data")])
def train_queue_model(season: str):
    import glob

    import fsspec
    import pandas as pd
    import torch
    from queueml.model import fit_wait_model

    scans = pd.concat([pd.read_parquet(p) for p in glob.glob("/data/*/*.parquet")], ignore_index=True)
    weather = pd.read_parquet(f"s3://alpine-features/{season}/weather.parquet")
    model, mae = fit_wait_model(scans, weather, epochs=25)
    with fsspec.open(f"s3://alpine-models/queue/{season}/model.pt", "wb") as f:
        torch.save(model.state_dict(), f)
    print(round(mae, 2))


@script(image=QIMG, inputs=[Parameter(name="season"), Parameter(name="resort"), Parameter(name="day")])
def forecast_resort(season: str, resort: str, day: str):
    import fsspec
    import pandas as pd
    import torch
    from queueml.model import WaitModel

    with fsspec.open(f"s3://alpine-models/queue/{season}/model.pt", "rb") as f:
        model = WaitModel.from_state(torch.load(f))
    sales = pd.read_csv(f"s3://alpine-ops/tickets/{resort}/{day}/sales.csv")
    pred = model.forecast(sales, horizon_hours=10)
    pred.to_parquet(f"s3://alpine-forecasts/{day}/{resort}.parquet", index=False)


with Workflow(
    generate_name="ski-lift-queue-",
    entrypoint="forecast",
    on_exit="notify",
    arguments=[
        Parameter(name="season", value="2024-25"),
        Parameter(name="day", value="2025-02-15"),
        Parameter(name="resorts", value='["zermatt", "verbier", "laax"]'),
    ],
    volume_claim_templates=[m.PersistentVolumeClaim(
        metadata=m.ObjectMeta(name="gates"),
        spec=m.PersistentVolumeClaimSpec(access_modes=["ReadWriteOnce"],
                                         resources=m.VolumeResourceRequirements(requests={"storage": "150Gi"})))],
) as w:
    pull = Container(
        name="pull-gate-scans",
        image="peakcom/s5cmd:v2.2.2",
        inputs=[Parameter(name="resort")],
        command=["/s5cmd"],
        args=["sync", "s3://alpine-ops/gates/{{inputs.parameters.resort}}/season={{workflow.parameters.season}}/*",
              "/data/{{inputs.parameters.resort}}/"],
        volume_mounts=[m.VolumeMount(name="gates", mount_path="/data")],
    )
    publish = Container(
        name="publish-dashboard",
        image="amazon/aws-cli:2.17.0",
        command=["sh", "-c"],
        args=['aws s3 sync "s3://alpine-forecasts/{{workflow.parameters.day}}/" s3://alpine-dashboard/queues/latest/ --delete'],
    )
    notify = Container(
        name="notify",
        image="curlimages/curl:8.8.0",
        command=["sh", "-c"],
        args=['curl -sf -X POST "$SLACK_URL" -d "{\\"text\\": \\"ski-lift-queue {{workflow.name}}: {{workflow.status}}\\"}"'],
        env=[SecretEnv(name="SLACK_URL", secret_name="alpine-slack", secret_key="url")],
    )
    with DAG(name="forecast"):
        p = pull(name="pull-gate-scans", arguments={"resort": "{{item}}"}, with_param="{{workflow.parameters.resorts}}")
        wx = weather_features(name="weather-features", arguments={"season": "{{workflow.parameters.season}}"})
        tr = train_queue_model(name="train-queue-model", arguments={"season": "{{workflow.parameters.season}}"})
        fc = forecast_resort(name="forecast-resort",
                             arguments={"season": "{{workflow.parameters.season}}", "resort": "{{item}}",
                                        "day": "{{workflow.parameters.day}}"},
                             with_param="{{workflow.parameters.resorts}}")
        pub = publish(name="publish-dashboard", when=f"{tr.result} < 12")
        [p, wx] >> tr >> fc >> pub

if __name__ == "__main__":
    open(__file__.replace(".py", ".yaml"), "w").write(w.to_yaml())
