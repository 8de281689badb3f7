"""A running pod keeps reading through plugin and FUSE server faults.

The "container" is tests/csi/container_reader.py in a mount namespace of its own
(``unshare --mount``) that bind-mounts the publish target with the pod's
propagation, as runc does: private (Kubernetes' default) or rslave
(HostToContainer). Its copy of the mount is taken before the fault, so nothing the
plugin does on the host afterwards can reach it: the FUSE mount itself must stay
up, which is what the relay (fusecache/relay.py) is for. The reader is mid-file
when the fault happens and must then read the file byte-exact again, without a
single error, through a fresh open and through a descriptor opened before it.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from csi_helpers import (
    KubeletLayout,
    PluginProc,
    S3Volume,
    kubelet_blocking_refs,
    leftovers,
    pids_mentioning,
)
from test_csi_e2e import create, publish, stage, unpublish, unstage

pytestmark = [pytest.mark.fuse, pytest.mark.s3, pytest.mark.slow]

READER = Path(__file__).with_name("container_reader.py")
FILE = "dir/sub/c.bin"
NOTHING = {"mounts": [], "processes": [], "records": []}


class Container:
    """The reader in its own mount namespace; its stdout lines arrive on a queue."""

    def __init__(self, target: Path, root: Path, sha: str, propagation: str) -> None:
        self.stop_file = root / "stop-reader"
        rootfs = root / "rootfs"
        self.proc = subprocess.Popen(
            ["unshare", "--mount", "--propagation", propagation, sys.executable,
             str(READER), str(target), str(rootfs), FILE, sha, str(self.stop_file)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "POD_PROPAGATION": propagation})
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.strip())

    def wait_for(self, prefix: str, timeout: float = 120.0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"reader never said {prefix!r}; said {self.seen[-10:]}"
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            self.seen.append(line)
            if line.startswith(prefix):
                return line

    def passes_after(self, n: int) -> int:
        """Wait for the reader to complete pass *n*; returns its number."""
        while True:
            line = self.wait_for("pass ")
            done = int(line.split()[1])
            if done >= n:
                return done

    def more_passes(self, k: int) -> int:
        """Wait for *k* passes begun after now (lines already queued do not count)."""
        last = 0
        while True:
            try:
                line = self.lines.get_nowait()
            except queue.Empty:
                break
            self.seen.append(line)
            if line.startswith("pass "):
                last = int(line.split()[1])
        return self.passes_after(last + k + 1)

    def finish(self) -> dict:
        self.stop_file.touch()
        summary = json.loads(self.wait_for("{"))
        self.proc.wait(timeout=30)
        return summary

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def servers_of(root: Path) -> list[int]:
    """FUSE server pids (``fusecache mount /dev/fd/N``) below this test's directory."""
    out = []
    for pid in pids_mentioning(str(root)):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"/dev/fd/" in cmd and b"fusecache.relay" not in cmd:
            out.append(pid)
    return out


def new_version_binary(root: Path) -> Path:
    """A 'new plugin version' of the fusecache CLI: another program path."""
    wrapper = root / "fusecache-v2"
    wrapper.write_text(f"#!/bin/sh\nexec {Path(sys.executable).parent / 'fusecache'} \"$@\"\n")
    wrapper.chmod(0o755)
    return wrapper


CASES = [("plugin-sigkill", "private", False), ("server-sigkill", "private", False),
         ("both-sigkill", "private", False), ("rolling-upgrade", "private", False),
         ("both-sigkill", "slave", False), ("both-sigkill", "private", True),
         ("rolling-upgrade", "private", True)]


