# ruff: noqa
"""Brewery fermentation curves: per-tank gravity/temperature pulls, attenuation forecaster, nightly report."""
import json
import kfp
from kfp import dsl
from kfp.components import create_component_from_func
from kubernetes.client import V1EnvVar, V1EnvVarSource, V1SecretKeySelector

MINIO = "http://minio.brewops.svc:9000"


def pull_tank(tank: str, brewery: str, source_kind: str, month: str) -> str:
    import os
    import pyarrow.parquet as pq
    import s3fs
    SOURCES = {
        "lab": "s3://brew-lab/gravity",
        "sensor": "s3://brew-iot/tilt",
    }
    fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": os.environ["S3_ENDPOINT"]})
    src = SOURCES[source_kind]
    table = pq.read_table(f"{src}/{brewery}/{tank}/{month}.parquet", filesystem=fs)
    out = f"s3://brew-features/{brewery}/{month}/{tank}.parquet"
    pq.write_table(table, out.removeprefix("s3://"), filesystem=fs)
    return out


def train_forecaster(brewery: str, month: str, tanks: str, yeast_table: str) -> str:
    import json, os
    import pandas as pd
    from datasets import load_dataset
    opts = {"client_kwargs": {"endpoint_url": os.environ["S3_ENDPOINT"]}}
    files = [f"s3://brew-features/{brewery}/{month}/{t}.parquet" for t in json.loads(tanks)]
    ds = load_dataset("parquet", data_files={"train": files}, storage_options=opts)["train"]
    yeast = pd.read_csv(yeast_table, storage_options=opts)
    model_uri = f"s3://brew-models/attenuation/{brewery}/{month}/model.json"
    with open("/tmp/model.json", "w") as f:
        json.dump({"rows": ds.num_rows, "strains": len(yeast)}, f)
    import fsspec
    fsspec.filesystem("s3", **opts).put("/tmp/model.json", model_uri)
    return model_uri


pull_op = create_component_from_func(pull_tank, base_image="ghcr.io/brewml/py:2025.06")
train_op = create_component_from_func(train_forecaster, base_image="ghcr.io/brewml/forecast:0.6.0")

REPORT = """set -euo pipefail
export REPORT_DAY=$(date +%F)
cat > /tmp/report.tmpl <<'EOF'
{"model": "s3://brew-models/attenuation/${BREWERY}/${MONTH}/model.json",
 "recipes": "s3://brew-lab/recipes/${BREWERY}/active.yaml"}
EOF
envsubst < /tmp/report.tmpl > /tmp/report.json
python -m brewml.report --spec /tmp/report.json --html /tmp/report.html
aws --endpoint-url "$S3_ENDPOINT" s3 cp /tmp/report.html "s3://brew-reports/${BREWERY}/${MONTH}/nightly-${REPORT_DAY}.html"
"""


@dsl.pipeline(name="beer-fermentation")
def pipeline(brewery: str = "north-yard", month: str = "2025-06", tanks: str = '["fv01", "fv02", "fv03"]',
             source_kind: str = "sensor", yeast_table: str = "s3://brew-lab/yeast/strains_2025.csv"):
    endpoint = V1EnvVar(name="S3_ENDPOINT", value=MINIO)
    with dsl.ParallelFor(tanks) as tank:
        p = pull_op(tank=tank, brewery=brewery, source_kind=source_kind, month=month)
        p.add_env_variable(endpoint)
        p.set_retry(3)
    t = train_op(brewery=brewery, month=month, tanks=tanks, yeast_table=yeast_table).after(p)
    t.add_env_variable(endpoint)
    t.add_node_selector_constraint("node.kubernetes.io/instance-type", "m6i.4xlarge")
    with dsl.Condition(t.output != ""):
        r = dsl.ContainerOp(
            name="nightly-report", image="ghcr.io/brewml/report:0.3.1",
            command=["bash", "-c", REPORT],
        )
        r.add_env_variable(endpoint)
        r.add_env_variable(V1EnvVar(name="BREWERY", value=brewery))
        r.add_env_variable(V1EnvVar(name="MONTH", value=month))
        r.add_env_variable(V1EnvVar(name="AWS_ACCESS_KEY_ID", value_from=V1EnvVarSource(
            secret_key_ref=V1SecretKeySelector(name="brew-minio", key="access_key"))))
        r.add_env_variable(V1EnvVar(name="AWS_SECRET_ACCESS_KEY", value_from=V1EnvVarSource(
            secret_key_ref=V1SecretKeySelector(name="brew-minio", key="secret_key"))))


if __name__ == "__main__":
    kfp.compiler.Compiler().compile(pipeline, __file__.replace(".py", ".yaml"))
