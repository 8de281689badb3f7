# ruff: noqa
"""Significant wave height (Hs) nowcast/forecast for offshore crew-transfer planning.
Per model cycle: WaveWatch III GRIB2 fields are synced onto a per-run volume and regridded with the bathymetry from a
shared read-only claim; NDBC buoy observations are fetched per buoy; a training set is co-located; a U-Net corrector
is trained on 2 GPUs, verified per buoy, scored, and when the mean RMSE is low enough it is published and the
forecast is run. Ops are notified however the run ends."""
from hera.workflows import DAG, Container, Parameter, Resources, SecretEnv, Workflow, script, models as m

MO = "ghcr.io/offshore-metocean/wavenet:7.0.2"
WORK = m.VolumeMount(name="grib-work", mount_path="/work")
BATHY = m.VolumeMount(name="bathy", mount_path="/bathy", read_only=True)
AWS = [SecretEnv(name="AWS_ACCESS_KEY_ID", secret_name="metocean-aws", secret_key="access_key_id"),
       SecretEnv(name="AWS_SECRET_ACCESS_KEY", secret_name="metocean-aws", secret_key="secret_access_key")]


@script(image=MO, env=AWS, resources=Resources(cpu_request="1", memory_request="4Gi"))
def fetch_buoy(buoy: str, cycle: str):
    import pandas as pd

    obs = pd.read_csv(f"s3://metocean-raw/ndbc/stdmet/{buoy}/2025.txt.gz", sep=r"\s+", skiprows=[1], compression="gzip")
    obs["buoy"] = buoy
    obs = obs.rename(columns={"WVHT": "hs", "DPD": "tp", "MWD": "dir"})
    obs.to_parquet(f"s3://metocean-features/buoys/{cycle}/{buoy}.parquet", index=False)


@script(image=MO, volume_mounts=[WORK, BATHY], resources=Resources(cpu_request="8", memory_request="64Gi"))
def regrid(cycle: str):
    import glob

    import xarray as xr
    from wavenet.grid import to_model_grid

    fields = xr.open_mfdataset(sorted(glob.glob("/work/grib/*.grb2")), engine="cfgrib", combine="by_coords")
    bathy = xr.open_dataset("/bathy/gebco_2024_pacific.nc")
    to_model_grid(fields, bathy).to_zarr(f"/work/zarr/{cycle}.zarr", mode="w")


@script(image=MO, env=AWS, volume_mounts=[WORK], resources=Resources(cpu_request="8", memory_request="64Gi"))
def build_training_set(cycle: str):
    import pyarrow.dataset as ds
    import xarray as xr
    from wavenet.colocate import colocate

    grid = xr.open_zarr(f"/work/zarr/{cycle}.zarr")
    buoys = ds.dataset(f"s3://metocean-features/buoys/{cycle}/", format="parquet").to_table().to_pandas()
    colocate(grid, buoys).to_parquet(f"s3://metocean-features/training/{cycle}/train.parquet", index=False)


@script(image=MO, env=AWS, resources=Resources(cpu_request="2", memory_request="16Gi"))
def validate_buoy(buoy: str, cycle: str, model_version: str):
    import json

    import fsspec
    import pandas as pd
    import torch
    from wavenet.model import load_corrector, rmse

    with fsspec.open(f"s3://metocean-models/wavenet/{model_version}/{cycle}/model.pt", "rb") as f:
        model = load_corrector(torch.load(f, map_location="cpu"))
    obs = pd.read_parquet(f"s3://metocean-features/buoys/{cycle}/{buoy}.parquet")
    with fsspec.open(f"s3://metocean-verification/{cycle}/{buoy}.json", "w") as f:
        json.dump({"buoy": buoy, "rmse": rmse(model, obs)}, f)


@script(image=MO, env=AWS)
def score_skill(cycle: str):
    import json

    import s3fs

    fs = s3fs.S3FileSystem()
    rows = [json.loads(fs.cat(p)) for p in fs.glob(f"s3://metocean-verification/{cycle}/*.json")]
    print(round(sum(r["rmse"] for r in rows) / len(rows), 4))


