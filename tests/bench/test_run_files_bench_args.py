"""bench/run_files_bench.py refuses bad variants and settings before it starts anything."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "run_files_bench.py"


@pytest.mark.parametrize(("args", "message"), [
    (["--variant", "trio"], "variant 'trio' is not NAME:ENV=VALUE[,...]"),
    (["--variant", "x:FOO"], "'FOO' in variant 'x:FOO' is not ENV=VALUE"),
    (["--ttl", "-1"], "--ttl must be >= 0, not -1.0"),
    (["--files", "0"], "--files must be >= 1, not 0"),
    (["--readers", "0"], "--readers must be >= 1, not 0"),
    (["--cold", "--ttl", "2"], "--cold and --ttl measure different passes"),
])
def test_bad_arguments_are_usage_errors_naming_them(args: list[str], message: str) -> None:
    r = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr
    assert r.stdout == ""  # nothing started, nothing logged
