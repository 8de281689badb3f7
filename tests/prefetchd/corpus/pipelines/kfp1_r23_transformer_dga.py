# ruff: noqa
"""Power-transformer dissolved-gas analysis: per-substation x gas pulls, fault classifier, holdout evaluation."""
import kfp
from kfp import dsl, onprem
from kfp.components import create_component_from_func
from kubernetes.client import V1EnvVar

MINIO = "http://minio.gridops.svc:9000"


def list_substations(fleet: str) -> list:
    import json, boto3
    s3 = boto3.client("s3", endpoint_url="http://minio.gridops.svc:9000")
    body = s3.get_object(Bucket="dga-telemetry", Key=f"fleets/{fleet}/substations.json")["Body"].read()
    return [s["id"] for s in json.loads(body) if s["online"]]


def train_classifier(fleet: str, limits_key: str, cache_dir: str) -> float:
    import json, s3fs
    import pandas as pd
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.model_selection import cross_val_score
    import joblib
    fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": "http://minio.gridops.svc:9000"})
    with fs.open(f"dga-ref/{limits_key}") as f:
        limits = json.load(f)
    df = pd.read_parquet(cache_dir)
    X, y = df.drop(columns=["fault"]), df.fault
    clf = HistGradientBoostingClassifier(max_iter=400).fit(X, y)
    joblib.dump(clf, "/tmp/clf.joblib")
    fs.put("/tmp/clf.joblib", f"dga-models/{fleet}/hgb/clf.joblib")
    return float(cross_val_score(clf, X, y, cv=5, scoring="f1_macro").mean())


list_op = create_component_from_func(list_substations, base_image="ghcr.io/gridops/py:2025.06")
train_op = create_component_from_func(train_classifier, base_image="ghcr.io/gridops/dga-ml:2.2.0")


def fetch_gas_op(sub, gas):
    return dsl.ContainerOp(
        name="fetch-gas",
        image="peakcom/s5cmd:v2.2.2",
        command=["sh", "-c"],
        arguments=['s5cmd --endpoint-url "$0" cp "s3://dga-telemetry/online/$1/$2/2025/*.csv" "/cache/$1/$2/"', MINIO, sub, gas],
    )


@dsl.pipeline(name="transformer-dga")
def pipeline(fleet: str = "ercot-north", limits_key: str = "iec60599/limits_2022.json", min_f1: float = 0.7):
    subs = list_op(fleet)
    with dsl.ParallelFor(subs.output, parallelism=4) as sub:
        with dsl.ParallelFor(["h2", "c2h2", "ch4"]) as gas:
            fg = fetch_gas_op(sub, gas).apply(onprem.mount_pvc("dga-cache", "cache", "/cache"))
    train = train_op(fleet, limits_key, "/cache").apply(onprem.mount_pvc("dga-cache", "cache", "/cache"))
    train.after(fg)
    train.set_retry(2)
    with dsl.Condition(train.output >= min_f1):
        dsl.ContainerOp(
            name="evaluate-holdout", image="ghcr.io/gridops/dga-ml:2.2.0",
            command=["python", "-m", "dga.evaluate"],
            arguments=["--model", f"s3://dga-models/{fleet}/hgb/clf.joblib",
                       "--holdout", "s3://dga-ref/holdout/duval_triangle_cases.parquet",
                       "--report", f"s3://dga-reports/{fleet}/holdout.html"],
        ).add_env_variable(V1EnvVar(name="AWS_ENDPOINT_URL", value=MINIO))


if __name__ == "__main__":
    kfp.compiler.Compiler().compile(pipeline, __file__.replace(".py", ".yaml"))