with Workflow(
    generate_name="wave-height-forecast-",
    entrypoint="cycle",
    on_exit="notify-ops",
    service_account_name="metocean-runner",
    arguments=[
        Parameter(name="cycle", value="2025112800"),
        Parameter(name="buoys", value='["46042", "46026", "51201", "44013"]'),
        Parameter(name="ww3_root", value="s3://metocean-raw/ww3/global-0p25"),
        Parameter(name="model_version", value="wavenet-v7"),
        Parameter(name="max_rmse", value="0.35"),
    ],
    volumes=[m.Volume(name="bathy", persistent_volume_claim=m.PersistentVolumeClaimVolumeSource(
        claim_name="metocean-bathymetry", read_only=True))],
    volume_claim_templates=[m.PersistentVolumeClaim(
        metadata=m.ObjectMeta(name="grib-work"),
        spec=m.PersistentVolumeClaimSpec(access_modes=["ReadWriteOnce"], storage_class_name="gp3",
                                         resources=m.VolumeResourceRequirements(requests={"storage": "200Gi"})))],
) as w:
    fetch_ww3 = Container(
        name="fetch-ww3",
        image="amazon/aws-cli:2.17.0",
        env=AWS,
        command=["aws", "s3", "sync"],
        args=["{{workflow.parameters.ww3_root}}/{{workflow.parameters.cycle}}/", "/work/grib/",
              "--exclude", "*", "--include", "*.grb2", "--only-show-errors"],
        volume_mounts=[WORK],
    )
    train_unet = Container(
        name="train-unet",
        image="ghcr.io/offshore-metocean/wavenet:7.0.2-cu124",
        env=AWS,
        command=["torchrun", "--nproc_per_node=2", "-m", "wavenet.train"],
        args=["--train", "s3://metocean-features/training/{{workflow.parameters.cycle}}/train.parquet",
              "--init-weights", "s3://metocean-models/wavenet/base/pretrained_era5.pt",
              "--epochs", "40",
              "--output-dir", "s3://metocean-models/wavenet/{{workflow.parameters.model_version}}/{{workflow.parameters.cycle}}/"],
        resources=Resources(cpu_request="16", memory_request="120Gi", gpus=2),
        node_selector={"node.kubernetes.io/instance-type": "g5.12xlarge"},
        tolerations=[m.Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")],
    )
    publish = Container(
        name="publish-forecast-model",
        image="amazon/aws-cli:2.17.0",
        env=AWS,
        command=["aws", "s3", "sync"],
        args=["s3://metocean-models/wavenet/{{workflow.parameters.model_version}}/{{workflow.parameters.cycle}}/",
              "s3://metocean-serving/wavenet/current/", "--exclude", "*.ckpt"],
    )
    forecast = Container(
        name="run-forecast",
        image="ghcr.io/offshore-metocean/wavenet:7.0.2-cu124",
        env=AWS,
        command=["python", "-m", "wavenet.forecast"],
        args=["--model", "s3://metocean-serving/wavenet/current/model.pt",
              "--grib", "/work/grib",
              "--bathymetry", "/bathy/gebco_2024_pacific.nc",
              "--lead-hours", "72",
              "--out", "s3://metocean-forecasts/hs/{{workflow.parameters.cycle}}/"],
        volume_mounts=[WORK, BATHY],
        resources=Resources(cpu_request="8", memory_request="32Gi", gpus=1),
    )
    notify = Container(
        name="notify-ops",
        image="curlimages/curl:8.8.0",
        env=[SecretEnv(name="OPS_WEBHOOK", secret_name="marine-ops", secret_key="webhook")],
        command=["sh", "-c"],
        args=['curl -sf -X POST -d "wave forecast {{workflow.parameters.cycle}}: {{workflow.status}}" "$OPS_WEBHOOK"'],
    )
    with DAG(name="cycle"):
        f_ww3 = fetch_ww3(name="fetch-ww3")
        f_buoy = fetch_buoy(name="fetch-buoy",
                            arguments={"buoy": "{{item}}", "cycle": "{{workflow.parameters.cycle}}"},
                            with_param="{{workflow.parameters.buoys}}")
        rg = regrid(name="regrid", arguments={"cycle": "{{workflow.parameters.cycle}}"})
        bts = build_training_set(name="build-training-set", arguments={"cycle": "{{workflow.parameters.cycle}}"})
        tr = train_unet(name="train-unet")
        vb = validate_buoy(name="validate-buoy",
                           arguments={"buoy": "{{item}}", "cycle": "{{workflow.parameters.cycle}}",
                                      "model_version": "{{workflow.parameters.model_version}}"},
                           with_param="{{workflow.parameters.buoys}}")
        sk = score_skill(name="score-skill", arguments={"cycle": "{{workflow.parameters.cycle}}"})
        gate = f"{sk.result} <= {{{{workflow.parameters.max_rmse}}}}"
        pub = publish(name="publish-forecast-model", when=gate)
        fc = forecast(name="run-forecast", when=gate)
        f_ww3 >> rg
        [rg, f_buoy] >> bts
        bts >> tr >> vb >> sk >> pub >> fc

if __name__ == "__main__":
    open(__file__.replace(".py", ".yaml"), "w").write(w.to_yaml())
