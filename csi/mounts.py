"""Mount primitives for the node plugin: mount(2), /proc/self/mountinfo, ``fusecache``.

Bind mounts go through libc's mount(2) directly (no ``mount`` command line to
parse or to leak into ``ps``). A path's state is one of three values:

* ``ABSENT``: nothing is mounted there;
* ``LIVE``: something is mounted and answers statfs();
* ``DEAD``: a mount whose FUSE server went away: statfs() fails with ENOTCONN
  ("Transport endpoint is not connected"), or ECONNABORTED after an abort.

A dead mount cannot be revived; it is detached (MNT_DETACH) and mounted anew,
which is what the node plugin's recovery does.

``fusecache mount`` is run with its credentials in the child's environment only,
stdout discarded and stderr captured to an anonymous file (not a pipe: the
detached FUSE server may inherit it and would keep a pipe open forever).
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

log = logging.getLogger(__name__)

MS_RDONLY = 1
MS_REMOUNT = 32
MS_BIND = 4096
MNT_DETACH = 2

_DEAD_ERRNOS = {errno.ENOTCONN, errno.ECONNABORTED}

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                        ctypes.c_void_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]


class MountError(Exception):
    """A mount operation failed; the message is safe to show (no secrets)."""


class PathState(Enum):
    ABSENT = "absent"
    LIVE = "live"
    DEAD = "dead"


@dataclass(frozen=True)
class MountEntry:
    """One line of /proc/self/mountinfo."""

    mount_id: int
    device: str  # "major:minor"
    root: str
    mountpoint: str
    fstype: str
    source: str


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as \\ooo."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and i + 4 <= len(field) and field[i + 1:i + 4].isdigit():
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def mount_table() -> list[MountEntry]:
    """The calling process's mounts, in mount order."""
    entries = []
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            a, b = left.split(), right.split()
            entries.append(MountEntry(int(a[0]), a[2], _unescape(a[3]), _unescape(a[4]),
                                      b[0], _unescape(b[1]) if len(b) > 1 else ""))
    return entries


def normalize(path: str) -> str:
    """An absolute path with symlinks resolved in its parent (not in its last part,
    which may be a dead mount that cannot be stat'ed)."""
    path = os.path.abspath(path)
    parent, name = os.path.split(path)
    return os.path.join(os.path.realpath(parent), name)


def mounts_at(path: str) -> list[MountEntry]:
    path = normalize(path)
    return [e for e in mount_table() if e.mountpoint == path]


def is_mountpoint(path: str) -> bool:
    return bool(mounts_at(path))


def path_state(path: str) -> PathState:
    """ABSENT, LIVE or DEAD (see module docstring)."""
    if not is_mountpoint(path):
        return PathState.ABSENT
    try:
        # statfs always reaches the FUSE server; stat() may be answered from the
        # kernel's attribute cache and call a dead mount live.
        os.statvfs(path)
    except OSError as e:
        if e.errno in _DEAD_ERRNOS:
            return PathState.DEAD
        raise
    return PathState.LIVE


def same_filesystem(a: str, b: str) -> bool:
    """True when both paths are live and on the same superblock (a bind of one another)."""
    try:
        return os.stat(a).st_dev == os.stat(b).st_dev
    except OSError:
        return False


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise MountError(f"{what}: {os.strerror(err)}")


def bind_mount(source: str, target: str, readonly: bool) -> None:
    """Bind *source* onto *target*; read-only needs a second remount call in Linux."""
    _check(_libc.mount(source.encode(), target.encode(), None, MS_BIND, None),
           f"bind mount onto {target}")
    if readonly:
        rc = _libc.mount(None, target.encode(), None, MS_REMOUNT | MS_BIND | MS_RDONLY, None)
        if rc != 0:
            err = ctypes.get_errno()
            _libc.umount2(target.encode(), MNT_DETACH)
            raise MountError(f"read-only remount of {target}: {os.strerror(err)}")


def unmount(path: str, lazy: bool = False) -> None:
    """umount2(2); with *lazy*, detach now and let the kernel finish when unused."""
    _check(_libc.umount2(path.encode(), MNT_DETACH if lazy else 0), f"unmount {path}")


def unmount_all(path: str) -> None:
    """Remove every mount stacked on *path*; falls back to a lazy detach when busy."""
    for _ in range(16):
        if not is_mountpoint(path):
            return
        try:
            unmount(path)
        except MountError:
            unmount(path, lazy=True)
    if is_mountpoint(path):
        raise MountError(f"{path} is still mounted after 16 unmounts")


@dataclass(frozen=True)
class FusecacheCommand:
    """How to run the ``fusecache`` CLI on this node."""

    binary: str
    cache_dir: str
    disk_cache_size: str = ""
    timeout_s: float = 120.0

    def mount(self, uri: str, mountpoint: str, options: Sequence[str],
              env: Mapping[str, str], log_file: str) -> None:
        """Run ``fusecache mount`` (detaching); MountError carries its stderr line."""
        argv = [self.binary, "mount", uri, mountpoint, "--cache-dir", self.cache_dir,
                "--allow-other", "--log-file", log_file, *options]
        if self.disk_cache_size:
            argv += ["--disk-cache-size", self.disk_cache_size]
        log.debug("running %s", " ".join(argv))  # argv never holds credentials
        with tempfile.TemporaryFile() as errf:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=errf, env=dict(env), close_fds=True)
            try:
                rc = proc.wait(timeout=self.timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                if is_mountpoint(mountpoint):
                    unmount_all(mountpoint)
                raise MountError(f"fusecache mount of {uri} did not finish within "
                                 f"{self.timeout_s:.0f}s") from None
            errf.seek(0)
            stderr = errf.read(64 * 1024).decode("utf-8", "replace")
        if rc != 0:
            lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
            detail = lines[-1] if lines else f"exit status {rc}"
            raise MountError(f"fusecache mount of {uri} failed: {detail[:500]}")
        deadline = time.monotonic() + 10
        while path_state(mountpoint) is not PathState.LIVE:
            if time.monotonic() > deadline:
                raise MountError(f"fusecache mount of {uri} exited 0 but {mountpoint} "
                                 "is not a live mount")
            time.sleep(0.05)

    def umount(self, mountpoint: str) -> None:
        """``fusecache umount``; detach the mount ourselves if that fails (dead server)."""
        if not is_mountpoint(mountpoint):
            return
        try:
            subprocess.run([self.binary, "umount", mountpoint], stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           timeout=30, check=True)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as e:
            log.info("fusecache umount %s failed (%s); detaching it", mountpoint,
                     type(e).__name__)
        if is_mountpoint(mountpoint):
            unmount_all(mountpoint)
