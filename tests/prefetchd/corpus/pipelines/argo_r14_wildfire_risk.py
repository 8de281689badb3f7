# ruff: noqa
"""Daily wildfire ignition-risk grid (CronWorkflow, Hera)."""
from hera.workflows import Container, CronWorkflow, Parameter, Steps, models as m, script

work = m.Volume(name="work", persistent_volume_claim=m.PersistentVolumeClaimVolumeSource(claim_name="firesight-work"))
mnt = [m.VolumeMount(name="work", mount_path="/work", sub_path="daily")]
aws_env = [m.EnvVar(name="AWS_REGION", value="us-west-2")]


@script(image="ghcr.io/firesight/geo-py:2025.05", volume_mounts=mnt, env=aws_env,
        resources=m.ResourceRequirements(requests={"cpu": "8", "memory": "32Gi"}))
def build_grid():
    import geopandas as gpd
    import pandas as pd
    import rasterio
    from rasterio.sample import sample_gen

    grid = gpd.read_parquet("/work/grid_1km.parquet")
    hot = pd.read_csv("/work/firms/viirs_snpp_24h.csv")
    fm = pd.read_parquet("/work/fuel_moisture/latest.parquet")
    with rasterio.open("s3://firesight-static/landfire/fbfm40_2024.tif") as src:
        pts = [(p.x, p.y) for p in grid.geometry.centroid.to_crs(src.crs)]
        grid["fuel_model"] = [v[0] for v in sample_gen(src, pts)]
    grid = grid.sjoin_nearest(gpd.GeoDataFrame(fm, geometry=gpd.points_from_xy(fm.lon, fm.lat), crs=4326).to_crs(grid.crs))
    grid["hotspots_24h"] = grid.index.map(hot.groupby("cell_id").size()).fillna(0)
    grid.drop(columns="geometry").to_parquet("/work/features.parquet")


with CronWorkflow(
    name="wildfire-risk-daily",
    schedule="30 5 * * *",
    timezone="America/Los_Angeles",
    concurrency_policy="Forbid",
    starting_deadline_seconds=600,
    entrypoint="daily",
    arguments=[Parameter(name="model_uri", value="s3://firesight-models/ignition-lgbm/v5/model.txt"),
               Parameter(name="publish", value="true")],
    volumes=[work],
    service_account_name="firesight-batch",
) as cw:
    pull_firms = Container(
        name="pull-firms", image="amazon/aws-cli:2.17.0", env=aws_env,
        command=["aws", "s3", "cp"],
        args=["s3://firesight-ingest/firms/viirs_snpp/latest/viirs_snpp_24h.csv", "/work/firms/viirs_snpp_24h.csv"],
        volume_mounts=mnt,
    )
    pull_fm = Container(
        name="pull-fuel-moisture", image="rclone/rclone:1.67",
        command=["rclone"],
        args=["copyto", ":s3,provider=AWS,env_auth=true:firesight-ingest/wfas/fuel_moisture/latest.parquet",
              "/work/fuel_moisture/latest.parquet"],
        volume_mounts=mnt,
    )
    score = Container(
        name="score-risk", image="ghcr.io/firesight/ignition-lgbm:5.2.0", env=aws_env,
        command=["python", "-m", "ignition.score"],
        args=["--features", "/work/features.parquet", "--model", "{{workflow.parameters.model_uri}}",
              "--out", "s3://firesight-risk/daily/latest/risk.parquet"],
        volume_mounts=mnt,
    )
    publish = Container(
        name="publish-tiles", image="ghcr.io/firesight/tippecanoe-aws:2.62",
        command=["bash", "-c"],
        args=["aws s3 cp s3://firesight-risk/daily/latest/risk.parquet /tmp/risk.parquet && "
              "ogr2ogr -f GeoJSONSeq /tmp/risk.geojsonl /tmp/risk.parquet && "
              "tippecanoe -zg -o /tmp/risk.pmtiles --force /tmp/risk.geojsonl && "
              "aws s3 cp /tmp/risk.pmtiles s3://firesight-tiles/risk/latest.pmtiles "
              "--cache-control max-age=300"],
    )
    with Steps(name="daily") as daily:
        with daily.parallel():
            pull_firms()
            pull_fm()
        build_grid()
        score()
        publish(when="{{workflow.parameters.publish}} == true")

open(__file__.replace(".py", ".yaml"), "w").write(cw.to_yaml())
