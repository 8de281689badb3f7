# ruff: noqa
"""Daily vehicle counts per count line from the city's traffic CCTV (transport authority, Hera).
The current detector is pulled from the MLflow artifact store onto a per-run volume, each corridor's clips are
decoded to frames with Ray Data, vehicles are detected per corridor on a GPU (Ray Data map_batches), detections are
turned into line crossings with Dask, the counts are compared with the inductive-loop counts of the ITS Delta table,
and when they agree the counts are published to the open-data bucket and the BI dashboard is refreshed.
Traffic ops are notified however the run ends."""
from hera.workflows import DAG, ConfigMapEnv, Container, Parameter, Resources, SecretEnv, Workflow, script, models as m

VISION = "registry.metro-transport.gov/vision/traffic-counts:3.1.0"
VISION_GPU = "registry.metro-transport.gov/vision/traffic-counts:3.1.0-cu124"
MODELS = m.VolumeMount(name="models", mount_path="/models")
AWS = [SecretEnv(name="AWS_ACCESS_KEY_ID", secret_name="metro-aws", secret_key="access_key_id"),
       SecretEnv(name="AWS_SECRET_ACCESS_KEY", secret_name="metro-aws", secret_key="secret_access_key")]
MLFLOW = [ConfigMapEnv(name="MLFLOW_TRACKING_URI", config_map_name="mlflow-client", config_map_key="tracking_uri")]


@script(image=VISION, env=AWS + MLFLOW, volume_mounts=[MODELS], resources=Resources(cpu_request="1", memory_request="2Gi"))
def fetch_detector(detector_uri: str):
    import mlflow

    local = mlflow.artifacts.download_artifacts(artifact_uri=detector_uri, dst_path="/models/detector")
    print(local)


@script(image=VISION, env=AWS, resources=Resources(cpu_request="16", memory_request="64Gi"))
def extract_frames(corridor: str, date: str):
    import ray

    from metrovision.video import decode_frames

    ray.init()
    clips = ray.data.read_binary_files(f"s3://metro-cctv-raw/{date}/{corridor}/", include_paths=True,
                                       file_extensions=["mp4"])
    frames = clips.flat_map(lambda row: decode_frames(row, fps=2))
    frames.write_parquet(f"s3://metro-cctv-frames/{date}/{corridor}/")


@script(image=VISION_GPU, env=AWS, volume_mounts=[MODELS],
        resources=Resources(cpu_request="8", memory_request="48Gi", gpus=1))
def detect_vehicles(corridor: str, date: str):
    import ray

    from metrovision.detect import YoloCounter

    ray.init()
    frames = ray.data.read_parquet(f"s3://metro-cctv-frames/{date}/{corridor}/")
    dets = frames.map_batches(YoloCounter,
                              fn_constructor_kwargs={"weights": "/models/detector/weights/best.pt", "conf": 0.35},
                              batch_size=64, num_gpus=1, concurrency=1)
    dets.write_parquet(f"s3://metro-traffic/detections/{date}/{corridor}/")


@script(image=VISION, env=AWS, resources=Resources(cpu_request="8", memory_request="32Gi"))
def count_flows(date: str):
    import dask.dataframe as dd
    import geopandas as gpd

    from metrovision.flows import CROSSING_META, crossings

    lines = gpd.read_file("s3://metro-ref/count-lines/v3/count_lines.geojson")
    dets = dd.read_parquet(f"s3://metro-traffic/detections/{date}/", storage_options={"anon": False})
    counts = (dets.map_partitions(crossings, lines, meta=CROSSING_META)
              .groupby(["camera_id", "line_id", "vehicle_class", "minute"]).size().rename("n").reset_index())
    counts.to_parquet(f"s3://metro-traffic/counts/{date}/", write_index=False, overwrite=True)


