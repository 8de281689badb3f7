# ruff: noqa
"""Nightly storm-surge ensemble emulation (Hera CronWorkflow): MinIO input artifact with endpoint, HTTP artifact,
withSequence with a format, a script reading a run-scoped prefix, a `when` on a script result, onExit."""
from hera.workflows import (DAG, Artifact, Container, CronWorkflow, HTTPArtifact, Parameter, S3Artifact,
                            models as m, script)

minio_art = S3Artifact(name="bathy", path="/in/bathy.nc", bucket="surge-static",
                       key="bathymetry/{{workflow.parameters.region}}/gebco_2024_subset.nc",
                       endpoint="minio.surge-lab.svc:9000", insecure=True,
                       access_key_secret=m.SecretKeySelector(name="surge-minio", key="accesskey"),
                       secret_key_secret=m.SecretKeySelector(name="surge-minio", key="secretkey"))

build_mesh = Container(
    name="build-mesh",
    image="ghcr.io/surgelab/adcirc-tools:56.0.2",
    inputs=[minio_art,
            HTTPArtifact(name="tide-stations", path="/in/stations.json",
                         url="https://api.tidesandcurrents.noaa.gov/mdapi/prod/webapi/stations.json?type=waterlevels")],
    outputs=[Artifact(name="mesh", path="/out/mesh.nc")],
    command=["python", "-m", "surgetools.mesh"],
    args=["--bathy", "/in/bathy.nc", "--stations", "/in/stations.json", "--resolution", "250", "--out", "/out/mesh.nc"],
)

run_member = Container(
    name="run-member",
    image="ghcr.io/surgelab/adcirc:56.0.2-mpi",
    inputs=[Parameter(name="member"), Artifact(name="mesh", path="/in/mesh.nc")],
    command=["mpirun", "-np", "32", "surge-run"],
    args=["--forcing", "s3://surge-forcing/gefs/{{workflow.parameters.region}}/latest/gep{{inputs.parameters.member}}.nc",
          "--mesh", "/in/mesh.nc",
          "--out", "s3://surge-runs/{{workflow.parameters.region}}/{{workflow.name}}/gep{{inputs.parameters.member}}/"],
)


@script(image="ghcr.io/surgelab/emulator:3.1.0-cu121")
def emulator_infer(region: str, run_name: str):
    import fsspec
    import xarray as xr
    from surge_emulator import Emulator

    fs = fsspec.filesystem("s3")
    fs.get(f"s3://surge-models/emulator/{region}/v3/", "/tmp/emu/", recursive=True)
    emu = Emulator.load("/tmp/emu/")
    runs = xr.open_mfdataset(fs.glob(f"s3://surge-runs/{region}/{run_name}/*/maxele.63.nc"), engine="h5netcdf")
    p = emu.exceedance(runs, threshold_m=1.5)
    print("exceed" if p.max() > 0.3 else "ok")


issue_warnings = Container(
    name="issue-warnings",
    image="ghcr.io/surgelab/alerting:1.4.0",
    command=["python", "-m", "alerting.issue"],
    args=["--facilities", "s3://surge-static/assets/{{workflow.parameters.region}}/critical_facilities.geojson",
          "--alerts-out", "s3://surge-alerts/{{workflow.parameters.region}}/{{workflow.name}}.json"],
)


with CronWorkflow(
    name="storm-surge-nightly",
    schedule="30 3 * * *",
    timezone="America/Chicago",
    concurrency_policy="Forbid",
    entrypoint="surge",
    on_exit="notify-ops",
    arguments=[Parameter(name="region", value="gulf-coast"), Parameter(name="members", value="6")],
) as cw:
    Container(name="notify-ops", image="curlimages/curl:8.8.0", command=["sh", "-c"],
              args=['curl -sf -X POST "$OPS_HOOK" -d "surge {{workflow.name}} {{workflow.status}}"'])
    with DAG(name="surge"):
        bm = build_mesh(name="mesh")
        rm = run_member(name="members",
                        arguments=[Parameter(name="member", value="{{item}}"), bm.get_artifact("mesh").with_name("mesh")],
                        with_sequence=m.Sequence(count="{{workflow.parameters.members}}", format="%02d"))
        em = emulator_infer(name="emulate", arguments={"region": "{{workflow.parameters.region}}",
                                                       "run_name": "{{workflow.name}}"})
        iw = issue_warnings(name="warn", when=f"{em.result} == exceed")
        bm >> rm >> em >> iw

if __name__ == "__main__":
    open(__file__.replace(".py", ".yaml"), "w").write(cw.to_yaml())
