# ruff: noqa
"""Card-fraud detection: validate, featurise, XGBoost learning-rate sweep, gated scoring (KFP v2).

Monthly transactions and chargebacks live in S3 (pipeline parameters with
defaults); a merchant-risk table and the labelled holdout set are constants
in code. Features go to an existing shared PVC (``fraud-features``) that the
sweep's training tasks read. The best model is evaluated on the holdout; if
its AUC-PR clears the threshold it is registered and the pending
authorisations of the scoring date are scored and published. A notification
task runs as the exit handler.

Compile: python kfp2_b62_card_fraud.py  -> kfp2_b62_card_fraud.yaml
"""
import os
from typing import List

from kfp import compiler, dsl, kubernetes
from kfp.dsl import Dataset, Input, Metrics, Model, Output

IMAGE = 'ghcr.io/acme/fraud-ml:2.4.1'
MERCHANT_RISK_URI = 's3://acme-fraud-reference/merchant-risk/v7/merchant_risk.parquet'
HOLDOUT_URI = 's3://acme-fraud-data/holdout/2024-q2/'
FEATURES_PVC = 'fraud-features'


@dsl.component(base_image=IMAGE)
def validate_transactions(transactions_uri: str, min_rows: int) -> int:
    import pandas as pd
    df = pd.read_parquet(transactions_uri)
    required = {'txn_id', 'card_hash', 'merchant_id', 'amount', 'ts'}
    missing = required - set(df.columns)
    if missing:
        raise ValueError(f'missing columns: {sorted(missing)}')
    if len(df) < min_rows:
        raise ValueError(f'only {len(df)} rows')
    return len(df)


@dsl.component(base_image=IMAGE)
def build_features(transactions_uri: str, chargebacks_uri: str, merchant_risk_uri: str, out_dir: str):
    import os
    import pandas as pd
    txns = pd.read_parquet(transactions_uri)
    cbs = pd.read_parquet(chargebacks_uri)
    risk = pd.read_parquet(merchant_risk_uri)
    df = txns.merge(cbs[['txn_id']].assign(is_fraud=1), on='txn_id', how='left').fillna({'is_fraud': 0})
    df = df.merge(risk, on='merchant_id', how='left')
    os.makedirs(out_dir, exist_ok=True)
    df.to_parquet(os.path.join(out_dir, 'features.parquet'))


@dsl.component(base_image=IMAGE)
def train_xgb(features_dir: str, learning_rate: float, model: Output[Model], metrics: Output[Metrics]):
    import os
    import pandas as pd
    import xgboost as xgb
    df = pd.read_parquet(os.path.join(features_dir, 'features.parquet'))
    y = df.pop('is_fraud')
    clf = xgb.XGBClassifier(learning_rate=learning_rate, n_estimators=400, scale_pos_weight=50)
    clf.fit(df.select_dtypes('number'), y)
    clf.save_model(model.path)
    metrics.log_metric('learning_rate', learning_rate)


@dsl.component(base_image=IMAGE)
def select_best(models: Input[List[Model]], best: Output[Model]):
    import shutil
    shutil.copy(models[0].path, best.path)


@dsl.component(base_image=IMAGE)
def evaluate(model: Input[Model], holdout_uri: str) -> float:
    import pandas as pd
    import xgboost as xgb
    from sklearn.metrics import average_precision_score
    df = pd.read_parquet(holdout_uri)
    y = df.pop('is_fraud')
    clf = xgb.XGBClassifier()
    clf.load_model(model.path)
    return float(average_precision_score(y, clf.predict_proba(df.select_dtypes('number'))[:, 1]))


@dsl.container_component
def register_model(model: Input[Model], registry_uri: str):
    return dsl.ContainerSpec(image='amazon/aws-cli:2.15.30', command=['aws', 's3', 'cp'],
                             args=[model.path, registry_uri])


@dsl.component(base_image=IMAGE)
def batch_score(model: Input[Model], pending_uri: str, scores: Output[Dataset]):
    import pandas as pd
    import xgboost as xgb
    df = pd.read_parquet(pending_uri)
    clf = xgb.XGBClassifier()
    clf.load_model(model.path)
    df['fraud_score'] = clf.predict_proba(df.select_dtypes('number'))[:, 1]
    df[['txn_id', 'fraud_score']].to_parquet(scores.path)


@dsl.container_component
def publish_scores(scores: Input[Dataset], dest_uri: str):
    return dsl.ContainerSpec(image='amazon/aws-cli:2.15.30', command=['aws', 's3', 'cp'],
                             args=[scores.path, dest_uri])


@dsl.container_component
def notify(message: str):
    return dsl.ContainerSpec(image='curlimages/curl:8.8.0', command=['sh', '-c'],
                             args=['echo "$0"', message])


@dsl.pipeline(name='card-fraud-train-score')
def fraud_pipeline(transactions_uri: str = 's3://acme-fraud-data/transactions/2024-06/',
                   chargebacks_uri: str = 's3://acme-fraud-data/chargebacks/2024-06/',
                   scoring_date: str = '2024-07-01',
                   learning_rates: list = [0.05, 0.1, 0.2],
                   min_auc_pr: float = 0.82):
    done = notify(message='card-fraud-train-score finished')
    with dsl.ExitHandler(done):
        val = validate_transactions(transactions_uri=transactions_uri, min_rows=100000)

        feats = build_features(transactions_uri=transactions_uri, chargebacks_uri=chargebacks_uri,
                               merchant_risk_uri=MERCHANT_RISK_URI, out_dir='/features/2024-06').after(val)
        kubernetes.mount_pvc(feats, pvc_name=FEATURES_PVC, mount_path='/features')

        with dsl.ParallelFor(learning_rates, parallelism=2) as lr:
            tr = train_xgb(features_dir='/features/2024-06', learning_rate=lr).after(feats)
            kubernetes.mount_pvc(tr, pvc_name=FEATURES_PVC, mount_path='/features')
            tr.set_cpu_limit('8').set_memory_limit('32G')

        best = select_best(models=dsl.Collected(tr.outputs['model']))
        ev = evaluate(model=best.outputs['best'], holdout_uri=HOLDOUT_URI)

        with dsl.If(ev.output >= min_auc_pr):
            register_model(model=best.outputs['best'], registry_uri='s3://acme-ml-registry/card-fraud/xgb/candidate.json')
            sc = batch_score(model=best.outputs['best'], pending_uri=f's3://acme-fraud-data/pending/{scoring_date}/')
            publish_scores(scores=sc.outputs['scores'], dest_uri=f's3://acme-fraud-scores/daily/{scoring_date}/scores.parquet')


if __name__ == '__main__':
    compiler.Compiler().compile(fraud_pipeline, os.path.splitext(__file__)[0] + '.yaml')
