# ruff: noqa
"""Monthly claims-fraud model refresh from driving telematics (insurance).

Per state, Spark-free extraction of trip summaries onto the team's shared
scratch claim; a lightweight component joins them with the policy export;
a YAML component trains the GBM warm-started from last month's model; the
evaluation reads its holdout through an env var; the model is published only
when the AUC clears the floor. Run logs are archived whatever happens.
"""
import os

from kfp import compiler, components, dsl
from kubernetes.client import models as k8s

IMG = "ghcr.io/drivewise/claims-ml:4.8.0"

TRAIN_YAML = """
name: Train fraud model
inputs:
- {name: features_dir, type: String}
- {name: init_model, type: String}
- {name: model_dir, type: String}
- {name: num_rounds, type: Integer, default: '800'}
implementation:
  container:
    image: ghcr.io/drivewise/claims-ml:4.8.0
    command: [python, -m, fraud.train]
    args:
    - --features-dir
    - {inputValue: features_dir}
    - --init-model
    - {inputValue: init_model}
    - --num-rounds
    - {inputValue: num_rounds}
    - --model-out
    - {inputValue: model_dir}
"""


def join_policies(policy_export: str, trips_root: str, out_dir: str) -> int:
    import glob
    import os

    import pandas as pd

    pol = pd.read_parquet(policy_export, columns=["policy_id", "vehicle_id", "state", "tenure_m", "prior_claims"])
    parts = [pd.read_parquet(p) for p in glob.glob(os.path.join(trips_root, "*", "trips.parquet"))]
    trips = pd.concat(parts, ignore_index=True)
    feats = trips.groupby("vehicle_id").agg(
        hard_brakes_per_100km=("hard_brakes_per_100km", "mean"),
        night_share=("night_share", "mean"),
        km=("km", "sum"),
    ).reset_index()
    df = feats.merge(pol, on="vehicle_id", how="inner")
    os.makedirs(out_dir, exist_ok=True)
    df.to_parquet(os.path.join(out_dir, "features.parquet"))
    return len(df)


join_policies_op = components.create_component_from_func(
    join_policies, base_image=IMG, packages_to_install=["s3fs==2023.12.2"]
)


def scratch():
    return k8s.V1Volume(
        name="scratch",
        persistent_volume_claim=k8s.V1PersistentVolumeClaimVolumeSource(claim_name="telematics-scratch"),
    )


def mount(op, sub):
    op.add_volume(scratch())
    op.container.add_volume_mount(k8s.V1VolumeMount(name="scratch", mount_path="/shared", sub_path=sub))
    return op


@dsl.pipeline(name="claims-fraud-telematics", description="Monthly fraud model refresh")
def claims_fraud_telematics(
    trip_root: str = "s3://drivewise-telematics/trips",
    month: str = "2025-06",
    states: list = ["CA", "TX", "FL"],
    policy_export: str = "s3://drivewise-policy/exports/2025-06-30/policies.parquet",
    auc_floor: float = 0.78,
):
    archive = dsl.ContainerOp(
        name="archive-run-logs",
        image="amazon/aws-cli:2.17.0",
        command=["sh", "-c"],
        arguments=['aws s3 sync /shared/logs/ "s3://drivewise-ml-logs/fraud/$0/{{workflow.uid}}/"', month],
    )
    mount(archive, "fraud/" + "{{workflow.uid}}")

    with dsl.ExitHandler(archive):
        with dsl.ParallelFor(states, parallelism=3) as st:
            ex = dsl.ContainerOp(
                name="extract-trips",
                image=IMG,
                command=["python", "-m", "telematics.extract"],
                arguments=[
                    "--input", f"{trip_root}/state={st}/month={month}/",
                    "--output", f"/shared/trips/{st}/trips.parquet",
                    "--min-trip-km", "0.5",
                ],
            )
            mount(ex, "fraud/" + "{{workflow.uid}}")
            ex.set_retry(3)
            ex.set_memory_limit("24G")

        jn = join_policies_op(policy_export=policy_export, trips_root="/shared/trips", out_dir="/shared/features").after(ex)
        mount(jn, "fraud/" + "{{workflow.uid}}")

        train_op = components.load_component_from_text(TRAIN_YAML)
        tr = train_op(
            features_dir="/shared/features",
            init_model="s3://drivewise-models/fraud-gbm/2025-05/model.txt",
            model_dir="/shared/model",
        ).after(jn)
        mount(tr, "fraud/" + "{{workflow.uid}}")
        tr.set_retry(2)

        ev = dsl.ContainerOp(
            name="evaluate-model",
            image=IMG,
            command=["sh", "-c"],
            arguments=[
                'python -m fraud.evaluate --holdout "$HOLDOUT_URI" --model /shared/model/model.txt '
                "--auc-file /tmp/auc.txt --log-dir /shared/logs"
            ],
            file_outputs={"auc": "/tmp/auc.txt"},
        ).after(tr)
        ev.container.add_env_variable(
            k8s.V1EnvVar(name="HOLDOUT_URI", value="s3://drivewise-ml/fraud/holdout/2025-05/claims_labeled.parquet")
        )
        mount(ev, "fraud/" + "{{workflow.uid}}")

        with dsl.Condition(ev.outputs["auc"] >= auc_floor):
            pub = dsl.ContainerOp(
                name="publish-model",
                image="amazon/aws-cli:2.17.0",
                command=["sh", "-c"],
                arguments=[
                    'aws s3 cp /shared/model/model.txt "s3://drivewise-models/fraud-gbm/$0/model.txt" && '
                    'aws s3 cp /shared/model/feature_importance.json "s3://drivewise-models/fraud-gbm/$0/feature_importance.json"',
                    month,
                ],
            )
            mount(pub, "fraud/" + "{{workflow.uid}}")


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    compiler.Compiler().compile(claims_fraud_telematics, os.path.join(here, "kfp1_r18_telematics_fraud.yaml"))
