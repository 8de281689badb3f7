"""The two micro-benchmarks run as a user runs them and report what they measured: the
protocol floor (a do-nothing pyfuse3 + trio file system, real FUSE) and the cost of a
blocking call from trio (trio.to_thread against the read path's WorkerPool)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.mark.fuse
@pytest.mark.parametrize("mode", ["read", "prefill", "noopen"])
def test_floor_bench_reads_every_file_and_reports_cpu_per_file(mode: str) -> None:
    p = subprocess.run([sys.executable, str(BENCH / "run_floor_bench.py"), "--modes",
                        f"{mode},local", "--readers", "2"], capture_output=True, text=True,
                       timeout=180)
    assert p.returncode == 0, p.stderr
    m = re.search(r"round 1: 4000 files, 2 readers, (\w+): (\d+) files/s; server CPU "
                  r"([0-9.]+) ms per file", p.stdout)
    assert m and m.group(1) == mode, p.stdout
    assert int(m.group(2)) > 0 and 0 < float(m.group(3)) < 10
    assert re.search(r"round 1: 4000 files, 2 readers, local: \d+ files/s\n", p.stdout)
    assert re.search(rf"round 1: against local disk: {mode} [0-9.]+x", p.stdout), p.stdout


def test_floor_bench_refuses_an_unknown_mode() -> None:
    p = subprocess.run([sys.executable, str(BENCH / "run_floor_bench.py"), "--modes",
                        "read,warp"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "warp" in p.stderr


def test_handoff_bench_reports_both_ways_of_calling() -> None:
    p = subprocess.run([sys.executable, str(BENCH / "run_handoff_bench.py"), "--calls", "300",
                        "--rounds", "1", "--sleep-ms", "0.1"], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    rows = re.findall(r"round 1 (\S+)\s+300 calls: [0-9.]+ s wall, (\d+) us CPU per call",
                      p.stdout)
    assert [name for name, _ in rows] == ["trio.to_thread", "WorkerPool"], p.stdout
    assert all(int(us) > 0 for _, us in rows)
