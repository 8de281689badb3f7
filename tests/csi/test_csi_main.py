"""The entry point: start-up validation with one clear line, SIGTERM graceful stop."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest
from csi_helpers import REPO, VENV_BIN, PluginProc

from csi._proto import csi_pb2


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(VENV_BIN / "fusecache-csi"), *args], capture_output=True,
                          text=True, timeout=30, env={"PATH": "/usr/bin:/bin",
                                                      "PYTHONPATH": str(REPO), **(env or {})})


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


@pytest.mark.parametrize("mode", ["nod", "everything", ""])
def test_a_mode_from_the_environment_is_checked_as_the_flag_is(mode: str,
                                                               tmp_path: Path) -> None:
    """Blind job round 36: FUSECACHE_CSI_MODE=nod started a plugin serving only Identity that
    said it was ready; a typo in the DaemonSet's env is refused as `--mode nod` is."""
    sock = tmp_path / "csi.sock"
    r = run_cli("--state-dir", str(tmp_path / "state"), "--endpoint", f"unix://{sock}",
                env={"FUSECACHE_CSI_MODE": mode})
    err = r.stderr.strip()
    assert r.returncode == 2 and len(err.splitlines()) == 1, err
    assert err == (f"fusecache-csi: error: FUSECACHE_CSI_MODE {mode!r}: expected node, "
                   "controller or all")
    assert not sock.exists()


@pytest.mark.parametrize("flag", ["--state-dir", "--cache-dir", "--secrets-dir"])
@pytest.mark.parametrize("under", ["", "sub"])
def test_a_directory_option_that_names_a_file_is_bad_input(flag: str, under: str,
                                                            tmp_path: Path) -> None:
    """Blind job round 36: --state-dir FILE was 'cannot start: [Errno 20] Not a directory:
    .../controller/volumes', exit 1, after the socket was bound; now exit 2 naming it."""
    afile = tmp_path / "afile.txt"
    afile.write_text("x")
    bad = afile / under if under else afile
    dirs = {"--state-dir": tmp_path / "state", "--cache-dir": tmp_path / "cache",
            "--secrets-dir": tmp_path / "secrets", flag: bad}
    sock = tmp_path / "csi.sock"
    r = run_cli("--endpoint", f"unix://{sock}", "--mode", "controller",
                *(x for k, v in dirs.items() for x in (k, str(v))))
    err = r.stderr.strip()
    assert r.returncode == 2 and len(err.splitlines()) == 1, err
    assert err.startswith(f"fusecache-csi: error: {flag} (env ") and \
        err.endswith(f" {bad}: {f'{afile} is not a directory' if under else 'not a directory'}")
    assert not sock.exists() and afile.read_text() == "x"


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


def test_a_second_plugin_on_the_same_node_is_refused_and_the_first_serves_on(
        csi_root: Path, monkeypatch) -> None:
    """A blind first-hour test: a second fusecache-csi started on the same socket took it
    over silently (and restarted live volumes' FUSE servers); when it stopped it removed
    the socket, and the first, still running, was never reached again. Now the second
    waits OTHER_PLUGIN_WAIT_S for the first to stop, then refuses to start."""
    from csi import main as csi_main

    p = PluginProc(csi_root, extra_args=["--mode", "controller"]).start()
    try:
        inode = p.socket.stat().st_ino
        monkeypatch.setattr(csi_main, "OTHER_PLUGIN_WAIT_S", 1.0)
        for state in (p.state_dir, csi_root / "other-state"):  # same state dir, same socket
            with pytest.raises(RuntimeError, match="another") as e:
                csi_main.Plugin(csi_main.load_config([
                    "--endpoint", f"unix://{p.socket}", "--mode", "controller",
                    "--state-dir", str(state), "--cache-dir", str(csi_root / "c2"),
                    "--node-id", "n"])).start()
            assert str(state) in str(e.value) or str(p.socket) in str(e.value)
        assert p.socket.stat().st_ino == inode  # the first's socket, untouched
        assert p.identity.Probe(csi_pb2.ProbeRequest()).ready.value
        assert p.kill(signal.SIGTERM) == 0
        # once the first is gone, one starts on the same state dir and socket
        q = csi_main.Plugin(csi_main.load_config([
            "--endpoint", f"unix://{p.socket}", "--mode", "controller",
            "--state-dir", str(p.state_dir), "--node-id", "n"]))
        q.start()
        q.stop(0)
    finally:
        p.kill()
