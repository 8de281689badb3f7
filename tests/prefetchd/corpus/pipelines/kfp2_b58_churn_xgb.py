# ruff: noqa
"""Telco churn with XGBoost, adapted from the KFP "XGBoost sample", "Control flow" and
"Data passing in Python components" samples (KFP v2).

The team swapped the sample's Chicago-taxi download for its own MinIO bucket
but kept the sample's URL download step (now fetching a public copy of the
Telco dataset used as a reference sample) and the coin-flip demo branch.
`test_uri` keeps the sample's default in the function signature; the real
value is set at compile time with `pipeline_parameters`. `project` is left
over from the GCP version of the sample and is not used.

Compile: python kfp2_b58_churn_xgb.py  -> kfp2_b58_churn_xgb.yaml
"""
import os

from kfp import compiler, components, dsl
from kfp.dsl import Dataset, Input, Model, Output

MINIO = 'http://minio.churn-ml.svc.cluster.local:9000'

# components/contrib/web/Download/component.yaml, copied from the sample
download_url_op = components.load_component_from_text('''
name: Download data
inputs:
- {name: Url, type: String}
- {name: curl options, type: String, default: '--location'}
outputs:
- {name: Data}
metadata:
  annotations:
    author: Alexey Volkov <alexey.volkov@ark-kun.com>
implementation:
  container:
    image: byrnedo/alpine-curl@sha256:548379d0a4a0c08b9e55d9d87a592b7d35d9ab3037f4936f5ccd09d0b625a342
    command:
    - sh
    - -exc
    - |
      url="$0"
      output_path="$1"
      curl_options="$2"
      mkdir -p "$(dirname "$output_path")"
      curl --get "$url" --output "$output_path" $curl_options
    - inputValue: Url
    - outputPath: Data
    - inputValue: curl options
''')

# the team's copy for its MinIO bucket
download_s3_op = components.load_component_from_text('''
name: Download from S3
inputs:
- {name: Uri, type: String}
outputs:
- {name: Data, type: Dataset}
implementation:
  container:
    image: amazon/aws-cli:2.15.30
    command:
    - sh
    - -exc
    - |
      mkdir -p "$(dirname "$1")"
      aws s3 cp "$0" "$1"
    - inputValue: Uri
    - outputPath: Data
''')


@dsl.component(base_image='python:3.11-slim')
def flip_coin() -> str:
    import random
    return 'heads' if random.randint(0, 1) == 0 else 'tails'


@dsl.component(base_image='python:3.11-slim')
def print_msg(msg: str):
    print(msg)


@dsl.component(base_image='python:3.11-slim', packages_to_install=['pandas==2.2.2', 'pyarrow==16.1.0', 's3fs==2024.6.0'])
def prepare_features(train: Input[Dataset], reference: Input[Dataset], catalog_uri: str, features: Output[Dataset]):
    import os
    import pandas as pd
    df = pd.read_csv(train.path)
    ref = pd.read_csv(reference.path)
    catalog = pd.read_parquet(catalog_uri, storage_options={'client_kwargs': {'endpoint_url': os.environ['AWS_ENDPOINT_URL']}})
    df = df[df.columns.intersection(ref.columns)].merge(catalog, on='plan_id', how='left')
    df.to_csv(features.path, index=False)


@dsl.component(base_image='python:3.11-slim', packages_to_install=['pandas==2.2.2', 'xgboost==2.0.3'])
def xgboost_train(features: Input[Dataset], label_column: str, num_iterations: int, model: Output[Model]):
    import pandas as pd
    import xgboost as xgb
    df = pd.read_csv(features.path)
    y = (df.pop(label_column) == 'Yes').astype(int)
    booster = xgb.train({'objective': 'binary:logistic'}, xgb.DMatrix(pd.get_dummies(df), label=y), num_iterations)
    booster.save_model(model.path)


@dsl.component(base_image='python:3.11-slim', packages_to_install=['pandas==2.2.2', 'xgboost==2.0.3'])
def xgboost_predict(model: Input[Model], test: Input[Dataset], label_column: str, predictions: Output[Dataset]):
    import pandas as pd
    import xgboost as xgb
    df = pd.read_csv(test.path)
    booster = xgb.Booster(model_file=model.path)
    df['score'] = booster.predict(xgb.DMatrix(pd.get_dummies(df.drop(columns=[label_column]))))
    df.to_csv(predictions.path, index=False)


@dsl.component(base_image='python:3.11-slim', packages_to_install=['pandas==2.2.2', 'scikit-learn==1.5.0'])
def evaluate(predictions: Input[Dataset], label_column: str) -> float:
    import pandas as pd
    from sklearn.metrics import roc_auc_score
    df = pd.read_csv(predictions.path)
    return float(roc_auc_score((df[label_column] == 'Yes').astype(int), df['score']))


@dsl.container_component
def upload_predictions(predictions: Input[Dataset], dest_uri: str):
    return dsl.ContainerSpec(image='amazon/aws-cli:2.15.30', command=['aws', 's3', 'cp'],
                             args=[predictions.path, dest_uri])


@dsl.pipeline(name='telco-churn-xgboost', description='XGBoost sample adapted to the churn bucket')
def churn_pipeline(
    train_uri: str = 's3://churn-ml/raw/telco/train.csv',
    test_uri: str = 's3://ml-pipeline/sample-data/chicago-taxi/test.csv',
    reference_url: str = 'https://raw.githubusercontent.com/IBM/telco-customer-churn-on-icp4d/master/data/Telco-Customer-Churn.csv',
    catalog_uri: str = 's3://churn-ml/reference/plan_catalog.parquet',
    label_column: str = 'Churn',
    num_iterations: int = 200,
    project: str = 'my-gcp-project',
    scores_uri: str = 's3://churn-ml/scores/latest/predictions.csv',
):
    # demo branch kept from the control-flow sample
    flip = flip_coin()
    with dsl.If(flip.output == 'heads'):
        print_msg(msg='heads: keep calm and retrain')
    with dsl.Else():
        print_msg(msg='tails: retrain anyway')

    train = download_s3_op(uri=train_uri).set_env_variable('AWS_ENDPOINT_URL', MINIO)
    test = download_s3_op(uri=test_uri).set_env_variable('AWS_ENDPOINT_URL', MINIO)
    ref = download_url_op(url=reference_url)

    feats = prepare_features(train=train.outputs['data'], reference=ref.outputs['data'], catalog_uri=catalog_uri)
    feats.set_env_variable('AWS_ENDPOINT_URL', MINIO)
    feats.set_caching_options(False)

    model = xgboost_train(features=feats.outputs['features'], label_column=label_column,
                          num_iterations=num_iterations)
    pred = xgboost_predict(model=model.outputs['model'], test=test.outputs['data'], label_column=label_column)
    ev = evaluate(predictions=pred.outputs['predictions'], label_column=label_column)
    with dsl.If(ev.output > 0.8):
        up = upload_predictions(predictions=pred.outputs['predictions'], dest_uri=scores_uri)
        up.set_env_variable('AWS_ENDPOINT_URL', MINIO)


if __name__ == '__main__':
    compiler.Compiler().compile(churn_pipeline, os.path.splitext(__file__)[0] + '.yaml',
                                pipeline_parameters={'test_uri': 's3://churn-ml/raw/telco/test.csv'})
