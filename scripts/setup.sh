#!/usr/bin/env bash
# Idempotent set-up on Debian/Ubuntu as root: apt packages, a virtualenv in .venv,
# and fusecache installed into it (editable). Sourced by demo.sh and test.sh, and by a
# user (`source scripts/setup.sh`) to put the commands on PATH: the work runs in a
# subshell with `set -euo pipefail`, so the caller's shell keeps its own options; only
# PATH is changed here. A failure returns 1 (exits 1 when run rather than sourced).
_fusecache_setup_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
_fusecache_setup_venv="${FUSECACHE_VENV:-$_fusecache_setup_root/.venv}"

_fusecache_setup() (
    set -euo pipefail
    ROOT="$1"
    VENV="$2"
    # s3fs and rclone are the peers of the training-data experiment (demo, tests, bench/)
    APT_PKGS=(fuse3 libfuse3-dev pkg-config gcc s3fs rclone)
    # Debian's own python3 needs venv and headers (pyfuse3 compiles); others bring them.
    if ! python3 -c 'import ensurepip, sysconfig, os, sys; sys.exit(not os.path.exists(sysconfig.get_paths()["include"] + "/Python.h"))' 2>/dev/null; then
        APT_PKGS+=(python3-dev python3-venv)
    fi
    missing=()
    for p in "${APT_PKGS[@]}"; do
        dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        echo "setup: installing ${missing[*]}" >&2
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
    if [ ! -x "$VENV/bin/python" ]; then
        python3 -m venv "$VENV"
    fi
    stamp="$VENV/.fusecache-installed"
    if [ ! -f "$stamp" ] || [ "$ROOT/setup.cfg" -nt "$stamp" ]; then
        "$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
        if ! "$VENV/bin/python" -m pip install -q -e "$ROOT[test,bench]" >"$VENV/pip-install.log" 2>&1; then
            cat "$VENV/pip-install.log" >&2
            echo "setup: pip install failed (log above)" >&2
            exit 1
        fi
        touch "$stamp"
    fi
)

# Not an `if` condition: bash ignores `set -e` inside a function called from one.
_fusecache_setup "$_fusecache_setup_root" "$_fusecache_setup_venv"
_fusecache_setup_rc=$?
if [ "$_fusecache_setup_rc" -eq 0 ]; then
    unset _fusecache_setup_rc
    export PATH="$_fusecache_setup_venv/bin:$PATH"
    unset -f _fusecache_setup
    unset _fusecache_setup_root _fusecache_setup_venv
else
    unset -f _fusecache_setup
    unset _fusecache_setup_root _fusecache_setup_venv _fusecache_setup_rc
    return 1 2>/dev/null || exit 1
fi
