"""``fusecache-csi``: serve the CSI Identity, Controller and/or Node services.

Configuration is read and validated once, here, from flags and environment
variables (flags win); a bad setting stops the process at start with one clear
line instead of failing later inside an RPC. Start-up order:

1. bind the unix socket and start gRPC (Probe answers ready=false),
2. node mode: re-establish every staged volume (``NodeServicer.reconcile``),
3. mark ready; node mode then repairs dead mounts every ``--health-interval`` s.

SIGTERM/SIGINT stop the gRPC server gracefully. FUSE mounts are deliberately
left running: pods keep reading while the plugin is restarted or upgraded.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import signal
import socket
import sys
import threading
import time
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path

import grpc

from csi import DRIVER_NAME, vendor_version
from csi._proto import csi_pb2_grpc
from csi.controller import ControllerServicer
from csi.identity import IdentityServicer
from csi.mounts import FusecacheCommand
from csi.node import NodeConfig, NodeServicer
from csi.rpc import Readiness
from csi.state import ControllerRegistry, NodeStateStore
from fusecache import cliargs
from fusecache.config import parse_size
from fusecache.errors import ConfigError as FusecacheConfigError

log = logging.getLogger("csi")


class ConfigError(Exception):
    """A start-up setting is wrong; the message says which and why."""


@dataclass(frozen=True)
class Config:
    """Validated plugin settings (see ``--help`` for each)."""

    endpoint: str
    socket_path: Path
    mode: str
    node_id: str
    cache_dir: Path
    state_dir: Path
    secrets_dir: Path
    fusecache_bin: str
    disk_cache_size: str
    mount_timeout_s: float
    health_interval_s: float
    log_level: str
    resend_timeout_s: float = 30.0
    relay_holder: str = ""

    @property
    def serves_node(self) -> bool:
        return self.mode in ("node", "all")

    @property
    def serves_controller(self) -> bool:
        return self.mode in ("controller", "all")


MODES = ("node", "controller", "all")


def _parser() -> argparse.ArgumentParser:
    env = os.environ.get
    p = cliargs.Parser(prog="fusecache-csi",
                       description="fusecache-csi: serve the CSI Identity, Controller and/or "
                                   "Node services of the fusecache CSI driver (csi.fusecache.io).")
    cliargs.add_version(p)
    p.add_argument("--endpoint", default=env("CSI_ENDPOINT", "unix:///csi/csi.sock"),
                   help="gRPC endpoint, unix:///path (env CSI_ENDPOINT; default "
                        "unix:///csi/csi.sock)")
    p.add_argument("--node-id", default=env("NODE_ID", ""),
                   help="this node's id, usually spec.nodeName (env NODE_ID; default: "
                        "the host name)")
    p.add_argument("--mode", choices=MODES, default=env("FUSECACHE_CSI_MODE", "all"),
                   help="which services to serve (env FUSECACHE_CSI_MODE; default all)")
    p.add_argument("--cache-dir", default=env("FUSECACHE_CACHE_DIR", "/var/lib/fusecache"),
                   help="the node cache shared by every volume (env FUSECACHE_CACHE_DIR; "
                        "default /var/lib/fusecache)")
    p.add_argument("--state-dir", default=env("FUSECACHE_CSI_STATE_DIR",
                                              "/var/lib/fusecache-csi"),
                   help="records of staged (node) and created (controller) volumes, relay "
                        "specs and FUSE server logs; no mount lives here; must survive restarts "
                        "(env FUSECACHE_CSI_STATE_DIR; default /var/lib/fusecache-csi)")
    p.add_argument("--secrets-dir", default=env("FUSECACHE_CSI_SECRETS_DIR", ""),
                   help="where node-stage credentials are kept for remounts (root-only; "
                        "default STATE_DIR/secrets; put it on tmpfs)")
    p.add_argument("--fusecache-bin", default=env("FUSECACHE_BIN", ""),
                   help="the fusecache CLI (default: found next to this program or on PATH)")
    p.add_argument("--disk-cache-size", default=env("FUSECACHE_DISK_CACHE_SIZE", ""),
                   help="node cache size limit passed to every mount, e.g. 20GiB (env "
                        "FUSECACHE_DISK_CACHE_SIZE; default: the node cache keeps its bound, "
                        "20GiB for a new cache)")
    p.add_argument("--mount-timeout", type=cliargs.positive_float("--mount-timeout"),
                   default=120.0,
                   help="seconds a fusecache mount may take before NodeStage fails "
                        "(default 120)")
    p.add_argument("--health-interval", type=float, default=15.0,
                   help="seconds between checks for dead FUSE mounts, 0: only at start "
                        "(default 15)")
    p.add_argument("--resend-timeout", type=float, default=30.0,
                   help="seconds a FUSE request waits for a volume's FUSE server to be "
                        "back (after a crash or an upgrade) before it fails with EIO (default 30)")
    p.add_argument("--relay-holder", default=env("FUSECACHE_RELAY_HOLDER", ""),
                   help="unix socket of the node's relay holder (fusecache.holder), which "
                        "runs each volume's relay and FUSE server outside this process's "
                        "container (env FUSECACHE_RELAY_HOLDER; default: the plugin starts "
                        "them itself, detached)")
    p.add_argument("--log-level", default=env("FUSECACHE_CSI_LOG_LEVEL", "INFO"),
                   metavar="LEVEL", help="debug, info, warning or error, any case (env "
                                         "FUSECACHE_CSI_LOG_LEVEL; default info)")
    return p


def _find_fusecache(explicit: str) -> str:
    candidates = [explicit] if explicit else [
        str(Path(sys.executable).parent / "fusecache"), shutil.which("fusecache") or ""]
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    raise ConfigError(f"fusecache CLI not found (tried {', '.join(c for c in candidates if c)}"
                      "); set --fusecache-bin or FUSECACHE_BIN")


def load_config(argv: list[str] | None = None) -> Config:
    """Parse flags and environment once; ConfigError for anything unusable."""
    a = _parser().parse_args(argv)
    if not a.endpoint.startswith("unix://") or len(a.endpoint) <= len("unix://"):
        raise ConfigError(f"--endpoint {a.endpoint!r} must be unix:///absolute/path")
    sock = Path(a.endpoint[len("unix://"):])
    if not sock.is_absolute():
        raise ConfigError(f"--endpoint {a.endpoint!r} must name an absolute path")
    if a.mode not in MODES:  # argparse checks a --mode given, not its default from the env
        raise ConfigError(f"FUSECACHE_CSI_MODE {a.mode!r}: expected node, controller or all")
    level = a.log_level.upper()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise ConfigError(f"--log-level {a.log_level!r} is not DEBUG, INFO, WARNING or ERROR")
    if a.disk_cache_size:
        try:
            size = parse_size(a.disk_cache_size, "--disk-cache-size")
        except FusecacheConfigError:
            size = -1
        if size <= 0:
            raise ConfigError(f"--disk-cache-size (env FUSECACHE_DISK_CACHE_SIZE) "
                              f"{a.disk_cache_size!r}: expected a size > 0 such as 20GiB")
    for flag, env_name, value in (("--state-dir", "FUSECACHE_CSI_STATE_DIR", a.state_dir),
                                  ("--cache-dir", "FUSECACHE_CACHE_DIR", a.cache_dir),
                                  ("--secrets-dir", "FUSECACHE_CSI_SECRETS_DIR", a.secrets_dir)):
        problem = cliargs.dir_problem(value) if value else None
        if problem:  # (a file there made start-up fail later with an OSError, exit 1)
            raise ConfigError(f"{flag} (env {env_name}) {value}: {problem}")
    state_dir = Path(a.state_dir)
    node_id = a.node_id or socket.gethostname()
    binary = ""
    if a.mode in ("node", "all"):
        binary = _find_fusecache(a.fusecache_bin)
        if not node_id:
            raise ConfigError("--node-id is empty and the host name is unknown")
    if not a.mount_timeout > 0 or not a.health_interval >= 0:  # (nan too)
        raise ConfigError(f"--mount-timeout {a.mount_timeout:g}: must be > 0"
                          if not a.mount_timeout > 0 else
                          f"--health-interval {a.health_interval:g}: must be >= 0")
    if a.resend_timeout <= 0:
        raise ConfigError("--resend-timeout must be > 0")
    if a.relay_holder and not os.path.isabs(a.relay_holder):
        raise ConfigError(f"--relay-holder {a.relay_holder!r} must be an absolute path")
    return Config(endpoint=a.endpoint, socket_path=sock, mode=a.mode, node_id=node_id,
                  cache_dir=Path(a.cache_dir), state_dir=state_dir,
                  secrets_dir=Path(a.secrets_dir) if a.secrets_dir else state_dir / "secrets",
                  fusecache_bin=binary, disk_cache_size=a.disk_cache_size,
                  mount_timeout_s=a.mount_timeout, health_interval_s=a.health_interval,
                  log_level=level, resend_timeout_s=a.resend_timeout,
                  relay_holder=a.relay_holder)


class Plugin:
    """The gRPC server and its services; ``start`` / ``stop`` for main() and tests."""

    def __init__(self, config: Config) -> None:
        self.config = config
        # before anything reads the volumes' records or restarts their servers
        self._state_lock = _hold_state_dir(config.state_dir)
        self.readiness = Readiness()
        self.stopping = threading.Event()
        # RPCs past maximum_concurrent_rpcs get RESOURCE_EXHAUSTED (the kubelet retries)
        # instead of waiting in the executor's unbounded queue
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=16,
                                                             thread_name_prefix="csi-rpc"),
                                  maximum_concurrent_rpcs=64)
        self.node: NodeServicer | None = None
        csi_pb2_grpc.add_IdentityServicer_to_server(
            IdentityServicer(self.readiness, controller=config.serves_controller), self.server)
        if config.serves_controller:
            csi_pb2_grpc.add_ControllerServicer_to_server(
                ControllerServicer(ControllerRegistry(config.state_dir), self.readiness),
                self.server)
        if config.serves_node:
            config.cache_dir.mkdir(parents=True, exist_ok=True)
            store = NodeStateStore(config.state_dir, config.secrets_dir)
            fusecache = FusecacheCommand(binary=config.fusecache_bin,
                                         cache_dir=str(config.cache_dir),
                                         disk_cache_size=config.disk_cache_size,
                                         timeout_s=config.mount_timeout_s,
                                         resend_timeout_s=config.resend_timeout_s,
                                         holder_socket=config.relay_holder)
            # The environment is read once: mounts without a secret inherit this copy.
            self.node = NodeServicer(NodeConfig(config.node_id, fusecache, dict(os.environ)),
                                     store, self.readiness)
            csi_pb2_grpc.add_NodeServicer_to_server(self.node, self.server)

    def start(self) -> None:
        sock = self.config.socket_path
        sock.parent.mkdir(parents=True, exist_ok=True)
        if sock.exists() or sock.is_symlink():
            _wait_until_unserved(sock)
            sock.unlink()  # a stale socket from a previous run
        self.server.add_insecure_port(self.config.endpoint)
        self.server.start()
        log.info("%s %s serving %s on %s", DRIVER_NAME, vendor_version(), self.config.mode,
                 self.config.endpoint)
        threading.Thread(target=self._become_ready, name="csi-startup", daemon=True).start()

    def _become_ready(self) -> None:
        if self.node is not None:
            failed = self.node.reconcile()
            if failed:
                log.warning("%d staged volume(s) could not be re-established; the health "
                            "check keeps trying", failed)
        self.readiness.set()
        log.info("ready")
        if self.node is not None and self.config.health_interval_s > 0:
            self.node.run_health_loop(self.config.health_interval_s, self.stopping)

    def stop(self, grace_s: float = 10.0) -> None:
        self.stopping.set()
        self.server.stop(grace_s).wait()
        if self._state_lock >= 0:
            os.close(self._state_lock)  # (the lock goes with it)
            self._state_lock = -1
        log.info("stopped (FUSE mounts stay up)")


# How long a plugin starting waits for another on the same state dir or socket to stop (a
# rolling update's old pod still stopping), before it refuses to start.
OTHER_PLUGIN_WAIT_S = 30.0


def _hold_state_dir(state_dir: Path) -> int:
    """Hold ``<state_dir>/plugin.lock`` for the life of the process: one plugin per state
    dir. A blind test started a second fusecache-csi on a node by mistake: it restarted
    the FUSE servers of live volumes (its flags differed) and took the socket over, and the
    first, still running, was never reached again. Waits OTHER_PLUGIN_WAIT_S for the
    other to stop, then RuntimeError naming it."""
    import fcntl

    state_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(state_dir / "plugin.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    deadline = time.monotonic() + OTHER_PLUGIN_WAIT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if time.monotonic() >= deadline:
                other = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
                os.close(fd)
                raise RuntimeError(
                    f"state dir {state_dir} is in use by another fusecache-csi (pid {other}) "
                    f"for {OTHER_PLUGIN_WAIT_S:g}s: stop it first (one plugin per node)"
                ) from None
            time.sleep(0.5)
            continue
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return fd


def _wait_until_unserved(sock: Path) -> None:
    """Return once nothing answers on *sock* (a stale socket file); RuntimeError when a
    server still does after OTHER_PLUGIN_WAIT_S (another plugin on this endpoint, with
    another state dir: taking its socket over would leave it unreachable)."""
    deadline = time.monotonic() + OTHER_PLUGIN_WAIT_S
    while True:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.settimeout(1.0)
            try:
                probe.connect(str(sock))
            except OSError:
                return
        if time.monotonic() >= deadline:
            raise RuntimeError(f"another process serves {sock} (a second fusecache-csi?): "
                               "stop it first, or give this one another --endpoint")
        time.sleep(0.5)


def main(argv: list[str] | None = None) -> int:
    try:
        config = load_config(argv)
    except ConfigError as e:
        print(f"fusecache-csi: error: {e}", file=sys.stderr)
        return 2
    cliargs.configure_logging(config.log_level, "%(asctime)s %(levelname)s %(name)s: %(message)s",
                              stream=sys.stderr)
    try:
        plugin = Plugin(config)
        plugin.start()
    except (OSError, RuntimeError) as e:
        print(f"fusecache-csi: cannot start: {e}", file=sys.stderr)
        return 1
    done = threading.Event()

    def _on_signal(signum: int, _frame: object) -> None:
        log.info("received %s, stopping", signal.Signals(signum).name)
        done.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    done.wait()
    plugin.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
