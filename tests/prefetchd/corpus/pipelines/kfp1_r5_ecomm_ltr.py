# ruff: noqa
import kfp
from kfp import dsl
from kfp.components import create_component_from_func, OutputPath


def build_features(click_logs: str, catalog: str, features_path: OutputPath(str)):
    import dask.dataframe as dd
    import pandas as pd
    clicks = dd.read_parquet(click_logs + "part-*.parquet")
    prods = pd.read_parquet(catalog)
    clicks.merge(prods, on="sku").to_parquet(features_path)


def train_lambdamart(locale: str, model_bucket: str):
    import json
    import boto3
    s3 = boto3.client("s3")
    obj = s3.get_object(Bucket="acme-shop", Key=f"ltr/judgments/{locale}/manifest.json")
    manifest = json.load(obj["Body"])
    parts = [s3.get_object(Bucket="acme-shop", Key=k)["Body"].read() for k in manifest["keys"]]
    with open("/tmp/model.txt", "w") as f:
        f.write("tree\n")
    s3.upload_file("/tmp/model.txt", model_bucket, f"ltr/lambdamart/{locale}/model.txt")


def offline_eval(model_bucket: str):
    import pandas as pd
    golden = pd.read_csv("s3://acme-shop/ltr/eval/queries-golden.csv", storage_options={"anon": False})
    print(len(golden), model_bucket)


feat_op = create_component_from_func(build_features, base_image="ghcr.io/acme-shop/ltr:0.12.0")
train_op = create_component_from_func(train_lambdamart, base_image="ghcr.io/acme-shop/ltr:0.12.0")
eval_op = create_component_from_func(offline_eval, base_image="ghcr.io/acme-shop/ltr:0.12.0")


@dsl.pipeline(name="shop-search-ltr")
def shop_ltr(
    click_logs: str = "s3://acme-shop/clicklogs/dt=2024-11-17/",
    catalog: str = "s3://acme-shop/catalog/products-2024-11-17.parquet",
    locales: list = ["en_US", "de_DE", "ja_JP"],
    model_bucket: str = "acme-shop-models",
    run_eval: str = "true",
):
    feats = feat_op(click_logs=click_logs, catalog=catalog)
    with dsl.ParallelFor(locales, parallelism=2) as loc:
        tr = train_op(locale=loc, model_bucket=model_bucket).after(feats)
    with dsl.Condition(run_eval == "true"):
        eval_op(model_bucket=model_bucket).after(tr)


if __name__ == "__main__":
    kfp.compiler.Compiler().compile(shop_ltr, __file__.replace(".py", ".yaml"))
