# ruff: noqa
"""Shared climate-data templates (WorkflowTemplate `climate-ops-lib`).

Used by the marine-heatwave, coastal-upwelling and SST-bias workflows through
templateRef, so the subset/climatology logic lives in one place.
"""
from hera.workflows import Container, Parameter, Script, WorkflowTemplate, models as m

SUBSET_ZARR_PY = """import gcsfs, s3fs  # register the gs:// and s3:// filesystems for xarray
import xarray as xr

lon0, lat0, lon1, lat1 = [float(v) for v in "{{inputs.parameters.bbox}}".split(",")]
ds = xr.open_zarr("{{inputs.parameters.source}}", consolidated=True)
sub = ds[["sst"]].sel(lon=slice(lon0 % 360, lon1 % 360), lat=slice(lat0, lat1))
sub = sub.chunk({"time": 365, "lat": -1, "lon": -1})
sub.to_zarr("{{inputs.parameters.target}}", mode="w", consolidated=True)
print(dict(sub.sizes))
"""

with WorkflowTemplate(
    name="climate-ops-lib",
    namespace="climate-ml",
    labels={"team": "ocean-climate", "kind": "library"},
) as wt:
    Script(
        name="subset-zarr",
        image="ghcr.io/oceanclim/pangeo-base:2025.05",
        command=["python"],
        inputs=[
            Parameter(name="source"),
            Parameter(name="target"),
            Parameter(name="bbox", value="-180,-90,180,90"),
        ],
        source=SUBSET_ZARR_PY,
        resources=m.ResourceRequirements(requests={"cpu": "4", "memory": "16Gi"}),
    )

    Container(
        name="climatology",
        image="ghcr.io/oceanclim/mhw-tools:0.9.2",
        command=["python", "-m", "mhw.climatology"],
        inputs=[Parameter(name="sst"), Parameter(name="out"), Parameter(name="percentile", value="90")],
        args=[
            "--input-path", "{{inputs.parameters.sst}}",
            "--baseline-years", "1991-2020",
            "--percentile", "{{inputs.parameters.percentile}}",
            "--window-days", "11",
            "--output", "{{inputs.parameters.out}}",
        ],
        resources=m.ResourceRequirements(requests={"cpu": "8", "memory": "32Gi"}),
    )

if __name__ == "__main__":
    with open(__file__.replace(".py", ".yaml"), "w") as f:
        f.write(wt.to_yaml())
