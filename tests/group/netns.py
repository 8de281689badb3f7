"""Several cache-group "nodes" on one machine: network namespaces on a bridge, shaped with tbf.

Who uses it: the cache-group end-to-end tests (tests/group/test_group_e2e.py) and
bench/run_group_bench.py. Root is needed (ip netns, veth, tc).

Topology (all made here and removed on exit)::

    root ns: bridge <br> 10.233.N.1 (the test process: uploads, inspection)
      |-- veth, tbf S3_MBIT both ways -- ns <p>s3:  10.233.N.2  SeaweedFS + latency proxy
      |-- veth, tbf PEER_MBIT both ways - ns <p>n1: 10.233.N.11 a node (peer server, mounts)
      |-- ...                           - ns <p>nK: 10.233.N.(10+K)

S3 is reached through bench/training/latency_proxy.py in the S3 namespace (a fixed delay on
every request: first-byte latency, as ``tc`` here has no netem), over a 1 Gbit/s link by
default; node-to-node traffic crosses two 10 Gbit/s veths. Processes run in a namespace with
``nsenter --net`` only: ``ip netns exec`` would also give them a mount namespace of their own,
and a FUSE mount made there would be invisible to the test. Every process started here is
tracked and killed by its pid on exit; mounts are unmounted.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from fusecache.locals3 import LocalS3

ROOT = Path(__file__).resolve().parents[2]
PROXY = ROOT / "bench" / "training" / "latency_proxy.py"
if str(ROOT / "bench") not in sys.path:  # the benchmarks' links are shaped the same way
    sys.path.insert(0, str(ROOT / "bench"))
from shaped_link import tbf_args  # noqa: E402


def available() -> str | None:
    """Why the harness cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    for tool in ("ip", "tc", "nsenter", "fusermount3"):
        if shutil.which(tool) is None:
            return f"needs {tool}"
    if not os.path.exists("/dev/fuse"):
        return "needs /dev/fuse"
    return None


def _run(*cmd: str) -> None:
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip()}")


def _shape(prefix: list[str], dev: str, mbit: int) -> None:
    _run(*prefix, "tc", "qdisc", "add", "dev", dev, "root", *tbf_args(mbit))


@dataclass
class Node:
    """One emulated node: its namespace, address and cache dir."""

    name: str
    ns: str
    ip: str
    cache_dir: Path

    @property
    def prefix(self) -> list[str]:
        """Run a command with this node's network (and the shared mount namespace)."""
        return ["nsenter", f"--net=/run/netns/{self.ns}"]


