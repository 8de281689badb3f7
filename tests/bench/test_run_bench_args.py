"""bench/run_bench.py refuses bad link settings before it starts anything."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "run_bench.py"


def test_negative_latency_is_a_usage_error_naming_the_option() -> None:
    r = subprocess.run([sys.executable, str(SCRIPT), "--latency-ms", "-5"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "--latency-ms must be >= 0, not -5.0" in r.stderr
    assert "starting SeaweedFS" not in r.stdout
