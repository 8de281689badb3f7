#!/usr/bin/env bash
# The demo (main job): set up, start a local S3, mount it with fusecache, read twice.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup.sh"
cd "$ROOT"
unset AWS_CA_BUNDLE
exec python -m fusecache.demo "$@"
