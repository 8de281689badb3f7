# ruff: noqa
# ruff: noqa
"""Daily CTR model refresh from raw click logs (KFP v1 SDK -> Argo Workflow).

A manifest check (bucket/key split with ${VAR#s3://} and ${VAR%%/*}) gates
the whole day; 24 hourly click partitions are synced in parallel by a shell
function using printf -v; impressions are derived from the clicks root with
${VAR/old/new} and pulled with s5cmd; sessionize feeds an unquoted heredoc to
python; two architectures train in a ParallelFor; the candidate is compared
with the production baseline located with basename/dirname; the joined
features are exported with find | xargs -P only when the candidate wins.

Compile (kfp 1.8.x): python kfp1_b42_ctr_clicklogs.py  -> kfp1_b42_ctr_clicklogs.yaml
"""
import os

import kfp
from kfp import dsl
from kubernetes.client.models import V1EnvVar, V1EnvVarSource, V1SecretKeySelector

TOOLS = 'ghcr.io/adtech/data-tools:2.8.0'       # aws-cli v2, s5cmd, jq
CTR = 'ghcr.io/adtech/ctr-train:5.1.0'          # python 3.11, pandas, torch, aws-cli

CHECK_MANIFEST = r'''set -euo pipefail
LOGS="${1%/}"
DAY="$2"
NOSCHEME="${LOGS#s3://}"
BUCKET="${NOSCHEME%%/*}"
PREFIX="${NOSCHEME#*/}"
aws s3api get-object --bucket "$BUCKET" --key "$PREFIX/dt=$DAY/_manifest.json" /tmp/manifest.json > /dev/null
jq -r '.row_count' /tmp/manifest.json > /tmp/row_count
jq -r 'if .complete then "true" else "false" end' /tmp/manifest.json > /tmp/complete
echo "dt=$DAY rows=$(cat /tmp/row_count) complete=$(cat /tmp/complete)"
'''

SYNC_HOURS = r'''set -euo pipefail
LOGS="${1%/}"
DAY="$2"
sync_hour() {
  local h="$1" src
  printf -v src '%s/dt=%s/hour=%s/' "$LOGS" "$DAY" "$h"
  aws s3 sync --only-show-errors "$src" "/work/clicks/hour=$h/" --exclude '*' --include '*.snappy.parquet'
}
for h in {00..23}; do
  sync_hour "$h" &
done
wait
find /work/clicks -name '*.snappy.parquet' | wc -l
'''

PULL_IMPRESSIONS = r'''set -euo pipefail
CLICKS="${1%/}"
IMPR="${CLICKS/clicks/impressions}"
mkdir -p /work/impressions
s5cmd --numworkers 64 cp "$IMPR/dt=$2/*" /work/impressions/
'''

SESSIONIZE = r'''set -euo pipefail
DAY="$1"
mkdir -p /work/joined
python3 - <<EOF
import glob
import pandas as pd

ua = pd.read_csv("${UA_MAP_URI}")
clicks = pd.concat(pd.read_parquet(p) for p in glob.glob("/work/clicks/hour=*/*.snappy.parquet"))
impr = pd.concat(pd.read_parquet(p) for p in glob.glob("/work/impressions/*.parquet"))
df = impr.merge(clicks[["impression_id", "click_ts"]], on="impression_id", how="left")
df["label"] = df["click_ts"].notna().astype("int8")
df = df.merge(ua, on="user_agent", how="left")
df.sort_values(["user_id", "ts"]).to_parquet("/work/joined/dt=${DAY}.parquet", index=False)
EOF
'''

TRAIN = r'''set -euo pipefail
ARCH="$1"; EMB="$2"
VOCAB="${VOCAB_URI:-s3://adlogs-ref/vocab/ctr-vocab-v12.parquet}"
aws s3 cp --only-show-errors "$VOCAB" /tmp/vocab.parquet
mkdir -p "/work/models/$ARCH"
python -m ctr.train --arch "$ARCH" --embedding-dim "$EMB" --vocab /tmp/vocab.parquet \
  --data /work/joined --out "/work/models/$ARCH"
'''

