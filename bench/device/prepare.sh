#!/bin/bash
# Prepare what the training experiment needs on a bare GPU machine that has no network and
# no package manager, but has python3 with torch, gcc and the Python headers (this
# workplace's device machines): wheels of fusecache's runtime dependencies for that
# machine's Python (from PyPI), libfuse3 and fusermount3 (Debian packages), pyfuse3's C
# source (its PyPI sdist, compiled there by run.sh) and SeaweedFS's `weed` (xz). Writes
# .devcarry/ in the repository root (ignored by git through .git/info/exclude); carry that
# folder and run `bash bench/device/run.sh` there.
#   usage: bash bench/device/prepare.sh [PYTHON_VERSION]   (default 3.12)
set -euo pipefail
PYV=${1:-3.12}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PIP="$ROOT/.venv/bin/pip"
OUTD="$ROOT/.devcarry"
grep -qx "/.devcarry/" "$ROOT/.git/info/exclude" 2>/dev/null || echo "/.devcarry/" >> "$ROOT/.git/info/exclude"
rm -rf "$OUTD" && mkdir -p "$OUTD/lib" "$OUTD/include"
TMP=$(mktemp -d) && trap 'rm -rf "$TMP"' EXIT
# the runtime dependencies the mount, prefetchd warm and the bench import that the GPU
# image lacks (it has pyyaml, prometheus-client, grpcio, protobuf, dateutil, nvidia-ml-py)
"$PIP" download -q --no-deps --python-version "$PYV" --only-binary=:all: \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
  -d "$TMP/whl" trio outcome sniffio sortedcontainers boto3 botocore s3transfer jmespath \
  "obstore>=0.12,<0.13" lmdb zlib-ng
"$PIP" install -q --no-deps --target "$TMP/site" --python-version "$PYV" --only-binary=:all: \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 "$TMP"/whl/*.whl
# botocore's service models other than S3's and the credential services' are 90% of its size
find "$TMP/site/botocore/data" -mindepth 1 -maxdepth 1 -type d \
  ! -name s3 ! -name sts ! -name sso ! -name sso-oidc -exec rm -rf {} +
"$PIP" download -q --no-deps --no-binary=:all: -d "$TMP/sdist" "pyfuse3==$("$PIP" show pyfuse3 | awk '/^Version/{print $2}')"
tar xzf "$TMP"/sdist/pyfuse3-*.tar.gz -C "$TMP"
mkdir -p "$TMP/site/pyfuse3"
cp "$TMP"/pyfuse3-*/src/pyfuse3/{*.py,*.pyi,*.h,*.c,py.typed} "$TMP/site/pyfuse3/"
tar cJf "$OUTD/site.tar.xz" -C "$TMP" site
(cd "$TMP" && apt-get download -q libfuse3-3 libfuse3-dev fuse3 >/dev/null 2>&1 \
  && for f in *.deb; do dpkg -x "$f" deb; done)
cp "$TMP"/deb/lib/x86_64-linux-gnu/libfuse3.so.3.* "$OUTD/lib/libfuse3.so.3"
cp "$TMP"/deb/bin/fusermount3 "$OUTD/lib/"
cp -r "$TMP"/deb/usr/include/fuse3 "$OUTD/include/"
xz -T2 -6 -c "$(command -v weed || echo "$ROOT/.venv/bin/weed")" > "$OUTD/weed.xz"
du -sh "$OUTD"
