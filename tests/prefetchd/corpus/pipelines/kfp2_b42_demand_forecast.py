# ruff: noqa
# ruff: noqa
"""Weekly store x SKU demand forecast (KFP v2 + kfp-kubernetes).

A per-run PVC holds the raw sales sync and the NOAA weather pull; a feature
build joins them with a promotions calendar and a holiday table; one quantile
GBM per region is trained in a ParallelFor; the champion is backtested on the
latest actuals and published only when the WAPE gate passes. Every shell step
is a container component with a real bash script.

Compile: python kfp2_b42_demand_forecast.py  -> kfp2_b42_demand_forecast.yaml
"""
import os
from typing import List

from kfp import compiler, dsl, kubernetes
from kfp.dsl import Dataset, Input, Model, Output

TOOLS = 'ghcr.io/acme-retail/data-tools:1.4.0'      # aws-cli v2, s5cmd, jq, gettext (envsubst)
FC = 'ghcr.io/acme-retail/forecast:2024.06.2'        # python 3.11, pandas, lightgbm, aws-cli, gettext-base

SYNC_SALES = r'''set -euo pipefail
SRC="${1%/}"
DST="${2:-/data/sales}"
mkdir -p "$DST"
aws s3 sync "$SRC/daily/" "$DST/" --exclude "*" --include "*.parquet" --only-show-errors
echo "synced $(find "$DST" -name '*.parquet' | wc -l) files from $SRC/daily/"
'''

HOLIDAYS = r'''set -eu
python -c "import sys, pandas as pd; df = pd.read_csv('s3://acme-retail-forecast/reference/holidays/holidays_2019_2026.csv', parse_dates=['date']); df[df['country'] == sys.argv[1]].to_parquet(sys.argv[2], index=False)" "$1" "$2"
'''

WEATHER = r'''set -euo pipefail
OUT=/data/weather
mkdir -p "$OUT"
for y in {2021..2024}; do
  s5cmd --no-sign-request cp "s3://noaa-ghcn-pds/csv/by_year/${y}.csv" "$OUT/ghcn_${y}.csv"
done
ls -l "$OUT"
'''

BUILD_FEATURES = r'''set -euo pipefail
PROMO_URI="$1"
CAL="$2"
OUT="$3"
mkdir -p "$(dirname "$OUT")"
python - "$PROMO_URI" "$CAL" "$OUT" <<'PY'
import glob
import sys

import pandas as pd

promo_uri, cal_path, out_path = sys.argv[1:4]
sales = pd.concat(pd.read_parquet(p) for p in sorted(glob.glob('/data/sales/*.parquet')))
weather = pd.concat(
    pd.read_csv(p, header=None, usecols=[0, 1, 2, 3], names=['station', 'date', 'element', 'value'])
    for p in sorted(glob.glob('/data/weather/ghcn_*.csv')))
promo = pd.read_parquet(promo_uri)
cal = pd.read_parquet(cal_path)
tmax = weather[weather.element == 'TMAX'].groupby('date', as_index=False)['value'].mean()
feats = (sales.merge(promo, on=['sku', 'week'], how='left')
              .merge(cal, on='date', how='left')
              .merge(tmax, on='date', how='left'))
feats.to_parquet(out_path, index=False)
PY
'''

TRAIN_REGION = r'''set -euo pipefail
REGION="$1"
FEATURES="$2"
MODEL_DIR="$3"
MAP_URI="s3://acme-retail-forecast/hierarchy/${REGION}/store_sku_map.parquet"
aws s3 cp --only-show-errors "$MAP_URI" /tmp/store_sku_map.parquet
mkdir -p "$MODEL_DIR"
python -m forecast.train --features "$FEATURES" --hierarchy /tmp/store_sku_map.parquet \
  --region "$REGION" --quantiles 0.1,0.5,0.9 --out "$MODEL_DIR"
'''

BACKTEST = r'''set -euo pipefail
export ACTUALS_URI="${1%/}/weekly/"
export HOLDOUT_WEEKS="${2:-8}"
export MODEL_DIR="$3"
envsubst '${ACTUALS_URI} ${HOLDOUT_WEEKS} ${MODEL_DIR}' > /tmp/backtest.yaml <<'EOF'
actuals: ${ACTUALS_URI}
holdout_weeks: ${HOLDOUT_WEEKS}
model_dir: ${MODEL_DIR}
metrics: [wape, bias, pinball]
EOF
mkdir -p "$(dirname "$4")"
python -m forecast.backtest --config /tmp/backtest.yaml --report "$4"
'''

PUBLISH = r'''set -euo pipefail
MODEL_DIR="$1"
DEST="${2%/}/$(date -u +%G-W%V)"
python -m forecast.predict --model "$MODEL_DIR" --horizon 13 --out /tmp/forecast
find /tmp/forecast -name '*.parquet' -print0 | xargs -0 -P 8 -I{} aws s3 cp --only-show-errors {} "$DEST/"
'''