def start_holder(root: Path) -> subprocess.Popen:
    """The node's relay holder (its own DaemonSet pod in manifests/node.yaml)."""
    sock = root / "holder.sock"
    proc = subprocess.Popen([sys.executable, "-m", "fusecache.holder", "--socket", str(sock),
                             "--log-file", str(root / "holder.log")],
                            start_new_session=True, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not sock.exists():
        assert proc.poll() is None and time.monotonic() < deadline, "holder did not start"
        time.sleep(0.05)
    return proc


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


@pytest.mark.parametrize(("fault", "propagation", "holder"), CASES,
                         ids=[f"{f}-{p}{'-holder' if h else ''}" for f, p, h in CASES])
def test_a_running_pod_reads_through_the_fault(fault: str, propagation: str, holder: bool,
                                               csi_root: Path, dataset: S3Volume) -> None:
    k = KubeletLayout(csi_root / "kubelet")
    holder_proc = start_holder(csi_root) if holder else None
    keep = (holder_proc.pid,) if holder_proc is not None else ()
    plugin = PluginProc(csi_root, extra_args=(
        ["--relay-holder", str(csi_root / "holder.sock")] if holder else [])).start()
    container = None
    try:
        vol = create(plugin, dataset, name="pvc-live")
        staging = k.make(k.staging("pvc-live"))
        target = k.make(k.target("pod-1", "pvc-live"))
        stage(plugin, vol, staging, dataset.secrets)
        publish(plugin, vol, staging, target)
        sha = hashlib.sha256(dataset.files[FILE]).hexdigest()
        container = Container(target, csi_root, sha, propagation)
        container.wait_for("ready")
        container.passes_after(1)
        servers = servers_of(csi_root)
        assert len(servers) == 1, servers
        relay = parent_of(servers[0])
        if holder_proc is not None:  # the relay is the holder's child, not the plugin's
            assert parent_of(relay) == holder_proc.pid
        mid = int(container.wait_for("mid ").split()[1])

        if fault in ("plugin-sigkill", "both-sigkill"):
            plugin.kill(signal.SIGKILL)
        if fault in ("server-sigkill", "both-sigkill"):
            os.kill(servers[0], signal.SIGKILL)
        if fault == "rolling-upgrade":
            plugin.kill(signal.SIGTERM)
            plugin.extra_args = [*plugin.extra_args,
                                 "--fusecache-bin", str(new_version_binary(csi_root))]
        # reads go on while the plugin is down, and after it is back
        container.passes_after(mid + 1)
        if fault != "server-sigkill":
            plugin.start()
        deadline = time.monotonic() + 60
        while fault != "plugin-sigkill" and servers_of(csi_root) in ([], servers):
            assert time.monotonic() < deadline, "the FUSE server was not replaced"
            time.sleep(0.1)
        last = container.more_passes(2)
        now = servers_of(csi_root)
        assert len(now) == 1
        if fault == "plugin-sigkill":
            assert now == servers, "a plugin restart leaves the FUSE server alone"
        if fault == "rolling-upgrade":
            spec = (plugin.state_dir / "node" / "relays").glob("*.json")
            assert any("fusecache-v2" in p.read_text() for p in spec)
        summary = container.finish()
        assert summary["bad"] == 0 and summary["held_bad"] == 0, summary
        assert summary["errors"] == {}, summary
        assert summary["passes"] >= last

        # the pod goes: the kubelet unpublishes, checks references, unstages
        unpublish(plugin, vol, target)
        assert kubelet_blocking_refs(staging, [], k.plugins_dir) == []
        unstage(plugin, vol, staging)
        assert leftovers(csi_root, plugin, keep) == NOTHING
    finally:
        if container is not None:
            container.kill()
        plugin.kill()
        if holder_proc is not None:
            holder_proc.kill()
            holder_proc.wait()


def test_pod_deleted_while_the_plugin_was_down_leaves_nothing(
        csi_root: Path, dataset: S3Volume) -> None:
    """The container exits while the plugin is down; once it is back, the kubelet's
    retried unpublish and unstage leave no mount, process or record."""
    k = KubeletLayout(csi_root / "kubelet")
    plugin = PluginProc(csi_root).start()
    container = None
    try:
        vol = create(plugin, dataset, name="pvc-gone")
        staging = k.make(k.staging("pvc-gone"))
        target = k.make(k.target("pod-1", "pvc-gone"))
        stage(plugin, vol, staging, dataset.secrets)
        publish(plugin, vol, staging, target)
        sha = hashlib.sha256(dataset.files[FILE]).hexdigest()
        container = Container(target, csi_root, sha, "private")
        container.passes_after(1)
        plugin.kill(signal.SIGKILL)
        container.kill()  # the pod is deleted
        plugin.start()
        unpublish(plugin, vol, target)
        assert kubelet_blocking_refs(staging, [], k.plugins_dir) == []
        unstage(plugin, vol, staging)
        assert leftovers(csi_root, plugin) == NOTHING
    finally:
        if container is not None:
            container.kill()
        plugin.kill()


def test_reads_fail_with_eio_when_no_server_comes_back(csi_root: Path,
                                                       dataset: S3Volume) -> None:
    """The server is killed and cannot start again: reads in flight and new ones fail
    with EIO after --resend-timeout (never hang, never wrong bytes); once a server
    can start, the same container reads byte-exact again."""
    k = KubeletLayout(csi_root / "kubelet")
    plugin = PluginProc(csi_root, extra_args=["--resend-timeout", "2"]).start()
    container = None
    try:
        vol = create(plugin, dataset, name="pvc-eio")
        staging = k.make(k.staging("pvc-eio"))
        target = k.make(k.target("pod-1", "pvc-eio"))
        stage(plugin, vol, staging, dataset.secrets)
        publish(plugin, vol, staging, target)
        sha = hashlib.sha256(dataset.files[FILE]).hexdigest()
        container = Container(target, csi_root, sha, "private")
        container.passes_after(1)
        [spec_file] = (plugin.state_dir / "node" / "relays").glob("*.json")
        good = spec_file.read_text()
        spec_file.write_text(json.dumps({"argv": ["/bin/false"]}))
        container.wait_for("mid ")
        os.kill(servers_of(csi_root)[0], signal.SIGKILL)
        container.wait_for("error 5")  # EIO, not a hang
        spec_file.write_text(good)
        container.wait_for("pass ")
        container.more_passes(1)
        summary = container.finish()
        assert set(summary["errors"]) == {"5"}, summary
        assert summary["bad"] == 0 and summary["held_bad"] == 0, summary
        unpublish(plugin, vol, target)
        unstage(plugin, vol, staging)
        assert leftovers(csi_root, plugin) == NOTHING
    finally:
        if container is not None:
            container.kill()
        plugin.kill()
