# ruff: noqa
"""Daily contamination screening for drinking-water distribution networks: SCADA sensor streams + LIMS lab results -> isolation forest alerts."""
from hera.workflows import (DAG, Container, Env, Parameter, Resources, SecretEnv, Workflow, script, models as m)


@script(image="ghcr.io/h2o-analytics/screening:3.2.1", inputs=[Parameter(name="day")],
        volume_mounts=[m.VolumeMount(name="scratch", mount_path="/scratch")])
def fetch_lab_results(day: str):
    import pandas as pd

    month = day[:7]
    lab = pd.read_csv(f"s3://h2o-lab/lims/exports/{month}/results.csv", parse_dates=["sampled_at"])
    lab = lab[lab["sampled_at"].dt.strftime("%Y-%m-%d") <= day]
    lab.pivot_table(index=["site_id", "sampled_at"], columns="analyte", values="value").reset_index().to_parquet(
        "/scratch/lab/results.parquet", index=False)


@script(image="ghcr.io/h2o-analytics/screening:3.2.1",
        inputs=[Parameter(name="day"), Parameter(name="utility")],
        resources=Resources(cpu_request="4", memory_request="16Gi"),
        volume_mounts=[m.VolumeMount(name="scratch", mount_path="/scratch")],
        env=[Env(name="MODEL_URI", value="s3://h2o-models/iforest/v7/model.joblib")])
def detect_anomalies(day: str, utility: str):
    import glob
    import os

    import fsspec
    import joblib
    import pandas as pd

    frames = [pd.read_csv(p) for p in glob.glob(f"/scratch/{utility}/raw/*.csv.gz")]
    sensors = pd.concat(frames, ignore_index=True)
    lab = pd.read_parquet("/scratch/lab/results.parquet")
    with fsspec.open(os.environ["MODEL_URI"], "rb") as f:
        model = joblib.load(f)
    feats = sensors.groupby(["site_id", pd.Grouper(key="ts", freq="15min")]).agg(
        chlorine=("free_chlorine", "mean"), turbidity=("turbidity", "max"), ph=("ph", "mean")).reset_index()
    feats["score"] = -model.score_samples(feats[["chlorine", "turbidity", "ph"]])
    alerts = feats[feats["score"] > 0.62].merge(lab, on="site_id", how="left")
    alerts.to_parquet(f"s3://h2o-alerts/{day}/{utility}.parquet", index=False)


@script(image="ghcr.io/h2o-analytics/screening:3.2.1", inputs=[Parameter(name="day")])
def summarize_alerts(day: str):
    import pandas as pd

    alerts = pd.read_parquet(f"s3://h2o-alerts/{day}/")
    summary = alerts.groupby("site_id").size().rename("n_alerts").reset_index()
    summary.to_csv(f"s3://h2o-reports/daily/{day}/alert_summary.csv", index=False)
    print(len(summary))


with Workflow(
    generate_name="water-quality-screening-",
    entrypoint="screen",
    on_exit="archive-logs",
    arguments=[
        Parameter(name="day", value="2025-06-17"),
        Parameter(name="utilities", value='["metro-east", "riverside", "hillcrest"]'),
    ],
    volumes=[m.Volume(name="scratch", persistent_volume_claim=m.PersistentVolumeClaimVolumeSource(claim_name="h2o-scratch"))],
    service_account_name="h2o-pipelines",
) as w:
    pull = Container(
        name="pull-scada",
        image="amazon/aws-cli:2.17.0",
        inputs=[Parameter(name="utility")],
        command=["sh", "-c"],
        args=['mkdir -p /scratch/{{inputs.parameters.utility}}/raw && '
              'aws s3 sync "s3://h2o-scada/raw/{{inputs.parameters.utility}}/dt={{workflow.parameters.day}}/" '
              '/scratch/{{inputs.parameters.utility}}/raw/ --only-show-errors'],
        env=[Env(name="AWS_DEFAULT_REGION", value="us-east-2")],
        volume_mounts=[m.VolumeMount(name="scratch", mount_path="/scratch")],
    )
    page = Container(
        name="page-oncall",
        image="curlimages/curl:8.8.0",
        inputs=[Parameter(name="count")],
        command=["sh", "-c"],
        args=['curl -sf -X POST "$PAGER_URL" -H "Content-Type: application/json" '
              '-d "{\\"summary\\": \\"{{inputs.parameters.count}} sites with water-quality alerts\\"}"'],
        env=[SecretEnv(name="PAGER_URL", secret_name="h2o-pager", secret_key="url")],
    )
    archive = Container(
        name="archive-logs",
        image="amazon/aws-cli:2.17.0",
        command=["sh", "-c"],
        args=['aws s3 cp /scratch/run.log "s3://h2o-ops/logs/{{workflow.parameters.day}}/{{workflow.name}}.log" || true'],
        volume_mounts=[m.VolumeMount(name="scratch", mount_path="/scratch")],
    )
    with DAG(name="screen"):
        p = pull(name="pull-scada", arguments={"utility": "{{item}}"}, with_param="{{workflow.parameters.utilities}}")
        lab = fetch_lab_results(name="fetch-lab-results", arguments={"day": "{{workflow.parameters.day}}"})
        det = detect_anomalies(name="detect-anomalies",
                               arguments={"day": "{{workflow.parameters.day}}", "utility": "{{item}}"},
                               with_param="{{workflow.parameters.utilities}}")
        summ = summarize_alerts(name="summarize-alerts", arguments={"day": "{{workflow.parameters.day}}"})
        pg = page(name="page-oncall", arguments={"count": summ.result},
                  when=f"{summ.result} > 0")
        [p, lab] >> det >> summ >> pg

if __name__ == "__main__":
    open(__file__.replace(".py", ".yaml"), "w").write(w.to_yaml())
