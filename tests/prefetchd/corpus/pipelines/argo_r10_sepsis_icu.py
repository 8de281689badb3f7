# ruff: noqa
"""Early sepsis warning (Sepsis-3, 6h horizon) on MIMIC-IV, as a WorkflowTemplate (Hera).

Clinical-ML platform. Vitals come from the Delta lakehouse (pinned table
version for reproducibility), labs from hive-partitioned parquet via polars;
cohort + labels are joined, a GRU is trained, then fairness and calibration
audits gate model registration.
"""
from hera.workflows import (
    DAG,
    Artifact,
    Container,
    Env,
    Parameter,
    Resources,
    RetryStrategy,
    WorkflowTemplate,
    models as m,
    script,
)

LAKE = "s3://icu-lakehouse"
PY = "ghcr.io/icu-ml/lakehouse-py:3.11-2025.04"   # deltalake, polars, pyarrow, s3fs baked in
AWS_ENV = [
    m.EnvVar(name="AWS_REGION", value="eu-central-1"),
    m.EnvVar(name="AWS_ACCESS_KEY_ID", value_from=m.EnvVarSource(secret_key_ref=m.SecretKeySelector(name="icu-lake-ro", key="access-key"))),
    m.EnvVar(name="AWS_SECRET_ACCESS_KEY", value_from=m.EnvVarSource(secret_key_ref=m.SecretKeySelector(name="icu-lake-ro", key="secret-key"))),
]


@script(image=PY, env=AWS_ENV, outputs=[Artifact(name="vitals", path="/tmp/vitals.parquet")])
def extract_vitals(delta_version: str, cohort_start: str):
    from deltalake import DeltaTable
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    dt = DeltaTable("s3://icu-lakehouse/silver/mimic_iv/icu/chartevents", version=int(delta_version))
    tbl = dt.to_pyarrow_table(
        columns=["stay_id", "charttime", "itemid", "valuenum"],
        filters=[("itemid", "in", [220045, 220179, 220180, 220210, 223761, 220277])],
    )
    tbl = tbl.filter(pc.greater_equal(tbl["charttime"], pc.strptime(cohort_start, "%Y-%m-%d", "us")))
    pq.write_table(tbl, "/tmp/vitals.parquet")


@script(image=PY, env=AWS_ENV, outputs=[Artifact(name="labs", path="/tmp/labs.parquet")])
def extract_labs(cohort_start: str):
    import polars as pl

    labs = (
        pl.scan_parquet("s3://icu-lakehouse/silver/mimic_iv/hosp/labevents/chart_month=*/*.parquet",
                        hive_partitioning=True)
        .filter(pl.col("itemid").is_in([50813, 50885, 50912, 51265, 51301, 50821]))
        .filter(pl.col("charttime") >= pl.lit(cohort_start).str.to_datetime())
        .select("subject_id", "hadm_id", "charttime", "itemid", "valuenum")
    )
    labs.sink_parquet("/tmp/labs.parquet")


@script(
    image=PY,
    env=AWS_ENV + [m.EnvVar(name="SEPSIS3_ONSETS_URI", value="s3://icu-lakehouse/gold/sepsis3/onset_times_v2.parquet")],
    inputs=[Artifact(name="vitals", path="/in/vitals.parquet"), Artifact(name="labs", path="/in/labs.parquet")],
    outputs=[Artifact(name="cohort", path="/tmp/cohort.parquet")],
)
def label_sepsis3(horizon_hours: int):
    import os
    import polars as pl

    onsets = pl.read_parquet(os.environ["SEPSIS3_ONSETS_URI"])
    v = pl.read_parquet("/in/vitals.parquet")
    l = pl.read_parquet("/in/labs.parquet")
    grid = v.join_asof(l.sort("charttime"), on="charttime", strategy="backward")
    grid = grid.join(onsets, on="stay_id", how="left").with_columns(
        label=(pl.col("sepsis_onset") - pl.col("charttime")).dt.total_hours().is_between(0, horizon_hours))
    grid.write_parquet("/tmp/cohort.parquet")


