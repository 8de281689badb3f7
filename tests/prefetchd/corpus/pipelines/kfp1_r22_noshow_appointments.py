# ruff: noqa
"""Outpatient appointment no-show prediction per clinic network (KFP v1)."""
import kfp
from kfp import dsl, onprem
from kubernetes.client.models import V1EnvVar
from kfp.components import InputPath, OutputPath, create_component_from_func

CEPH = "http://rgw.ceph-health.svc.cluster.local:7480"


def extract_visits(year: str, region: str, visits_path: OutputPath("Parquet")):
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq
    from pyarrow import fs
    import pandas as pd
    s3 = fs.S3FileSystem(endpoint_override="http://rgw.ceph-health.svc.cluster.local:7480", scheme="http")
    CFG = {
        "visits": f"clinic-ehr/visits/year={year}/region={region}/",
        "icd": "s3://clinic-ref/icd10/icd10cm_2025_groups.csv",
    }
    table = ds.dataset(CFG["visits"], format="parquet", filesystem=s3).to_table(
        columns=["patient_key", "clinic", "slot_ts", "booked_ts", "icd10", "status"])
    icd = pd.read_csv(CFG["icd"], storage_options={"client_kwargs": {"endpoint_url": "http://rgw.ceph-health.svc.cluster.local:7480"}})
    df = table.to_pandas().merge(icd, on="icd10", how="left")
    df.to_parquet(visits_path)


extract_op = create_component_from_func(extract_visits, base_image="ghcr.io/medops-ml/py:2025.07",
                                        packages_to_install=[])


def pull_sms_op(region):
    return dsl.ContainerOp(
        name="pull-sms-logs",
        image="amazon/aws-cli:2.17.0",
        command=["bash", "-c"],
        arguments=['''set -euxo pipefail
REGION="$0"
STAGE=/work/sms/"$REGION"
trap 'rm -rf /tmp/sms-partial' EXIT
mkdir -p "$STAGE" /tmp/sms-partial
aws --endpoint-url "${S3_ENDPOINT:-http://rgw.ceph-health.svc.cluster.local:7480}" \\
    s3 sync "s3://clinic-sms/delivery-logs/${REGION}/2025/" /tmp/sms-partial/ --exclude "*.tmp"
find /tmp/sms-partial -name '*.json.gz' -exec gunzip {} +
find /tmp/sms-partial -name '*.json' -exec mv -t "$STAGE" {} +
''', region],
    )


def train_op(clinic, algo, visits, year):
    return dsl.ContainerOp(
        name="train-clinic",
        image="ghcr.io/medops-ml/noshow-train:2.4.1",
        command=["python", "-m", "noshow.train"],
        arguments=["--visits", dsl.InputArgumentPath(visits),
                   "--sms-dir", "/work/sms",
                   "--closures", f"s3://clinic-ref/calendars/{clinic}_closures_{year}.csv",
                   "--algo", algo,
                   "--model-out", f"s3://clinic-models/noshow/{clinic}/{algo}/{year}/"],
    )


def cleanup_op():
    return dsl.ContainerOp(
        name="cleanup-sms",
        image="busybox:1.36",
        command=["sh", "-c", "rm -rf /work/sms && echo cleaned"],
    )


@dsl.pipeline(name="noshow-appointments", description="clinic no-show models")
def noshow(year: str = "2025", region: str = "pnw"):
    vol = onprem.mount_pvc("noshow-work", "work", "/work")
    exit_task = cleanup_op().apply(vol)
    with dsl.ExitHandler(exit_task):
        ex = extract_op(year=year, region=region).set_retry(3)
        sms = pull_sms_op(region).apply(vol)
        sms.add_env_variable(V1EnvVar(name="S3_ENDPOINT", value=CEPH))
        with dsl.ParallelFor([{"clinic": "tacoma", "algo": "xgb"},
                              {"clinic": "spokane", "algo": "xgb"},
                              {"clinic": "boise", "algo": "logreg"}]) as item:
            tr = train_op(item.clinic, item.algo, ex.outputs["visits"], year).apply(vol).after(sms)


if __name__ == "__main__":
    kfp.compiler.Compiler().compile(noshow, __file__.replace(".py", ".yaml"))
