"""Run real ``fusecache`` mounts from tests and always clean them up."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

FUSECACHE = [sys.executable, "-m", "fusecache.cli"]


def run_cli(args: list[str], env: dict[str, str] | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess:
    full_env = dict(os.environ)
    full_env.pop("AWS_CA_BUNDLE", None)
    if env:
        full_env.update(env)
    return subprocess.run(FUSECACHE + args, env=full_env, capture_output=True, text=True,
                          timeout=timeout)


def free_port() -> int:
    """A TCP port on 127.0.0.1 free right now (for a mount's --metrics-port)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def mount_pids(mountpoint: Path) -> list[int]:
    """PIDs of fusecache processes serving *mountpoint* (from their command lines)."""
    target = str(mountpoint)
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            argv = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        args = [a.decode(errors="replace") for a in argv]
        if "fusecache.cli" in args and "mount" in args and target in args:
            pids.append(int(d.name))
    return pids


def force_unmount(mountpoint: Path) -> None:
    subprocess.run(["fusermount3", "-u", "-z", str(mountpoint)], capture_output=True)
    for pid in mount_pids(mountpoint):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def mounted(source: str, mountpoint: Path, env: dict[str, str], *extra: str) -> Iterator[Path]:
    mountpoint.mkdir(parents=True, exist_ok=True)
    r = run_cli(["mount", source, str(mountpoint), *extra], env=env)
    if r.returncode != 0:
        force_unmount(mountpoint)
        raise AssertionError(f"mount failed: {r.stderr}")
    try:
        yield mountpoint
    finally:
        r = run_cli(["umount", str(mountpoint)], env=env)
        deadline = time.monotonic() + 10
        while mount_pids(mountpoint) and time.monotonic() < deadline:
            time.sleep(0.1)
        force_unmount(mountpoint)