@dataclass
class Cluster:
    """The namespaces, S3 behind its shaped link, and every process started for the nodes."""

    workdir: Path
    names: list[str]
    s3_mbit: int = 1000
    peer_mbit: int = 10000
    s3_delay_ms: float = 20.0
    tag: str = field(default_factory=lambda: f"fg{os.getpid() % 10000:04d}")
    nodes: dict[str, Node] = field(default_factory=dict)
    s3: LocalS3 | None = None
    s3_proxy: str = ""  # http://ip:port of the latency proxy (what nodes use)
    _procs: list[subprocess.Popen] = field(default_factory=list)
    _mounts: list[Path] = field(default_factory=list)
    _links: list[str] = field(default_factory=list)
    _namespaces: list[str] = field(default_factory=list)
    _octet: int | None = None

    @property
    def subnet(self) -> str:
        """10.233.N: N from the tag, moved on past any subnet another run holds."""
        if self._octet is None:
            used = subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True,
                                  text=True).stdout
            first = int(self.tag[2:]) % 200
            self._octet = next((o for o in ((first + k) % 200 for k in range(200))
                                if f" 10.233.{o}." not in used), first)
        return f"10.233.{self._octet}"

    @property
    def bridge(self) -> str:
        return f"{self.tag}br"

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> Cluster:
        self.teardown_network()
        try:
            _run("ip", "link", "add", self.bridge, "type", "bridge")
            self._links.append(self.bridge)
            _run("ip", "addr", "add", f"{self.subnet}.1/24", "dev", self.bridge)
            _run("ip", "link", "set", self.bridge, "up")
            s3_ns = self._namespace("s3", 2, self.s3_mbit)
            for i, name in enumerate(self.names, start=1):
                ns = self._namespace(f"n{i}", 10 + i, self.peer_mbit)
                d = self.workdir / name
                d.mkdir(parents=True, exist_ok=True)
                self.nodes[name] = Node(name, ns, f"{self.subnet}.{10 + i}", d)
            self.s3 = LocalS3(ip=f"{self.subnet}.2", cmd_prefix=["nsenter",
                                                                 f"--net=/run/netns/{s3_ns}"])
            self.s3.start()
            proxy = self.spawn(["nsenter", f"--net=/run/netns/{s3_ns}", sys.executable,
                                str(PROXY), "--listen", f"{self.subnet}.2:0", "--upstream",
                                f"{self.subnet}.2:{self.s3.s3_port}", "--delay-ms",
                                str(self.s3_delay_ms)], self.workdir / "s3-proxy.log",
                               stdout=subprocess.PIPE)
            line = proxy.stdout.readline().decode() if proxy.stdout else ""
            m = re.search(r"listening (\S+):(\d+)", line)
            if not m:
                raise RuntimeError(f"latency proxy did not start: {line!r}")
            self.s3_proxy = f"http://{m.group(1)}:{m.group(2)}"
        except BaseException:
            self.stop()
            raise
        return self

    def _namespace(self, short: str, host: int, mbit: int) -> str:
        ns = f"{self.tag}{short}"
        outer, inner = f"{self.tag}{short}h", f"{self.tag}{short}i"
        _run("ip", "netns", "add", ns)
        self._namespaces.append(ns)
        _run("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
        self._links.append(outer)
        _run("ip", "link", "set", inner, "netns", ns)
        _run("ip", "link", "set", outer, "master", self.bridge)
        _run("ip", "link", "set", outer, "up")
        pre = ["ip", "netns", "exec", ns]
        _run(*pre, "ip", "addr", "add", f"{self.subnet}.{host}/24", "dev", inner)
        _run(*pre, "ip", "link", "set", inner, "up")
        _run(*pre, "ip", "link", "set", "lo", "up")
        _shape(pre, inner, mbit)
        _shape([], outer, mbit)
        return ns

    def stop(self) -> None:
        for mnt in reversed(self._mounts):
            self.umount(mnt)
        for p in reversed(self._procs):
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(timeout=5)
        self._procs.clear()
        if self.s3 is not None:
            self.s3.cleanup()
            self.s3 = None
        self.teardown_network()

    def teardown_network(self) -> None:
        for ns in [*self._namespaces, *(f"{self.tag}{s}" for s in ["s3"] + [
                f"n{i}" for i in range(1, len(self.names) + 1)])]:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        for link in [*self._links, self.bridge]:
            subprocess.run(["ip", "link", "del", link], capture_output=True)
        self._namespaces.clear()
        self._links.clear()

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- processes ---------------------------------------------------------------------------

    def env(self) -> dict[str, str]:
        """Environment for node processes: S3 through the latency proxy."""
        assert self.s3 is not None
        env = {k: v for k, v in os.environ.items() if k != "AWS_CA_BUNDLE"}
        env.update(self.s3.env(self.s3_proxy))
        return env

    def spawn(self, cmd: list[str], log: Path, stdout: int | None = None,
              env: dict[str, str] | None = None) -> subprocess.Popen:
        """Start a tracked process (killed by pid on exit); stderr (and stdout) to *log*."""
        f = open(log, "ab")
        p = subprocess.Popen(cmd, stdout=stdout if stdout is not None else f, stderr=f,
                             stdin=subprocess.DEVNULL, env=env, cwd=ROOT)
        f.close()
        self._procs.append(p)
        return p

    def run(self, node: Node, args: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
        """Run a command in *node*'s network and wait for it."""
        return subprocess.run(node.prefix + args, capture_output=True, text=True,
                              timeout=timeout, env=self.env(), cwd=ROOT)

    def peer_serve(self, node: Node, port: int, *extra: str) -> subprocess.Popen:
        """``fusecache peer-serve`` on *node*; returns once it says it listens."""
        log = self.workdir / f"{node.name}-peer.log"
        p = self.spawn(node.prefix + [sys.executable, "-m", "fusecache.cli", "peer-serve",
                                      "--cache-dir", str(node.cache_dir), "--listen",
                                      f"{node.ip}:{port}", *extra], log,
                       stdout=subprocess.PIPE, env=self.env())
        line = p.stdout.readline().decode() if p.stdout else ""
        if "listening on" not in line:
            p.wait(timeout=10)
            raise RuntimeError(f"peer-serve on {node.name} did not start: {line!r} "
                               f"{log.read_text()[-2000:]}")
        return p

    def mount(self, node: Node, source: str, mountpoint: Path, *extra: str) -> Path:
        """``fusecache mount`` in *node*'s network; the mount is visible to the test."""
        mountpoint.mkdir(parents=True, exist_ok=True)
        r = self.run(node, [sys.executable, "-m", "fusecache.cli", "mount", source,
                            str(mountpoint), "--cache-dir", str(node.cache_dir), *extra])
        if r.returncode != 0:
            subprocess.run(["fusermount3", "-u", "-z", str(mountpoint)], capture_output=True)
            raise RuntimeError(f"mount on {node.name} failed: {r.stderr}")
        self._mounts.append(mountpoint)
        return mountpoint

    def umount(self, mountpoint: Path) -> None:
        subprocess.run([sys.executable, "-m", "fusecache.cli", "umount", str(mountpoint)],
                       capture_output=True, timeout=30)
        deadline = time.monotonic() + 10
        while os.path.ismount(mountpoint) and time.monotonic() < deadline:
            time.sleep(0.1)
        subprocess.run(["fusermount3", "-u", "-z", str(mountpoint)], capture_output=True)
        if mountpoint in self._mounts:
            self._mounts.remove(mountpoint)


@contextlib.contextmanager
def cluster(workdir: Path, names: list[str], **kw: object) -> Iterator[Cluster]:
    c = Cluster(workdir, names, **kw)  # type: ignore[arg-type]
    with c:
        yield c
