# ruff: noqa
"""Daily sea-ice concentration charts from Sentinel-1 EW SAR (ice service).
The day's scenes are picked from the scene catalog, each scene is copied onto a per-run volume, calibrated and
terrain-masked per region (land masks from a shared read-only claim, precise orbits from the aux bucket), the
SegFormer ice segmenter is adapted on 2 GPUs with the season's analyst charts, run per region, verified against the
NIC egg-code charts, and published when the skill is high enough. Ops are notified however the run ends."""
from hera.workflows import DAG, Container, Parameter, Resources, SecretEnv, Workflow, script, models as m

ICE = "ghcr.io/polar-ice-service/icenet-sar:5.2.0"
SCENES = m.VolumeMount(name="scenes", mount_path="/scenes")
LANDMASK = m.VolumeMount(name="landmask", mount_path="/landmask", read_only=True)
AWS = [SecretEnv(name="AWS_ACCESS_KEY_ID", secret_name="polar-aws", secret_key="access_key_id"),
       SecretEnv(name="AWS_SECRET_ACCESS_KEY", secret_name="polar-aws", secret_key="secret_access_key")]


@script(image=ICE, env=AWS, resources=Resources(cpu_request="1", memory_request="2Gi"))
def list_scenes(date: str, regions: str):
    import json

    import polars as pl

    wanted = list(regions)  # Hera has already parsed the JSON list
    cat = pl.read_parquet(f"s3://polar-s1-index/catalog/{date}.parquet")
    keys = cat.filter(pl.col("mode") == "EW").filter(pl.col("region").is_in(wanted))["key"].to_list()
    print(json.dumps(sorted(keys)))


@script(image=ICE, env=AWS, volume_mounts=[SCENES, LANDMASK], resources=Resources(cpu_request="8", memory_request="48Gi"))
def calibrate(region: str, date: str):
    import glob

    import rioxarray
    import s3fs

    from icenet.sar import calibrate_scene, mosaic

    fs = s3fs.S3FileSystem()
    fs.get(f"polar-aux/orbits/{date}/", "/tmp/orbits/", recursive=True)
    mask = rioxarray.open_rasterio(f"/landmask/{region}.tif")
    scenes = [calibrate_scene(p, orbits="/tmp/orbits", landmask=mask) for p in sorted(glob.glob("/scenes/raw/*.zip"))]
    mosaic(scenes, region=region).to_zarr(f"/scenes/cal/{region}.zarr", mode="w")


@script(image="ghcr.io/polar-ice-service/icenet-sar:5.2.0-cu124", env=AWS, volume_mounts=[SCENES],
        resources=Resources(cpu_request="4", memory_request="32Gi", gpus=1))
def predict_region(region: str, date: str):
    import fsspec
    import s3fs
    import torch
    import xarray as xr

    from icenet.model import load_segformer, write_geotiff

    with fsspec.open(f"s3://polar-models/iceseg/{date}/model.pt", "rb") as f:
        model = load_segformer(torch.load(f, map_location="cuda"))
    sic = model.predict(xr.open_zarr(f"/scenes/cal/{region}.zarr"))
    write_geotiff(sic, "/tmp/sic.tif")
    s3fs.S3FileSystem().put("/tmp/sic.tif", f"s3://polar-charts/{date}/{region}_sic.tif")


@script(image=ICE, env=AWS, resources=Resources(cpu_request="4", memory_request="16Gi"))
def verify_charts(date: str):
    import json

    import polars as pl
    import s3fs

    from icenet.verify import skill_score

    nic = pl.scan_parquet(f"s3://polar-ice-labels/nic-egg/{date[:4]}/*.parquet",
                          storage_options={"aws_region": "us-west-2"}).filter(pl.col("date") == date).collect()
    fs = s3fs.S3FileSystem()
    scores = {p.rsplit("/", 1)[-1]: skill_score(fs.open(p, "rb"), nic) for p in fs.glob(f"s3://polar-charts/{date}/*_sic.tif")}
    with fs.open(f"s3://polar-charts/{date}/verification.json", "w") as f:
        json.dump(scores, f)
    print(round(min(scores.values()), 3))


