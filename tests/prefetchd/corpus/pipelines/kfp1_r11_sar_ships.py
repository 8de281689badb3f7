# ruff: noqa
"""Dark-vessel detection from Sentinel-1 GRD (KFP v1, kfp 1.8.24).

STAC search for the day's IW GRD scenes over the AOI -> per-scene download +
YOLOv8 ship detection (fan-out over the search result) -> match detections
against decoded AIS positions -> push unmatched ("dark") vessels to the
analyst case system.

    /tmp/kfp1/bin/python kfp1_r11_sar_ships.py
"""
import kfp
from kfp import dsl, onprem
from kfp.components import create_component_from_func

GEO = "ghcr.io/acme-maritime/geo-py:2025.03"
DET = "ghcr.io/acme-maritime/sar-yolo:8.2.1-cu121"


def search_scenes(aoi: str, acq_date: str, max_scenes: int) -> list:
    import json

    from pystac_client import Client

    bbox = {"north-sea": [-1.5, 51.0, 9.0, 58.5], "skagerrak": [7.5, 57.0, 11.5, 59.5]}[aoi]
    cat = Client.open("https://earth-search.aws.element84.com/v1")
    items = cat.search(collections=["sentinel-1-grd"], bbox=bbox,
                       datetime=f"{acq_date}T00:00:00Z/{acq_date}T23:59:59Z",
                       query={"sar:instrument_mode": {"eq": "IW"}}).item_collection()
    # rclone wants bucket/key, not s3:// URLs
    scenes = [{"scene_id": it.id, "s3_path": it.assets["vv"].href.removeprefix("s3://")}
              for it in items][:max_scenes]
    print(json.dumps(scenes, indent=1))
    return scenes


def detect_ships(scene_id: str, weights_uri: str, conf: float, scratch: str) -> int:
    import glob
    import json

    import boto3
    from sar_yolo import calibrate_db, tile_geotiff
    from ultralytics import YOLO

    bucket, key = weights_uri[len("s3://"):].split("/", 1)
    boto3.client("s3").download_file(bucket, key, "/tmp/best.pt")
    model = YOLO("/tmp/best.pt")
    tif = glob.glob(f"{scratch}/scenes/{scene_id}/*.tiff")[0]
    dets = []
    for tile, transform in tile_geotiff(calibrate_db(tif), size=1024, overlap=128):
        for b in model.predict(tile, conf=conf, imgsz=1024, verbose=False)[0].boxes:
            x, y = transform * b.xywh[0][:2].tolist()
            dets.append({"scene_id": scene_id, "lon": x, "lat": y, "conf": float(b.conf)})
    with open(f"{scratch}/detections/{scene_id}.json", "w") as f:
        json.dump(dets, f)
    return len(dets)


def match_ais(scratch: str, aoi: str, acq_date: str, max_gap_m: float) -> int:
    import duckdb

    con = duckdb.connect()
    con.sql("INSTALL httpfs; LOAD httpfs; INSTALL spatial; LOAD spatial;")
    con.sql("CREATE SECRET (TYPE S3, PROVIDER CREDENTIAL_CHAIN, REGION 'eu-west-1');")
    con.sql(f"CREATE TABLE det AS SELECT * FROM read_json_auto('{scratch}/detections/*.json')")
    con.sql(f"""CREATE TABLE ais AS SELECT mmsi, ts, lon, lat, sog
                FROM read_parquet('s3://acme-maritime-ais/decoded/dt={acq_date}/*.parquet')""")
    con.sql(f"""
        CREATE TABLE dark AS
        SELECT d.* FROM det d WHERE NOT EXISTS (
            SELECT 1 FROM ais a
            WHERE ST_Distance_Sphere(ST_Point(a.lon, a.lat), ST_Point(d.lon, d.lat)) < {max_gap_m})""")
    con.sql(f"COPY dark TO 's3://acme-maritime-reports/dark-vessels/{aoi}/{acq_date}.parquet' (FORMAT PARQUET)")
    return con.sql("SELECT count(*) FROM dark").fetchone()[0]


def publish_alerts(aoi: str, acq_date: str, case_api: str) -> None:
    import pandas as pd
    import requests

    df = pd.read_parquet(f"s3://acme-maritime-reports/dark-vessels/{aoi}/{acq_date}.parquet")
    for r in df.itertuples():
        requests.post(f"{case_api}/cases", timeout=20, json={
            "type": "dark_vessel", "aoi": aoi, "scene": r.scene_id,
            "position": [r.lon, r.lat], "confidence": r.conf})


search_op = create_component_from_func(search_scenes, base_image=GEO)
detect_op = create_component_from_func(detect_ships, base_image=DET)
match_op = create_component_from_func(match_ais, base_image=GEO)
publish_op = create_component_from_func(publish_alerts, base_image=GEO)


@dsl.pipeline(name="s1-dark-vessels", description="Sentinel-1 ship detection vs AIS")
def sar_ships(
    aoi: str = "north-sea",
    acq_date: str = "2025-04-12",
    weights_uri: str = "s3://acme-maritime-models/yolov8s-sar/v3/best.pt",
    conf: float = 0.35,
    max_gap_m: float = 750.0,
):
    scratch = onprem.mount_pvc("maritime-scratch", "scratch", "/scratch")

    scenes = search_op(aoi=aoi, acq_date=acq_date, max_scenes=40)
    scenes.execution_options.caching_strategy.max_cache_staleness = "P0D"

    with dsl.ParallelFor(scenes.output, parallelism=6) as scene:
        dl = dsl.ContainerOp(
            name="download-scene",
            image="rclone/rclone:1.68.1",
            command=["rclone"],
            arguments=["copyto", "--s3-requester-pays", "--s3-provider=AWS", "--s3-env-auth",
                       "--transfers", "4", f":s3:{scene.s3_path}",
                       f"/scratch/scenes/{scene.scene_id}/vv.tiff"],
        ).apply(scratch)
        dl.set_retry(3)

        det = detect_op(scene_id=scene.scene_id, weights_uri=weights_uri, conf=conf,
                        scratch="/scratch").apply(scratch).after(dl)
        det.set_gpu_limit(1)
        det.add_node_selector_constraint("cloud.google.com/gke-accelerator", "nvidia-l4")

    match = match_op(scratch="/scratch", aoi=aoi, acq_date=acq_date,
                     max_gap_m=max_gap_m).apply(scratch).after(det)

    with dsl.Condition(match.output > 0):
        pub = publish_op(aoi=aoi, acq_date=acq_date, case_api="http://case-api.maritime.svc:8080/v1")
        pub.set_retry(2)


if __name__ == "__main__":
    kfp.compiler.Compiler().compile(sar_ships, __file__.replace(".py", ".yaml"))