COMPARE = r'''set -euo pipefail
BASELINE="$1"
mkdir -p /work/baseline
aws s3 cp --only-show-errors "$BASELINE" "/work/baseline/$(basename "$BASELINE")"
aws s3 cp --only-show-errors "$(dirname "$BASELINE")/calibration.json" /work/baseline/calibration.json
tar -xzf "/work/baseline/$(basename "$BASELINE")" -C /work/baseline
python -m ctr.compare --baseline /work/baseline --candidates /work/models --eval /work/joined --out /tmp/verdict
'''

EXPORT = r'''set -euo pipefail
DEST="${1%/}/dt=$2"
cd /work/joined
find . -type f -name '*.parquet' | sed 's|^\./||' \
  | xargs -P 8 -I{} aws s3 cp --only-show-errors {} "$DEST/{}"
'''

ARCHS = [{'arch': 'deepfm', 'emb': '16'}, {'arch': 'dcnv2', 'emb': '32'}]


@dsl.pipeline(name='ctr-daily-refresh', description='Daily CTR refresh from raw click logs')
def ctr_pipeline(logs_root: str = 's3://adlogs-raw/clicks/v2/', day: str = '2024-06-30',
                 baseline_model_uri: str = 's3://adlogs-models/ctr/prod/current/model.tar.gz',
                 export_root: str = 's3://adlogs-features/ctr/daily/'):
    notify = dsl.ContainerOp(
        name='notify', image='curlimages/curl:8.8.0', command=['sh', '-c'],
        arguments=['curl -fsS -X POST -H "Content-Type: application/json" '
                   '-d "{\\"text\\": \\"ctr-daily-refresh {{workflow.name}}: {{workflow.status}}\\"}" "$SLACK_WEBHOOK"'])
    notify.container.add_env_variable(V1EnvVar(name='SLACK_WEBHOOK', value_from=V1EnvVarSource(
        secret_key_ref=V1SecretKeySelector(name='ml-alerts', key='slack-webhook'))))

    with dsl.ExitHandler(notify):
        vop = dsl.VolumeOp(name='create-workdir', resource_name='ctr-work', size='200Gi',
                           modes=dsl.VOLUME_MODE_RWO)
        check = dsl.ContainerOp(name='check-manifest', image=TOOLS, command=['bash', '-c', CHECK_MANIFEST],
                                arguments=['check-manifest', logs_root, day],
                                file_outputs={'complete': '/tmp/complete', 'row_count': '/tmp/row_count'})
        with dsl.Condition(check.outputs['complete'] == 'true'):
            hours = dsl.ContainerOp(name='sync-hours', image=TOOLS, command=['bash', '-c', SYNC_HOURS],
                                    arguments=['sync-hours', logs_root, day], pvolumes={'/work': vop.volume})
            impr = dsl.ContainerOp(name='pull-impressions', image=TOOLS, command=['bash', '-c', PULL_IMPRESSIONS],
                                   arguments=['pull-impressions', logs_root, day], pvolumes={'/work': vop.volume})
            sess = dsl.ContainerOp(name='sessionize', image=CTR, command=['bash', '-c', SESSIONIZE],
                                   arguments=['sessionize', day], pvolumes={'/work': vop.volume}).after(hours, impr)
            sess.container.add_env_variable(V1EnvVar(name='UA_MAP_URI',
                                                     value='s3://adlogs-ref/ua/device_map_2024q2.csv'))
            with dsl.ParallelFor(ARCHS) as a:
                tr = dsl.ContainerOp(name='train-ctr', image=CTR, command=['bash', '-c', TRAIN],
                                     arguments=['train-ctr', a.arch, a.emb], pvolumes={'/work': sess.pvolume})
                tr.set_gpu_limit(1)
            cmp = dsl.ContainerOp(name='compare-baseline', image=CTR, command=['bash', '-c', COMPARE],
                                  arguments=['compare-baseline', baseline_model_uri],
                                  pvolumes={'/work': vop.volume},
                                  file_outputs={'verdict': '/tmp/verdict'}).after(tr)
            with dsl.Condition(cmp.outputs['verdict'] == 'promote'):
                dsl.ContainerOp(name='export-features', image=TOOLS, command=['bash', '-c', EXPORT],
                                arguments=['export-features', export_root, day], pvolumes={'/work': vop.volume})


if __name__ == '__main__':
    kfp.compiler.Compiler().compile(ctr_pipeline, os.path.splitext(__file__)[0] + '.yaml')
