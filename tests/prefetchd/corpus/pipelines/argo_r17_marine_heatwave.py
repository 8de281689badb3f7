# ruff: noqa
"""Marine heatwave (MHW) detection for one ocean region and year.

Subsets the daily OISST record and the 1991-2020 baseline to the region with the
shared `climate-ops-lib` templates, builds the 90th-percentile climatology,
detects Hobday-style events, summarises them per sub-region and publishes the
atlas tiles.
"""
from hera.workflows import DAG, Container, Parameter, Script, Task, Workflow, models as m

LIB = "climate-ops-lib"
SUBREGIONS = ["gulf-of-maine", "scotian-shelf", "grand-banks"]
WORK = "s3://oceanclim-work/mhw/{{workflow.parameters.region}}"

SUMMARY_PY = """import json
import geopandas as gpd
import pandas as pd

sub = "{{inputs.parameters.subregion}}"
events = pd.read_parquet("s3://oceanclim-products/mhw/{{workflow.parameters.region}}/{{workflow.parameters.year}}/events.parquet")
poly = gpd.read_file(f"s3://oceanclim-ref/regions/{{workflow.parameters.region}}/{sub}.geojson").unary_union
pts = gpd.GeoSeries(gpd.points_from_xy(events["lon"], events["lat"]))
ev = events[pts.within(poly).values]
summary = {
    "subregion": sub,
    "events": int(ev["event_id"].nunique()),
    "max_intensity_c": float(ev["intensity_max"].max()) if len(ev) else 0.0,
    "heatwave_days": int(ev["duration"].sum()),
}
with open("/tmp/summary.json", "w") as f:
    json.dump(summary, f)
import boto3
boto3.client("s3").upload_file(
    "/tmp/summary.json", "oceanclim-products", f"mhw/{{workflow.parameters.region}}/{{workflow.parameters.year}}/{sub}/summary.json"
)
"""

with Workflow(
    generate_name="marine-heatwave-",
    namespace="climate-ml",
    entrypoint="mhw",
    service_account_name="climate-pipelines",
    arguments=[
        Parameter(name="region", value="nw-atlantic"),
        Parameter(name="year", value="2025"),
        Parameter(name="bbox", value="-72,38,-45,52"),
        Parameter(name="publish", value="true"),
    ],
) as w:
    detect = Container(
        name="detect-events",
        image="ghcr.io/oceanclim/mhw-tools:0.9.2",
        command=["python", "-m", "mhw.detect"],
        args=[
            "--sst", f"{WORK}/{{{{workflow.parameters.year}}}}/sst.zarr",
            "--climatology", f"{WORK}/clim_p90.zarr",
            "--min-duration", "5",
            "--output", "s3://oceanclim-products/mhw/{{workflow.parameters.region}}/{{workflow.parameters.year}}/events.parquet",
        ],
    )

    summarize = Script(
        name="summarize-subregion",
        image="ghcr.io/oceanclim/pangeo-base:2025.05",
        command=["python"],
        inputs=[Parameter(name="subregion")],
        source=SUMMARY_PY,
    )

    publish = Container(
        name="publish-atlas",
        image="rclone/rclone:1.67",
        command=["rclone"],
        args=[
            "copy",
            ":s3,env_auth=true:oceanclim-products/mhw/{{workflow.parameters.region}}/{{workflow.parameters.year}}/",
            ":gcs:oceanclim-public-atlas/mhw/{{workflow.parameters.region}}/{{workflow.parameters.year}}/",
            "--checksum",
        ],
        env=[m.EnvVar(name="RCLONE_GCS_BUCKET_POLICY_ONLY", value="true")],
    )

    with DAG(name="mhw"):
        oisst = Task(
            name="subset-oisst",
            template_ref=m.TemplateRef(name=LIB, template="subset-zarr"),
            arguments=[
                Parameter(name="source", value="gs://clim-public-mirror/noaa-oisst-v2.1/sst.day.mean.zarr"),
                Parameter(name="target", value=f"{WORK}/{{{{workflow.parameters.year}}}}/sst.zarr"),
                Parameter(name="bbox", value="{{workflow.parameters.bbox}}"),
            ],
        )
        baseline = Task(
            name="subset-baseline",
            template_ref=m.TemplateRef(name=LIB, template="subset-zarr"),
            arguments=[
                Parameter(name="source", value="s3://oceanclim-reanalysis/oisst-baseline/1991-2020.zarr"),
                Parameter(name="target", value=f"{WORK}/baseline.zarr"),
                Parameter(name="bbox", value="{{workflow.parameters.bbox}}"),
            ],
        )
        clim = Task(
            name="compute-climatology",
            template_ref=m.TemplateRef(name=LIB, template="climatology"),
            arguments=[
                Parameter(name="sst", value=f"{WORK}/baseline.zarr"),
                Parameter(name="out", value=f"{WORK}/clim_p90.zarr"),
            ],
        )
        ev = detect(name="detect-events")
        summ = summarize(
            name="summarize-subregion",
            arguments={"subregion": "{{item}}"},
            with_items=SUBREGIONS,
        )
        pub = publish(name="publish-atlas", when="{{workflow.parameters.publish}} == true")

        baseline >> clim
        [oisst, clim] >> ev >> summ >> pub

if __name__ == "__main__":
    with open(__file__.replace(".py", ".yaml"), "w") as f:
        f.write(w.to_yaml())
