# ruff: noqa
"""Permafrost thaw subsidence from Sentinel-1 InSAR (cryosphere research group, Hera).

Precise orbits for the month are fetched once (memoized), interferograms are formed per SAR frame
(withSequence over the frame numbers, one GPU each, at most two frames at once through a semaphore),
and a small-baseline time-series inversion turns them into a subsidence velocity field on a big GPU
node. If the inversion succeeds, a thaw-susceptibility model is trained against the borehole
ground-ice records and its map copied to the public bucket; if it fails, a coherence diagnostic is
produced instead. The group's channel is told either way.
"""
from hera.workflows import (
    DAG,
    Container,
    NoneArchiveStrategy,
    Parameter,
    Resources,
    RetryStrategy,
    S3Artifact,
    Artifact,
    SecretEnv,
    Workflow,
    script,
    models as m,
)

CRYO = "ghcr.io/cryo-insar/sbas:2.7.0"
CRYO_GPU = "ghcr.io/cryo-insar/sbas:2.7.0-cu124"
AWS = [SecretEnv(name="AWS_ACCESS_KEY_ID", secret_name="cryo-aws", secret_key="access_key_id"),
       SecretEnv(name="AWS_SECRET_ACCESS_KEY", secret_name="cryo-aws", secret_key="secret_access_key")]
GPU_PATCH = ('{"nodeSelector": {"cryo.example.org/pool": "gpu-a100"}, '
             '"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}')


@script(
    image=CRYO_GPU,
    env=AWS,
    resources=Resources(cpu_request="8", memory_request="48Gi", gpus=1),
    outputs=[S3Artifact(name="ifg", path="/work/ifg.nc", bucket="cryo-insar",
                        key="ifg/{{workflow.parameters.region}}/{{workflow.parameters.date}}/frame-{{inputs.parameters.frame}}.nc",
                        archive=NoneArchiveStrategy())],
    inputs=[Artifact(name="orbits", path="/work/orbits")],
    synchronization=m.Synchronization(semaphores=[m.SemaphoreRef(
        config_map_key_ref=m.ConfigMapKeySelector(name="cryo-limits", key="ifg-gpus"))]),
    retry_strategy=RetryStrategy(limit="2", retry_policy="OnError"),
    pod_spec_patch=GPU_PATCH,
)
def form_interferograms(region: str, frame: str):
    import glob

    import s3fs

    from cryoinsar.ifg import form_stack

    fs = s3fs.S3FileSystem()
    slcs = sorted(fs.glob(f"cryo-insar/stacks/{region}/frame-{frame}/slc/*.zip"))
    fs.get(slcs, "/work/slc/")
    form_stack(sorted(glob.glob("/work/slc/*.zip")), orbits="/work/orbits", out="/work/ifg.nc",
               looks=(20, 4), max_temporal_baseline_days=48)


@script(
    image=CRYO_GPU,
    env=AWS,
    resources=Resources(cpu_request="32", memory_request="240Gi", gpus=2),
    outputs=[S3Artifact(name="velocity", path="/work/velocity.tif", bucket="cryo-insar",
                        key="velocity/{{workflow.parameters.region}}/{{workflow.parameters.date}}/los_velocity.tif",
                        archive=NoneArchiveStrategy())],
    retry_strategy=RetryStrategy(limit="1"),
    pod_spec_patch=GPU_PATCH,
)
def invert_timeseries(region: str, date: str):
    import rioxarray
    import xarray as xr

    from cryoinsar.sbas import invert

    ifgs = xr.open_mfdataset(f"s3://cryo-insar/ifg/{region}/{date}/frame-*.nc", engine="h5netcdf",
                             combine="nested", concat_dim="frame")
    dem = rioxarray.open_rasterio(f"s3://cryo-ref/dem/arcticdem/{region}_10m.tif")
    vel = invert(ifgs, dem=dem, reference_point="stable-bedrock")
    vel.rio.to_raster("/work/velocity.tif", driver="COG")


@script(image=CRYO, env=AWS, resources=Resources(cpu_request="4", memory_request="16Gi"))
def coherence_diagnostic(region: str, date: str):
    import xarray as xr

    from cryoinsar.qa import coherence_report

    ifgs = xr.open_mfdataset(f"s3://cryo-insar/ifg/{region}/{date}/frame-*.nc", engine="h5netcdf",
                             combine="nested", concat_dim="frame")
    html = coherence_report(ifgs)
    with open("/tmp/coherence.html", "w") as f:
        f.write(html)
    import fsspec

    with fsspec.open(f"s3://cryo-reports/coherence/{region}/{date}.html", "w") as f:
        f.write(html)


