# ruff: noqa
"""Electricity theft (non-technical loss) detection from smart-meter readings, weather and DVC-tracked field cases."""
import kfp
from kfp import dsl
from kfp.components import create_component_from_func
from kubernetes.client import V1EnvVar, V1EnvVarSource, V1SecretKeySelector, V1Toleration


def pull_readings(segment: str, utility: str, month: str, ami_root: str):
    import duckdb
    import polars as pl

    def month_glob(root, seg):
        base = f"{root}/{utility}/{seg}"
        return f"{base}/month={month}/*.parquet"

    lf = pl.scan_parquet(month_glob(ami_root, segment))
    meters = duckdb.sql(f"SELECT meter_id, feeder, tariff FROM read_csv_auto('s3://ami-lake/meta/{utility}/meters.csv')").pl()
    feats = (lf.group_by("meter_id").agg(pl.col("kwh").sum().alias("kwh_month"), pl.col("kwh").std().alias("kwh_std"))
             .collect().join(meters, on="meter_id", how="left"))
    feats.write_parquet(f"s3://ami-features/{utility}/{month}/{segment}.parquet")


def train_detector(utility: str, month: str, features_root: str) -> float:
    import json
    import subprocess
    cmd = ["torchrun", "--standalone", "--nproc_per_node", "4", "-m", "ntl.train", "--",
           "--features", f"{features_root}/{utility}/{month}/",
           "--weather", "/work/weather/",
           "--labels", "/work/repo/data/theft_cases.csv",
           "--ckpt-dir", f"s3://ami-models/ntl/{utility}/{month}/"]
    subprocess.run(cmd, check=True)
    with open("/tmp/metrics.json") as f:
        return float(json.load(f)["auprc"])


pull_op = create_component_from_func(pull_readings, base_image="ghcr.io/gridml/polars-duckdb:1.2.0")
train_op = create_component_from_func(train_detector, base_image="ghcr.io/gridml/ntl:0.8.0-cu124")


@dsl.pipeline(name="meter-theft")
def pipeline(utility: str = "pge-north", month: str = "2025-07", ami_root: str = "s3://ami-lake/readings",
             min_auprc: float = 0.7):
    notify = dsl.ContainerOp(
        name="notify", image="curlimages/curl:8.8.0",
        command=["sh", "-c"],
        arguments=['curl -s -X POST "$HOOK" -d "{\\"text\\": \\"meter-theft $0 $1 finished\\"}"', utility, month],
    )
    notify.add_env_variable(V1EnvVar(name="HOOK", value_from=V1EnvVarSource(
        secret_key_ref=V1SecretKeySelector(name="grid-alerts", key="webhook"))))
    with dsl.ExitHandler(notify):
        vop = dsl.VolumeOp(name="work-volume", resource_name="ntl-work", size="100Gi", modes=dsl.VOLUME_MODE_RWO)
        with dsl.ParallelFor(["residential", "commercial"]) as seg:
            pull = pull_op(segment=seg, utility=utility, month=month, ami_root=ami_root)
        weather = dsl.ContainerOp(
            name="fetch-weather", image="ghcr.io/gridml/etl-tools:2025.07",
            command=["make", "-C", "/opt/etl", "weather"],
            arguments=["DATA=s3://noaa-isd-mirror/2025/", "STATIONS=/opt/etl/stations_norcal.txt", "OUT=/work/weather/"],
            pvolumes={"/work": vop.volume},
        )
        labels = dsl.ContainerOp(
            name="pull-labels", image="ghcr.io/gridml/dvc:3.55",
            command=["bash", "-c"],
            arguments=['''set -euo pipefail
git clone --depth 1 https://git.grid.example/analytics/ntl-labels.git /work/repo
cd /work/repo
dvc remote add -d -f fieldcases s3://ami-labels/dvcstore
dvc pull data/theft_cases.csv.dvc
'''],
            pvolumes={"/work": weather.pvolume},
        )
        train = train_op(utility=utility, month=month, features_root="s3://ami-features")
        train.add_pvolumes({"/work": labels.pvolume})
        train.after(pull)
        train.set_gpu_limit(4)
        train.add_node_selector_constraint("nvidia.com/gpu.product", "NVIDIA-L40S")
        train.add_toleration(V1Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"))
        train.add_env_variable(V1EnvVar(name="AWS_ACCESS_KEY_ID", value_from=V1EnvVarSource(
            secret_key_ref=V1SecretKeySelector(name="ami-s3", key="access_key"))))
        with dsl.Condition(train.output > min_auprc):
            dsl.ContainerOp(
                name="publish-scores", image="amazon/aws-cli:2.17.0",
                command=["aws", "s3", "cp", "--recursive"],
                arguments=[f"s3://ami-models/ntl/{utility}/{month}/", f"s3://ami-serving/ntl/{utility}/",
                           "--exclude", "*", "--include", "*.onnx"],
            )


if __name__ == "__main__":
    kfp.compiler.Compiler().compile(pipeline, __file__.replace(".py", ".yaml"))
