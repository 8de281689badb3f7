"""`source scripts/setup.sh` in an interactive-like shell leaves that shell's options alone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _bash(script: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, FUSECACHE_VENV=sys.prefix)
    return subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)


def test_sourcing_setup_keeps_the_callers_shell_options() -> None:
    r = _bash("source scripts/setup.sh; echo \"flags=$-\"; set -o | grep -E "
              "'^(errexit|nounset|pipefail) '; false; echo still-here; command -v fusecache")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "still-here" in lines
    opts = {ln.split()[0]: ln.split()[1] for ln in lines if ln.split()[:1] and
            ln.split()[0] in ("errexit", "nounset", "pipefail")}
    assert opts == {"errexit": "off", "nounset": "off", "pipefail": "off"}, r.stdout
    assert lines[-1] == str(Path(sys.prefix) / "bin" / "fusecache")


def test_setup_keeps_options_the_caller_had() -> None:
    r = _bash("set -u; source scripts/setup.sh; set -o | grep -E '^(errexit|nounset) '")
    assert r.returncode == 0, r.stderr
    opts = dict(ln.split() for ln in r.stdout.splitlines())
    assert opts == {"errexit": "off", "nounset": "on"}


def test_scripts_still_fail_fast() -> None:
    for name in ("test.sh", "demo.sh"):
        head = (ROOT / "scripts" / name).read_text().splitlines()[:6]
        assert "set -euo pipefail" in head, name
