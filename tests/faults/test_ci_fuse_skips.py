"""Under CI=true a skipped ``fuse`` test fails the run (tests/conftest.py); elsewhere it
is a skip. Runs pytest on tests/faults/ci_skip_probe.py in a subprocess, as root and,
to lose /dev/fuse rights, as the unprivileged user nobody."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBE = Path(__file__).resolve().parent / "ci_skip_probe.py"


def _pytest(ci: str | None, as_nobody: bool = False) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfs",
           "--rootdir", str(ROOT), str(PROBE)]
    if as_nobody:
        cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *cmd]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_without_ci_a_skipped_fuse_test_is_a_skip() -> None:
    r = _pytest(None)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 passed, 2 skipped" in r.stdout, r.stdout


def test_under_ci_a_fuse_test_skipped_at_run_time_fails_the_run() -> None:
    r = _pytest("true")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "1 failed, 1 passed, 1 skipped" in r.stdout, r.stdout
    assert "CI=true: a test that needs real FUSE mounts was skipped" in r.stdout


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root to become nobody")
def test_under_ci_without_fuse_rights_every_fuse_test_fails() -> None:
    r = _pytest(None, as_nobody=True)
    if "Permission denied" in r.stdout + r.stderr:
        pytest.skip("the worktree is not readable by nobody")
    assert r.returncode == 0 and "3 skipped" in r.stdout, r.stdout + r.stderr
    r = _pytest("true", as_nobody=True)
    assert r.returncode == 1, r.stdout + r.stderr
    # skipped at setup (collection marker): reported as errors, the run fails
    assert "1 skipped, 2 errors" in r.stdout, r.stdout
    assert "CI=true: a test that needs real FUSE mounts was skipped" in r.stdout
