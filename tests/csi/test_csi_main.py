"""The entry point: start-up validation with one clear line, SIGTERM graceful stop."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest
from csi_helpers import REPO, VENV_BIN, PluginProc

from csi._proto import csi_pb2


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(VENV_BIN / "fusecache-csi"), *args], capture_output=True,
                          text=True, timeout=30, env={"PATH": "/usr/bin:/bin",
                                                      "PYTHONPATH": str(REPO)})


@pytest.mark.parametrize(("args", "needle"), [
    (["--endpoint", "tcp://127.0.0.1:1"], "must be unix:///"),
    (["--endpoint", "unix://relative/sock"], "absolute path"),
    (["--mode", "node", "--fusecache-bin", "/nonexistent/fusecache"], "fusecache CLI not found"),
    (["--log-level", "chatty"], "--log-level"),
])
def test_bad_settings_stop_at_start_with_one_line(args: list[str], needle: str,
                                                  tmp_path: Path) -> None:
    r = run_cli("--state-dir", str(tmp_path), *args)
    assert r.returncode == 2
    assert needle in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_sigterm_stops_gracefully(csi_root: Path) -> None:
    p = PluginProc(csi_root, extra_args=["--mode", "controller"]).start()
    try:
        assert p.identity.Probe(csi_pb2.ProbeRequest()).ready.value
        caps = p.identity.GetPluginCapabilities(csi_pb2.GetPluginCapabilitiesRequest())
        assert len(caps.capabilities) == 1  # controller mode serves Controller
        assert p.kill(signal.SIGTERM) == 0
        assert "stopped" in p.log()
    finally:
        p.kill()
