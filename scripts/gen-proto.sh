#!/usr/bin/env bash
# Regenerate the checked-in gRPC stubs from the project's .proto files:
#   csi/proto/csi.proto         -> csi/_proto/csi_pb2*.py        (CSI v1)
#   fusecache/proto/peer.proto  -> fusecache/_proto/peer_pb2*.py (cache-group peers)
# Usage: scripts/gen-proto.sh [OUTPUT_ROOT]   (default: the repository root)
# Why a staging tree: protoc names the generated imports after the .proto's path
# below -I; placing the file at <package>/_proto/<name>.proto there makes the gRPC
# module import "from <package>._proto import <name>_pb2", not a top-level module.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-$ROOT}"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PY" ] || PY=python3
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

gen() {  # gen PACKAGE NAME "what the stubs are"
    local pkg="$1" name="$2" what="$3"
    mkdir -p "$tmp/src/$pkg/_proto" "$OUT/$pkg/_proto"
    cp "$ROOT/$pkg/proto/$name.proto" "$tmp/src/$pkg/_proto/$name.proto"
    "$PY" -m grpc_tools.protoc -I "$tmp/src" \
        --python_out="$OUT" --pyi_out="$OUT" --grpc_python_out="$OUT" \
        "$tmp/src/$pkg/_proto/$name.proto"
    [ -f "$OUT/$pkg/_proto/__init__.py" ] \
        || printf '"""Generated %s: do not edit, run scripts/gen-proto.sh."""\n' "$what" \
            > "$OUT/$pkg/_proto/__init__.py"
}

gen csi csi "CSI v1 stubs"
gen fusecache peer "peer protocol stubs"
