"""Helpers for the CSI tests: the real ``fusecache-csi`` process on a unix socket,
real gRPC stubs, real SeaweedFS (tests/conftest.py) and real FUSE mounts.

The plugin runs as a separate process with a minimal environment (no AWS_*
variables), so credentials can only reach ``fusecache mount`` through the
node-stage secrets the tests send. Cleanup runs even when a test fails: the
plugin is killed, every mount below the test's directory is detached, and every
leftover process whose command line names that directory is killed by pid.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from csi import mounts
from csi._proto import csi_pb2, csi_pb2_grpc

VENV_BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[2]
Mode = csi_pb2.VolumeCapability.AccessMode


def mount_cap(mode: int = Mode.MULTI_NODE_READER_ONLY) -> csi_pb2.VolumeCapability:
    return csi_pb2.VolumeCapability(mount=csi_pb2.VolumeCapability.MountVolume(),
                                    access_mode=Mode(mode=mode))


def pids_mentioning(text: str) -> list[int]:
    """Processes whose command line contains *text* (our unique tmp path)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(int(entry))
    return found


def detach_mounts_under(root: Path) -> None:
    """Last-resort cleanup: lazily detach every mount below *root*, deepest first."""
    prefix = str(root) + "/"
    for entry in reversed(mounts.mount_table()):
        if entry.mountpoint.startswith(prefix):
            try:
                mounts.unmount(entry.mountpoint, lazy=True)
            except mounts.MountError:
                subprocess.run(["fusermount3", "-u", "-z", entry.mountpoint],
                               capture_output=True, check=False)


@dataclass
class PluginProc:
    """A running fusecache-csi and stubs for its three services."""

    root: Path
    extra_args: list[str] = field(default_factory=list)
    proc: subprocess.Popen | None = None
    channel: grpc.Channel | None = None

    @property
    def socket(self) -> Path:
        return self.root / "csi.sock"

    @property
    def state_dir(self) -> Path:
        return self.root / "state"

    @property
    def log_path(self) -> Path:
        return self.root / "plugin.log"

    def start(self, wait_ready: bool = True) -> PluginProc:
        env = {"PATH": f"{VENV_BIN}:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(self.root),
               "LANG": "C.UTF-8",
               # the source tree, so the plugin runs this checkout's csi/ and fusecache/
               "PYTHONPATH": str(REPO)}
        argv = [str(VENV_BIN / "fusecache-csi"), "--endpoint", f"unix://{self.socket}",
                "--node-id", "test-node", "--mode", "all",
                "--cache-dir", str(self.root / "cache"), "--state-dir", str(self.state_dir),
                "--fusecache-bin", str(VENV_BIN / "fusecache"), "--log-level", "DEBUG",
                "--mount-timeout", "60", *self.extra_args]
        logf = open(self.log_path, "ab")  # noqa: SIM115 - owned by the process
        self.proc = subprocess.Popen(argv, env=env, stdout=logf, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        logf.close()
        deadline = time.monotonic() + 30
        while not self.socket.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"plugin did not start:\n{self.log()}")
            time.sleep(0.05)
        self.channel = grpc.insecure_channel(f"unix://{self.socket}")
        grpc.channel_ready_future(self.channel).result(timeout=10)
        if wait_ready:
            self.wait_ready()
        return self

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not self.identity.Probe(csi_pb2.ProbeRequest()).ready.value:
            if time.monotonic() > deadline:
                raise RuntimeError(f"plugin never became ready:\n{self.log()}")
            time.sleep(0.1)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-20000:]
        except FileNotFoundError:
            return ""

    @property
    def identity(self) -> csi_pb2_grpc.IdentityStub:
        return csi_pb2_grpc.IdentityStub(self.channel)

    @property
    def controller(self) -> csi_pb2_grpc.ControllerStub:
        return csi_pb2_grpc.ControllerStub(self.channel)

    @property
    def node(self) -> csi_pb2_grpc.NodeStub:
        return csi_pb2_grpc.NodeStub(self.channel)

    def kill(self, sig: int = signal.SIGKILL) -> int | None:
        if self.channel is not None:
            self.channel.close()
            self.channel = None
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        return self.proc.returncode if self.proc is not None else None


@dataclass
class S3Volume:
    """A bucket with a small dataset and the CSI maps that point at it."""

    bucket: str
    prefix: str
    files: dict[str, bytes]
    context: dict[str, str]
    secrets: dict[str, str]
    parameters: dict[str, str]


@dataclass
class KubeletLayout:
    """Paths laid out as the kubelet lays them out, under a test's directory."""

    root: Path  # stands for /var/lib/kubelet
    driver: str = "csi.fusecache.io"

    @property
    def plugins_dir(self) -> Path:
        return self.root / "plugins"

    def staging(self, pv: str) -> Path:
        """The device mount path ('globalmount') the kubelet gives NodeStageVolume."""
        digest = hashlib.sha256(pv.encode()).hexdigest()
        return self.plugins_dir / "kubernetes.io" / "csi" / self.driver / digest / "globalmount"

    def target(self, pod_uid: str, pv: str) -> Path:
        return self.root / "pods" / pod_uid / "volumes" / "kubernetes.io~csi" / pv / "mount"

    def make(self, path: Path) -> Path:
        """The kubelet creates the staging dir's parent and the target's parent."""
        path.parent.mkdir(parents=True, exist_ok=True)
        return path


def kubelet_blocking_refs(staging: Path, targets: list[Path], plugins_dir: Path) -> list[str]:
    """The mounts that make the kubelet's UnmountDevice refuse to unstage.

    The kubelet lists every mount of the same file system (same device and root in
    its own mountinfo) as the device mount path; each one that is neither the
    staging path, nor a publish target, nor under the kubelet's plugins folder is a
    "reference" that blocks the unstage (the issue's emulation of its check).
    """
    table = mounts.mount_table()
    at_staging = [e for e in table if e.mountpoint == str(staging)]
    if not at_staging:
        return []
    dev, root = at_staging[-1].device, at_staging[-1].root
    allowed = {str(staging), *map(str, targets)}
    prefix = str(plugins_dir) + "/"
    return [e.mountpoint for e in table
            if e.device == dev and e.root == root and e.mountpoint not in allowed
            and not e.mountpoint.startswith(prefix)]


def leftovers(root: Path, plugin: PluginProc | None,
              keep: tuple[int, ...] = ()) -> dict[str, list[str]]:
    """Mounts below *root*, processes naming it (other than the plugin and *keep*)
    and volume records: what must be gone once a volume is unstaged."""
    plugin_pid = plugin.proc.pid if plugin is not None and plugin.proc is not None else -1
    records = root / "state" / "node" / "volumes"
    return {
        "mounts": [e.mountpoint for e in mounts.mount_table()
                   if e.mountpoint.startswith(str(root) + "/")],
        "processes": [str(p) for p in pids_mentioning(str(root))
                      if p != plugin_pid and p not in keep],
        "records": sorted(p.name for p in records.glob("*.json")) if records.is_dir() else [],
    }
