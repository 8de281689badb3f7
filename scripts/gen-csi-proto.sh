#!/usr/bin/env bash
# Regenerate the checked-in CSI Python stubs (csi/_proto/) from csi/proto/csi.proto.
# Usage: scripts/gen-csi-proto.sh [OUTPUT_ROOT]   (default: the repository root)
# Why a staging tree: protoc names the generated imports after the .proto's path
# below -I; placing the file at csi/_proto/csi.proto there makes the gRPC module
# import "from csi._proto import csi_pb2" instead of a top-level "csi_pb2".
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-$ROOT}"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PY" ] || PY=python3
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/src/csi/_proto" "$OUT/csi/_proto"
cp "$ROOT/csi/proto/csi.proto" "$tmp/src/csi/_proto/csi.proto"
"$PY" -m grpc_tools.protoc -I "$tmp/src" \
    --python_out="$OUT" --pyi_out="$OUT" --grpc_python_out="$OUT" \
    "$tmp/src/csi/_proto/csi.proto"
[ -f "$OUT/csi/_proto/__init__.py" ] || printf '"""Generated CSI v1 stubs: do not edit, run scripts/gen-csi-proto.sh."""\n' > "$OUT/csi/_proto/__init__.py"