@dsl.container_component
def sync_sales(sales_root: str):
    return dsl.ContainerSpec(image=TOOLS, command=['bash', '-c', SYNC_SALES, 'sync-sales'], args=[sales_root])


@dsl.container_component
def holiday_calendar(country: str, calendar: Output[Dataset]):
    return dsl.ContainerSpec(image=FC, command=['sh', '-c', HOLIDAYS, 'holiday-calendar'],
                             args=[country, calendar.path])


@dsl.container_component
def weather_pull():
    return dsl.ContainerSpec(image=TOOLS, command=['bash', '-c', WEATHER])


@dsl.container_component
def build_features(promo_uri: str, calendar: Input[Dataset], features: Output[Dataset]):
    return dsl.ContainerSpec(image=FC, command=['bash', '-c', BUILD_FEATURES, 'build-features'],
                             args=[promo_uri, calendar.path, features.path])


@dsl.container_component
def train_region(region: str, features: Input[Dataset], model: Output[Model]):
    return dsl.ContainerSpec(image=FC, command=['bash', '-c', TRAIN_REGION, 'train-region'],
                             args=[region, features.path, model.path])


@dsl.component(base_image='python:3.11-slim')
def select_champion(models: Input[List[Model]], champion: Output[Model]):
    import json
    import os
    import shutil
    best, best_score = None, float('inf')
    for m in models:
        with open(os.path.join(m.path, 'cv.json')) as f:
            score = json.load(f)['pinball']
        if score < best_score:
            best, best_score = m, score
    shutil.copytree(best.path, champion.path)


@dsl.container_component
def backtest(actuals_root: str, holdout_weeks: int, champion: Input[Model], report: Output[Dataset]):
    return dsl.ContainerSpec(image=FC, command=['bash', '-c', BACKTEST, 'backtest'],
                             args=[actuals_root, holdout_weeks, champion.path, report.path])


@dsl.component(base_image='python:3.11-slim')
def gate(report: Input[Dataset], wape_threshold: float) -> str:
    import json
    with open(report.path) as f:
        wape = json.load(f)['wape']
    return 'promote' if wape < wape_threshold else 'hold'


@dsl.container_component
def publish_forecast(champion: Input[Model], publish_root: str):
    return dsl.ContainerSpec(image=FC, command=['bash', '-c', PUBLISH, 'publish-forecast'],
                             args=[champion.path, publish_root])


@dsl.container_component
def cleanup_scratch():
    return dsl.ContainerSpec(image='amazon/aws-cli:2.15.30', command=['sh', '-c'],
                             args=['aws s3 rm --recursive --only-show-errors '
                                   's3://acme-retail-forecast/scratch/weekly-demand/ || true'])


@dsl.pipeline(name='weekly-demand-forecast')
def demand_forecast(
    sales_root: str = 's3://acme-retail-forecast/sales/v5/',
    promo_uri: str = 's3://acme-retail-forecast/promotions/promo_calendar_2024.parquet',
    regions: list = ['northeast', 'southeast', 'midwest', 'west'],
    actuals_root: str = 's3://acme-retail-forecast/actuals/',
    holdout_weeks: int = 8,
    wape_threshold: float = 0.22,
    publish_root: str = 's3://acme-retail-forecast/published/',
):
    cleanup = cleanup_scratch()
    with dsl.ExitHandler(cleanup, name='weekly-run'):
        pvc = kubernetes.CreatePVC(pvc_name_suffix='-demand-fc', access_modes=['ReadWriteOnce'],
                                   size='100Gi', storage_class_name='gp3')
        sales = sync_sales(sales_root=sales_root)
        kubernetes.mount_pvc(sales, pvc_name=pvc.outputs['name'], mount_path='/data')
        cal = holiday_calendar(country='US')
        wx = weather_pull()
        kubernetes.mount_pvc(wx, pvc_name=pvc.outputs['name'], mount_path='/data')

        feats = build_features(promo_uri=promo_uri, calendar=cal.outputs['calendar']).after(sales, wx)
        kubernetes.mount_pvc(feats, pvc_name=pvc.outputs['name'], mount_path='/data')

        with dsl.ParallelFor(regions, parallelism=2) as region:
            tr = train_region(region=region, features=feats.outputs['features'])
            tr.set_cpu_limit('8').set_memory_limit('32G')

        champ = select_champion(models=dsl.Collected(tr.outputs['model']))
        bt = backtest(actuals_root=actuals_root, holdout_weeks=holdout_weeks, champion=champ.outputs['champion'])
        g = gate(report=bt.outputs['report'], wape_threshold=wape_threshold)
        with dsl.If(g.output == 'promote', name='wape-ok'):
            publish_forecast(champion=champ.outputs['champion'], publish_root=publish_root)

        kubernetes.DeletePVC(pvc_name=pvc.outputs['name']).after(feats)


if __name__ == '__main__':
    compiler.Compiler().compile(demand_forecast, os.path.splitext(__file__)[0] + '.yaml')