with Workflow(
    generate_name="permafrost-thaw-",
    entrypoint="main",
    on_exit="notify",
    service_account_name="cryo-runner",
    artifact_repository_ref=m.ArtifactRepositoryRef(config_map="cryo-artifact-repos", key="scratch"),
    synchronization=m.Synchronization(mutexes=[m.Mutex(name="permafrost-{{workflow.parameters.region}}")]),
    arguments=[
        Parameter(name="region", value="yukon-dawson"),
        Parameter(name="date", value="2025-09-30"),
        Parameter(name="orbit-month", value="2025-09"),
        Parameter(name="frames", value="4"),
    ],
) as w:
    fetch_orbits = Container(
        name="fetch-orbits",
        image="amazon/aws-cli:2.17.0",
        command=["sh", "-c"],
        args=['set -eu; mkdir -p /work/orbits; '
              'aws s3 sync "s3://cryo-ref/s1-orbits/POEORB/$0/" /work/orbits/ --only-show-errors',
              "{{workflow.parameters.orbit-month}}"],
        env=AWS,
        outputs=[S3Artifact(name="orbits", path="/work/orbits",
                            key="permafrost/{{workflow.name}}/orbits", archive=NoneArchiveStrategy())],
        memoize=m.Memoize(key="s1-orbits-{{workflow.parameters.orbit-month}}", max_age="720h",
                          cache=m.Cache(config_map=m.LocalObjectReference(name="cryo-memo"))),
        retry_strategy=RetryStrategy(limit="3", retry_policy="Always",
                                     backoff=m.Backoff(duration="30s", factor="2")),
    )

    train_thaw = Container(
        name="train-thaw-model",
        image=CRYO_GPU,
        command=["python", "-m", "cryoinsar.thaw.train"],
        args=["--velocity", "/in/velocity.tif",
              "--boreholes", "/in/boreholes.csv",
              "--landcover", "s3://cryo-ref/landcover/esa-worldcover-2021/{{workflow.parameters.region}}.tif",
              "--output", "s3://cryo-models/thaw/{{workflow.parameters.region}}/{{workflow.parameters.date}}/"],
        inputs=[Artifact(name="velocity", path="/in/velocity.tif"),
                S3Artifact(name="boreholes", path="/in/boreholes.csv", bucket="cryo-field",
                           key="boreholes/ground_ice_2024.csv")],
        env=AWS,
        resources=Resources(cpu_request="8", memory_request="32Gi", gpus=1),
        pod_spec_patch=GPU_PATCH,
    )

    publish_map = Container(
        name="publish-map",
        image="amazon/aws-cli:2.17.0",
        command=["aws", "s3", "cp"],
        args=["s3://cryo-models/thaw/{{workflow.parameters.region}}/{{workflow.parameters.date}}/thaw_susceptibility.tif",
              "s3://cryo-public/permafrost/{{workflow.parameters.region}}/latest/thaw_susceptibility.tif"],
        env=AWS,
    )

    notify = Container(
        name="notify",
        image="curlimages/curl:8.8.0",
        command=["sh", "-c"],
        args=['curl -sf -X POST "$CHAT_WEBHOOK" -d "permafrost {{workflow.parameters.region}}: {{workflow.status}}"'],
        env=[SecretEnv(name="CHAT_WEBHOOK", secret_name="cryo-chat", secret_key="webhook")],
    )

    with DAG(name="main"):
        fo = fetch_orbits(name="fetch-orbits")
        ifg = form_interferograms(
            name="interferograms",
            arguments={"region": "{{workflow.parameters.region}}", "frame": "{{item}}",
                       "orbits": fo.get_artifact("orbits")},
            with_sequence=m.Sequence(start="1", end="{{workflow.parameters.frames}}", format="%02d"),
        )
        inv = invert_timeseries(
            name="invert-timeseries",
            arguments={"region": "{{workflow.parameters.region}}", "date": "{{workflow.parameters.date}}"},
        )
        tr = train_thaw(
            name="train-thaw-model",
            arguments={"velocity": inv.get_artifact("velocity")},
        )
        diag = coherence_diagnostic(
            name="diagnose-coherence",
            arguments={"region": "{{workflow.parameters.region}}", "date": "{{workflow.parameters.date}}"},
        )
        pub = publish_map(name="publish-map")
        fo >> ifg
        ifg >> inv
        tr.depends = "invert-timeseries.Succeeded"
        diag.depends = "invert-timeseries.Failed"
        pub.depends = "train-thaw-model.Succeeded"


if __name__ == "__main__":
    import os

    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "argo_r34_permafrost_thaw.yaml"), "w") as f:
        f.write(w.to_yaml())