with Workflow(
    generate_name="sea-ice-charts-",
    entrypoint="daily",
    on_exit="notify-ice-desk",
    service_account_name="polar-runner",
    arguments=[
        Parameter(name="date", value="2025-11-20"),
        Parameter(name="regions", value='["baffin-bay", "hudson-bay", "beaufort-sea"]'),
        Parameter(name="min_skill", value="0.8"),
    ],
    volumes=[m.Volume(name="landmask", persistent_volume_claim=m.PersistentVolumeClaimVolumeSource(
        claim_name="polar-landmasks", read_only=True))],
    volume_claim_templates=[m.PersistentVolumeClaim(
        metadata=m.ObjectMeta(name="scenes"),
        spec=m.PersistentVolumeClaimSpec(access_modes=["ReadWriteMany"], storage_class_name="efs-sc",
                                         resources=m.VolumeResourceRequirements(requests={"storage": "300Gi"})))],
) as w:
    fetch_scene = Container(
        name="fetch-scene",
        image="amazon/aws-cli:2.17.0",
        env=AWS,
        inputs=[Parameter(name="key")],
        command=["aws", "s3", "cp"],
        args=["s3://polar-s1-grd/{{inputs.parameters.key}}", "/scenes/raw/", "--only-show-errors"],
        volume_mounts=[SCENES],
    )
    adapt = Container(
        name="adapt-iceseg",
        image="ghcr.io/polar-ice-service/icenet-sar:5.2.0-cu124",
        env=AWS,
        command=["torchrun", "--nproc_per_node=2", "-m", "icenet.train"],
        args=["--train-zarr", "/scenes/cal",
              "--labels", "s3://polar-ice-labels/analyst-charts/2025-26/",
              "--pretrained", "s3://polar-models/segformer-b2/ade20k_512.pt",
              "--epochs", "6",
              "--output-dir", "s3://polar-models/iceseg/{{workflow.parameters.date}}/"],
        volume_mounts=[SCENES],
        resources=Resources(cpu_request="16", memory_request="96Gi", gpus=2),
        node_selector={"node.kubernetes.io/instance-type": "g5.12xlarge"},
        tolerations=[m.Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")],
    )
    publish = Container(
        name="publish-charts",
        image="amazon/aws-cli:2.17.0",
        env=AWS,
        command=["aws", "s3", "sync"],
        args=["s3://polar-charts/{{workflow.parameters.date}}/", "s3://polar-public/sea-ice/{{workflow.parameters.date}}/",
              "--exclude", "verification.json", "--acl", "public-read"],
    )
    notify = Container(
        name="notify-ice-desk",
        image="curlimages/curl:8.8.0",
        env=[SecretEnv(name="ICE_DESK_WEBHOOK", secret_name="ice-desk", secret_key="webhook")],
        command=["sh", "-c"],
        args=['curl -sf -X POST -d "sea ice charts {{workflow.parameters.date}}: {{workflow.status}}" "$ICE_DESK_WEBHOOK"'],
    )
    with DAG(name="daily"):
        ls = list_scenes(name="list-scenes",
                         arguments={"date": "{{workflow.parameters.date}}", "regions": "{{workflow.parameters.regions}}"})
        fs_ = fetch_scene(name="fetch-scene", arguments={"key": "{{item}}"}, with_param=ls.result)
        cal = calibrate(name="calibrate", arguments={"region": "{{item}}", "date": "{{workflow.parameters.date}}"},
                        with_param="{{workflow.parameters.regions}}")
        ad = adapt(name="adapt-iceseg")
        pr = predict_region(name="predict-region",
                            arguments={"region": "{{item}}", "date": "{{workflow.parameters.date}}"},
                            with_param="{{workflow.parameters.regions}}")
        vc = verify_charts(name="verify-charts", arguments={"date": "{{workflow.parameters.date}}"})
        pub = publish(name="publish-charts", when=f"{vc.result} >= {{{{workflow.parameters.min_skill}}}}")
        ls >> fs_ >> cal >> ad >> pr >> vc >> pub

if __name__ == "__main__":
    open(__file__.replace(".py", ".yaml"), "w").write(w.to_yaml())
