# ruff: noqa
"""Road roughness (IRI) estimation from smartphone accelerometers in municipal vehicles (weekly).
The cities that uploaded probe data this week are listed from the probe bucket, wet-road hours are masked from open
SYNOP weather observations (Dask), each city's trips are cut into 10 s windows written straight to GZIP TFRecords in
S3 (phone calibration tables from a shared claim), a labelled evaluation set is built from the profilometer survey,
a 1-D CNN is trained on a GPU warm-started from production, evaluated with tf.data, and when the RMSE is low enough
roughness tiles are rendered and published. An audit record is written however the run ends."""
import kfp
from kfp import dsl, onprem
from kfp.aws import use_aws_secret
from kfp.components import create_component_from_func

RS_IMAGE = "registry.roadsense.io/ml/roadsense:0.19.2"
RS_GPU = "registry.roadsense.io/ml/roadsense:0.19.2-gpu"


def list_cities(probe_bucket: str, week: str) -> list:
    import boto3

    s3 = boto3.client("s3")
    resp = s3.list_objects_v2(Bucket=probe_bucket, Prefix=f"raw/{week}/", Delimiter="/")
    return sorted(p["Prefix"].rstrip("/").rsplit("city=", 1)[-1] for p in resp.get("CommonPrefixes", []))


def weather_mask(week: str):
    import dask.dataframe as dd

    from roadsense.weather import wet_road_hours

    year = week[:4]
    synop = dd.read_csv(f"s3://meteo-open-fr/synop/{year}/synop.{year}*.csv.gz", sep=";", blocksize=None,
                        storage_options={"anon": True}, dtype={"numer_sta": str})
    mask = wet_road_hours(synop, week=week)
    mask.to_parquet(f"s3://roadsense-features/weather-mask/{week}/", write_index=False, overwrite=True)


def window_signals(city: str, week: str, probe_bucket: str):
    import json

    import pandas as pd
    import tensorflow as tf

    from roadsense.dsp import windows

    with open(f"/calib/{city}/phone_models.json") as f:
        calib = json.load(f)
    trips = pd.read_parquet(f"s3://{probe_bucket}/raw/{week}/city={city}/")
    mask = pd.read_parquet(f"s3://roadsense-features/weather-mask/{week}/")
    opts = tf.io.TFRecordOptions(compression_type="GZIP")
    with tf.io.TFRecordWriter(f"s3://roadsense-tfrec/{week}/{city}.tfrecord.gz", options=opts) as w:
        for ex in windows(trips, calib, mask, seconds=10):
            w.write(ex.SerializeToString())


def build_eval_set(week: str, probe_bucket: str):
    import pandas as pd
    import tensorflow as tf

    from roadsense.dsp import labelled_windows

    survey = pd.concat([pd.read_csv(p) for p in tf.io.gfile.glob("s3://roadsense-labels/iri-survey/2025/*.csv")])
    probes = pd.read_parquet(f"s3://{probe_bucket}/labelled/{week}/")
    opts = tf.io.TFRecordOptions(compression_type="GZIP")
    with tf.io.TFRecordWriter(f"s3://roadsense-tfrec/{week}/eval/iri-labelled.tfrecord.gz", options=opts) as w:
        for ex in labelled_windows(probes, survey):
            w.write(ex.SerializeToString())


def eval_iri(week: str) -> float:
    import numpy as np
    import tensorflow as tf

    from roadsense.data import parse_window

    files = tf.io.gfile.glob(f"s3://roadsense-tfrec/{week}/eval/*.tfrecord.gz")
    ds = tf.data.TFRecordDataset(files, compression_type="GZIP").map(parse_window).batch(512)
    model = tf.keras.models.load_model(f"s3://roadsense-models/iri-cnn/{week}/")
    err = [np.mean((model(x, training=False).numpy().ravel() - y.numpy()) ** 2) for x, y in ds]
    return float(np.sqrt(np.mean(err)))


def write_audit(week: str):
    import datetime
    import json

    import boto3

    boto3.client("s3").put_object(
        Bucket="roadsense-audit", Key=f"runs/{week}.json",
        Body=json.dumps({"week": week, "finished": datetime.datetime.utcnow().isoformat()}).encode())


list_op = create_component_from_func(list_cities, base_image=RS_IMAGE)
weather_op = create_component_from_func(weather_mask, base_image=RS_IMAGE)
window_op = create_component_from_func(window_signals, base_image=RS_IMAGE)
evalset_op = create_component_from_func(build_eval_set, base_image=RS_IMAGE)
eval_op = create_component_from_func(eval_iri, base_image=RS_GPU)
audit_op = create_component_from_func(write_audit, base_image=RS_IMAGE)

TILES = """set -euo pipefail
python -m roadsense.tiles --model "$0" --segments s3://roadsense-ref/osm/fr-roads-2025-11.parquet --out /tmp/tiles
aws s3 sync /tmp/tiles/ "s3://roadsense-tiles/$1/" --only-show-errors
aws s3 sync "s3://roadsense-tiles/$1/" s3://roadsense-public/tiles/latest/ --delete --only-show-errors
"""


@dsl.pipeline(name="road-roughness-weekly", description="IRI from smartphone accelerometers")
def road_roughness(week: str = "2025-W49",
                   probe_bucket: str = "roadsense-probes",
                   max_rmse: float = 0.45):
    audit = audit_op(week=week).apply(use_aws_secret("roadsense-aws"))

    with dsl.ExitHandler(audit):
        cities = list_op(probe_bucket=probe_bucket, week=week).apply(use_aws_secret("roadsense-aws"))
        mask = weather_op(week=week).apply(use_aws_secret("roadsense-aws"))
        mask.set_memory_limit("32G")

        with dsl.ParallelFor(cities.output) as city:
            win = window_op(city=city, week=week, probe_bucket=probe_bucket).after(mask)
            win.apply(use_aws_secret("roadsense-aws"))
            win.apply(onprem.mount_pvc("roadsense-calibration", "calibration", "/calib"))

        evalset = evalset_op(week=week, probe_bucket=probe_bucket).apply(use_aws_secret("roadsense-aws"))

        train = dsl.ContainerOp(
            name="train-iri",
            image=RS_GPU,
            command=["python", "-m", "roadsense.train"],
            arguments=["--train-glob", f"s3://roadsense-tfrec/{week}/*.tfrecord.gz",
                       "--eval-file", f"s3://roadsense-tfrec/{week}/eval/iri-labelled.tfrecord.gz",
                       "--warm-start", "s3://roadsense-models/iri-cnn/prod/saved_model/",
                       "--epochs", "30",
                       "--export-dir", f"s3://roadsense-models/iri-cnn/{week}/"],
        ).after(win, evalset).apply(use_aws_secret("roadsense-aws"))
        train.set_gpu_limit(1)
        train.add_node_selector_constraint("node.kubernetes.io/instance-type", "g6.xlarge")

        ev = eval_op(week=week).after(train).apply(use_aws_secret("roadsense-aws"))
        ev.set_gpu_limit(1)

        with dsl.Condition(ev.output <= max_rmse):
            dsl.ContainerOp(
                name="export-tiles",
                image=RS_IMAGE,
                command=["bash", "-c"],
                arguments=[TILES, f"s3://roadsense-models/iri-cnn/{week}/", week],
            ).apply(use_aws_secret("roadsense-aws"))


if __name__ == "__main__":
    kfp.compiler.Compiler().compile(road_roughness, __file__.replace(".py", ".yaml"))