with WorkflowTemplate(
    name="sepsis-early-warning",
    entrypoint="pipeline",
    service_account_name="clinical-ml",
    arguments=[
        Parameter(name="delta-version", value="412"),
        Parameter(name="cohort-start", value="2015-01-01"),
        Parameter(name="horizon-hours", value="6"),
        Parameter(name="model-version", value="v14"),
    ],
    pod_gc=m.PodGC(strategy="OnWorkflowSuccess"),
) as wt:
    train = Container(
        name="train-gru",
        image="ghcr.io/icu-ml/sepsis-gru:1.9.2",
        command=["python", "-m", "sepsis.train"],
        args=[
            "--cohort", "/in/cohort.parquet",
            "--hidden", "128", "--layers", "2", "--max-epochs", "50",
            "--output", "s3://icu-ml-models/sepsis-gru/{{workflow.parameters.model-version}}/",
        ],
        inputs=[Artifact(name="cohort", path="/in/cohort.parquet")],
        outputs=[Artifact(name="holdout", path="/out/holdout_preds.parquet")],
        env=AWS_ENV,
        resources=Resources(gpus=1, memory_request="32Gi"),
        retry_strategy=RetryStrategy(limit="2", retry_policy="OnError"),
    )
    fairness = Container(
        name="fairness-audit",
        image="ghcr.io/icu-ml/model-audit:0.6.0",
        command=["python", "-m", "audit.fairness"],
        args=[
            "--preds", "/in/holdout.parquet",
            "--demographics", "s3://icu-lakehouse/silver/mimic_iv/hosp/patients",
            "--admissions", "s3://icu-lakehouse/silver/mimic_iv/hosp/admissions",
            "--groups", "gender,race,insurance",
            "--max-gap-out", "/tmp/max_gap",
        ],
        inputs=[Artifact(name="holdout", path="/in/holdout.parquet")],
        outputs=[Parameter(name="max-gap", value_from=m.ValueFrom(path="/tmp/max_gap"))],
        env=AWS_ENV,
    )
    calib = Container(
        name="calibration",
        image="ghcr.io/icu-ml/model-audit:0.6.0",
        command=["python", "-m", "audit.calibration"],
        args=["--preds", "/in/holdout.parquet", "--bins", "15", "--ece-out", "/tmp/ece"],
        inputs=[Artifact(name="holdout", path="/in/holdout.parquet")],
        outputs=[Parameter(name="ece", value_from=m.ValueFrom(path="/tmp/ece"))],
    )
    register = Container(
        name="register",
        image="ghcr.io/mlflow/mlflow:v2.14.1",
        command=["python", "-c"],
        args=[
            "import mlflow; mlflow.set_tracking_uri('http://mlflow.clinical-ml.svc:5000'); "
            "mv = mlflow.register_model('s3://icu-ml-models/sepsis-gru/{{workflow.parameters.model-version}}/', 'sepsis-gru'); "
            "mlflow.MlflowClient().set_registered_model_alias('sepsis-gru', 'staging', mv.version)"
        ],
    )

    with DAG(name="pipeline"):
        vit = extract_vitals(arguments={"delta_version": "{{workflow.parameters.delta-version}}",
                                        "cohort_start": "{{workflow.parameters.cohort-start}}"})
        lab = extract_labs(arguments={"cohort_start": "{{workflow.parameters.cohort-start}}"})
        coh = label_sepsis3(arguments=[
            Parameter(name="horizon_hours", value="{{workflow.parameters.horizon-hours}}"),
            vit.get_artifact("vitals").with_name("vitals"),
            lab.get_artifact("labs").with_name("labs"),
        ])
        tr = train(arguments=[coh.get_artifact("cohort").with_name("cohort")])
        fa = fairness(arguments=[tr.get_artifact("holdout").with_name("holdout")])
        ca = calib(arguments=[tr.get_artifact("holdout").with_name("holdout")])
        rg = register(when=f"{fa.get_parameter('max-gap')} < 0.05 && {ca.get_parameter('ece')} < 0.03")
        [vit, lab] >> coh >> tr >> [fa, ca]
        [fa, ca] >> rg

if __name__ == "__main__":
    with open(__file__.replace(".py", ".yaml"), "w") as f:
        f.write(wt.to_yaml())
