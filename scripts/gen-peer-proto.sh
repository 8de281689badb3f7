#!/usr/bin/env bash
# Regenerate the checked-in peer protocol stubs (fusecache/_proto/) from
# fusecache/proto/peer.proto. Usage: scripts/gen-peer-proto.sh [OUTPUT_ROOT]
# (default: the repository root). The staging tree places the file at
# fusecache/_proto/peer.proto below -I, so the gRPC module imports
# "from fusecache._proto import peer_pb2" (see scripts/gen-csi-proto.sh).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-$ROOT}"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PY" ] || PY=python3
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/src/fusecache/_proto" "$OUT/fusecache/_proto"
cp "$ROOT/fusecache/proto/peer.proto" "$tmp/src/fusecache/_proto/peer.proto"
"$PY" -m grpc_tools.protoc -I "$tmp/src" \
    --python_out="$OUT" --pyi_out="$OUT" --grpc_python_out="$OUT" \
    "$tmp/src/fusecache/_proto/peer.proto"
[ -f "$OUT/fusecache/_proto/__init__.py" ] || printf '"""Generated peer protocol stubs: do not edit, run scripts/gen-peer-proto.sh."""\n' > "$OUT/fusecache/_proto/__init__.py"
