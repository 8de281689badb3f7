"""A network namespace behind a veth pair with a tbf-shaped link, for benchmarks.

On loopback a 2-core machine is CPU-bound, not link-bound; remote object storage is
link-bound. Running the S3 server in a namespace of our own behind a shaped veth
link (tc tbf; this machine has no netem, so no added delay) shows whether a reader
fills the link. Addresses are the namespace's own, made here and removed on exit.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator

NS = "fcbench"
HOST_IF, NS_IF = "fcb-h", "fcb-n"
HOST_IP, NS_IP = "10.231.77.1", "10.231.77.2"


def tbf_args(mbit: int) -> list[str]:
    """tc's qdisc arguments for a *mbit* link: tbf with a burst of 10 ms of traffic (at
    least 64 KiB). Also tests/group/netns.py's links. A burst of 10 us (until 2026-12-05)
    held an emulated 10 Gbit/s link to 391 MB/s of one TCP stream; 10 ms: 1,201 MB/s."""
    burst = max(64 * 1024, mbit * 1_000_000 // 8 // 100)
    return ["tbf", "rate", f"{mbit}mbit", "burst", str(burst), "latency", "50ms"]


def _run(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True)


def teardown() -> None:
    subprocess.run(["ip", "netns", "del", NS], capture_output=True)
    subprocess.run(["ip", "link", "del", HOST_IF], capture_output=True)


@contextlib.contextmanager
def shaped_namespace(mbit: int) -> Iterator[tuple[str, list[str]]]:
    """Yield (server ip, command prefix) for a server reachable over a *mbit* link."""
    teardown()
    try:
        _run("ip", "netns", "add", NS)
        _run("ip", "link", "add", HOST_IF, "type", "veth", "peer", "name", NS_IF)
        _run("ip", "link", "set", NS_IF, "netns", NS)
        _run("ip", "addr", "add", f"{HOST_IP}/30", "dev", HOST_IF)
        _run("ip", "link", "set", HOST_IF, "up")
        ns = ["ip", "netns", "exec", NS]
        _run(*ns, "ip", "addr", "add", f"{NS_IP}/30", "dev", NS_IF)
        _run(*ns, "ip", "link", "set", NS_IF, "up")
        _run(*ns, "ip", "link", "set", "lo", "up")
        # Shape both directions: server -> client data and client -> server requests.
        for prefix, dev in ((ns, NS_IF), ([], HOST_IF)):
            _run(*prefix, "tc", "qdisc", "add", "dev", dev, "root", *tbf_args(mbit))
        yield NS_IP, ns
    finally:
        teardown()