@script(image=VISION, env=AWS, resources=Resources(cpu_request="2", memory_request="8Gi"))
def compare_loops(date: str):
    import json

    import fsspec
    import pandas as pd
    from deltalake import DeltaTable

    loops = DeltaTable("s3://metro-its/delta/loop_counts").to_pandas(
        partitions=[("date", "=", date)], columns=["site_id", "minute", "count"])
    cam = pd.read_parquet(f"s3://metro-traffic/counts/{date}/")
    pairs = pd.read_csv("s3://metro-ref/count-lines/v3/loop_pairs.csv")
    m = (cam.merge(pairs, on="line_id").merge(loops, on=["site_id", "minute"], suffixes=("_cam", "_loop")))
    agreement = float(1 - (m["n"] - m["count"]).abs().sum() / max(m["count"].sum(), 1))
    with fsspec.open(f"s3://metro-traffic/qa/{date}/agreement.json", "w") as f:
        json.dump({"date": date, "agreement": agreement, "pairs": int(len(m))}, f)
    print(round(agreement, 3))


with Workflow(
    generate_name="cctv-vehicle-counts-",
    entrypoint="daily",
    on_exit="notify-traffic-ops",
    service_account_name="traffic-ml",
    arguments=[
        Parameter(name="date", value="2025-12-02"),
        Parameter(name="corridors", value='["a4-east", "ring-north", "harbor-bridge"]'),
        Parameter(name="detector-uri", value="s3://metro-vision-mlflow/artifacts/7/3be0c2a9f1d44e07/artifacts/detector"),
        Parameter(name="min-agreement", value="0.9"),
    ],
    volume_claim_templates=[m.PersistentVolumeClaim(
        metadata=m.ObjectMeta(name="models"),
        spec=m.PersistentVolumeClaimSpec(access_modes=["ReadWriteMany"], storage_class_name="efs-sc",
                                         resources=m.VolumeResourceRequirements(requests={"storage": "20Gi"})))],
) as w:
    publish = Container(
        name="publish-counts",
        image="peakcom/s5cmd:v2.2.2",
        env=AWS,
        command=["/s5cmd"],
        args=["--numworkers", "16", "cp",
              "s3://metro-traffic/counts/{{workflow.parameters.date}}/*",
              "s3://metro-opendata/traffic-counts/{{workflow.parameters.date}}/"],
    )
    dashboard = Container(
        name="refresh-dashboard",
        image=VISION,
        env=AWS,
        command=["python", "-m", "metrovision.dash"],
        args=["--counts", "s3://metro-traffic/counts/{{workflow.parameters.date}}/",
              "--qa", "s3://metro-traffic/qa/{{workflow.parameters.date}}/agreement.json",
              "--report-to", "s3://metro-bi/traffic/{{workflow.parameters.date}}/"],
    )
    notify = Container(
        name="notify-traffic-ops",
        image="curlimages/curl:8.8.0",
        env=[SecretEnv(name="OPS_WEBHOOK", secret_name="traffic-ops-chat", secret_key="webhook")],
        command=["sh", "-c"],
        args=['curl -fsS -X POST -d "cctv counts {{workflow.parameters.date}}: {{workflow.status}}" "$OPS_WEBHOOK"'],
    )
    with DAG(name="daily"):
        fd = fetch_detector(name="fetch-detector", arguments={"detector_uri": "{{workflow.parameters.detector-uri}}"})
        ef = extract_frames(name="extract-frames",
                            arguments={"corridor": "{{item}}", "date": "{{workflow.parameters.date}}"},
                            with_param="{{workflow.parameters.corridors}}")
        dv = detect_vehicles(name="detect-vehicles",
                             arguments={"corridor": "{{item}}", "date": "{{workflow.parameters.date}}"},
                             with_param="{{workflow.parameters.corridors}}")
        cf = count_flows(name="count-flows", arguments={"date": "{{workflow.parameters.date}}"})
        cl = compare_loops(name="compare-loops", arguments={"date": "{{workflow.parameters.date}}"})
        ok = f"{cl.result} >= {{{{workflow.parameters.min-agreement}}}}"
        pc = publish(name="publish-counts", when=ok)
        rd = dashboard(name="refresh-dashboard", when=ok)
        [fd, ef] >> dv
        dv >> cf >> cl >> [pc, rd]

if __name__ == "__main__":
    open(__file__.replace(".py", ".yaml"), "w").write(w.to_yaml())
