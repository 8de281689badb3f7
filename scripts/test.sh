#!/usr/bin/env bash
# The one command that runs the whole test suite (also what .ci/run calls).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup.sh"
cd "$ROOT"
# helm for the chart comparison (tests/k8s/test_k8s_helm.py, skipped without it)
bash scripts/get-helm.sh >/dev/null 2>&1 || echo "test.sh: no helm: the Helm chart test is skipped" >&2
unset AWS_CA_BUNDLE
set +e
# Test files run in parallel, one file per worker at a time (its fixtures stay together):
# as many workers as cores, at least 2 (the tests mostly wait on I/O), at most 4.
workers=$(nproc)
workers=$(( workers < 2 ? 2 : workers > 4 ? 4 : workers ))
python -m pytest -q -p no:cacheprovider --timeout=600 -n "$workers" --dist loadfile \
    --durations=25 "$@"
rc=$?
set -e
if [ $rc -eq 5 ]; then
    echo "test.sh: pytest collected no tests: that is a failure" >&2
    exit 1
fi
exit $rc
