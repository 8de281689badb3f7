#!/usr/bin/env bash
# The demo (main job): set up, start a local S3, mount it with fusecache, read twice;
# then a small run of the training-data experiment (bench/run_train_bench.py): every
# contender on the same data behind an emulated remote link, table printed at the end.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup.sh"
cd "$ROOT"
unset AWS_CA_BUNDLE
python -m fusecache.demo "$@"
echo
echo "== training-data experiment (small: --scale 0.1; the full run is python bench/run_train_bench.py) =="
set +e
python bench/run_train_bench.py --scale 0.1
rc=$?
set -e
# 3: every contender ran but a target was missed (at this size the epochs are sub-second)
if [ $rc -ne 0 ] && [ $rc -ne 3 ]; then
    exit $rc
fi
