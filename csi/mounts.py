"""Mount primitives for the node plugin: mount(2), /proc/self/mountinfo, ``fusecache``.

Bind mounts go through libc's mount(2) directly (no ``mount`` command line to
parse or to leak into ``ps``). A path's state is one of three values:

* ``ABSENT``: nothing is mounted there;
* ``LIVE``: something is mounted and answers statfs();
* ``DEAD``: a mount whose FUSE connection is gone: statfs() fails with ENOTCONN
  ("Transport endpoint is not connected"), or ECONNABORTED after an abort.

A dead mount cannot be revived; it is detached (MNT_DETACH) and mounted anew,
which is what the node plugin's recovery does.

A volume's FUSE file system is mounted here with mount(2) on an fd of /dev/fuse
(``fuse_mount``); that fd goes to the volume's relay (``fusecache.relay``), started
detached in its own session or, with a relay holder, by ``fusecache.holder``
outside this container. The relay runs ``fusecache mount /dev/fd/N`` (the command
line from ``server_argv``, kept in a spec file) and answers one ready line. The
credentials reach the relay and its server only through their environment.
"""

from __future__ import annotations

import ctypes
import errno
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from fusecache import holder
from fusecache.readyline import READY_ERROR, wait_ready

log = logging.getLogger(__name__)

MS_RDONLY = 1
MS_REMOUNT = 32
MS_BIND = 4096
MS_NOSUID = 2
MS_NODEV = 4
MS_NOATIME = 1024
MNT_DETACH = 2

_DEAD_ERRNOS = {errno.ENOTCONN, errno.ECONNABORTED}

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                        ctypes.c_void_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]


class MountError(Exception):
    """A mount operation failed; the message is safe to show (no secrets). *kind*: what
    the FUSE server said went wrong (fusecache.mount.READY_ERROR: denied, notfound,
    unreachable, invalid, failed)."""

    def __init__(self, message: str, kind: str = "failed") -> None:
        super().__init__(message)
        self.kind = kind


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
    """Bind *source* onto *target*; read-only needs a second remount call in Linux, which
    sets the bind's flags anew: nosuid, nodev and noatime are given again, as the FUSE mount
    has them (a blind test of the plugin found them dropped from read-only publishes)."""
    _check(_libc.mount(source.encode(), target.encode(), None, MS_BIND, None),
           f"bind mount onto {target}")
    if readonly:
        rc = _libc.mount(None, target.encode(), None, MS_REMOUNT | MS_BIND | MS_RDONLY
                         | MS_NOSUID | MS_NODEV | MS_NOATIME, None)
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


def fuse_mount(target: str, fsname: str) -> int:
    """mount(2) a read-only FUSE file system on *target*; returns its /dev/fuse fd.

    No server reads the connection yet: the first access to *target* waits for the
    FUSE INIT answer, which comes once a relay (fusecache.relay) serves the fd.
    """
    fd = os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC)
    opts = (f"fd={fd},rootmode=40000,user_id={os.getuid()},group_id={os.getgid()},"
            "allow_other,default_permissions")
    rc = _libc.mount(fsname.encode(), target.encode(), b"fuse.fusecache",
                     MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOATIME, opts.encode())
    if rc != 0:
        err = ctypes.get_errno()
        os.close(fd)
        raise MountError(f"FUSE mount on {target}: {os.strerror(err)}")
    return fd


def set_read_ahead(path: str, kib: int) -> None:
    """The kernel's read-ahead for the FUSE mount at *path* (FUSE's default is 128 KiB;
    see fusecache.mount.set_kernel_readahead). Best effort, after INIT."""
    try:
        dev = os.stat(path).st_dev
        with open(f"/sys/class/bdi/{os.major(dev)}:{os.minor(dev)}/read_ahead_kb", "w") as f:
            f.write(str(kib))
    except OSError as e:
        log.debug("read_ahead_kb of %s not set: %s", path, e)


def process_alive(pid: int) -> bool:
    """True while *pid* runs (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


@dataclass(frozen=True)
class FusecacheCommand:
    """How to run a volume's FUSE server (``fusecache mount``) behind its relay."""

    binary: str
    cache_dir: str
    disk_cache_size: str = ""
    timeout_s: float = 120.0
    resend_timeout_s: float = 30.0
    read_ahead_kib: int = 4096
    holder_socket: str = ""  # the node's relay holder (fusecache.holder), if any

    def server_argv(self, uri: str, options: Sequence[str], log_file: str) -> list[str]:
        """The server's command line; the relay fills in {fuse_fd} and {ready_fd}."""
        argv = [self.binary, "mount", uri, "/dev/fd/{fuse_fd}", "--foreground",
                "--ready-fd", "{ready_fd}", "--cache-dir", self.cache_dir,
                "--log-file", log_file, *options]
        if self.disk_cache_size:
            argv += ["--disk-cache-size", self.disk_cache_size]
        return argv

    def mount(self, uri: str, mountpoint: str, options: Sequence[str],
              env: Mapping[str, str], log_file: str, spec_file: str) -> int:
        """Mount *uri* on *mountpoint* with its relay and first server; returns the
        relay's pid. MountError carries the server's one-line error."""
        fsname = uri if re.fullmatch(r"[A-Za-z0-9_./:\-]+", uri) else "fusecache"
        write_spec(spec_file, self.server_argv(uri, options, log_file))
        fd = fuse_mount(mountpoint, fsname)
        try:
            line, pid = self._start_relay(fd, env, relay_log(log_file), spec_file)
        except (OSError, ValueError) as e:
            unmount(mountpoint, lazy=True)
            raise MountError(f"cannot start the relay of {uri}: {e}") from None
        finally:
            os.close(fd)
        if line != "ok":
            unmount(mountpoint, lazy=True)
            stop_relay(pid)
            m = READY_ERROR.fullmatch(line)
            kind = (m.group(2) or "failed") if m else \
                "failed" if line else "unreachable"
            detail = m.group(3) if m else line[len("error: "):] if line.startswith(
                "error: ") else (line or f"no answer within {self.timeout_s:.0f}s")
            raise MountError(f"fusecache mount of {uri} failed: {detail[:500]}", kind)
        proc_pid = pid
        deadline = time.monotonic() + 10
        while path_state(mountpoint) is not PathState.LIVE:
            if time.monotonic() > deadline:
                stop_relay(proc_pid)
                unmount(mountpoint, lazy=True)
                raise MountError(f"fusecache mount of {uri}: {mountpoint} is not a live "
                                 "mount")
            time.sleep(0.05)
        set_read_ahead(mountpoint, self.read_ahead_kib)
        return proc_pid

    def _start_relay(self, fd: int, env: Mapping[str, str], log_file: str,
                     spec_file: str) -> tuple[str, int]:
        """Start the volume's relay on *fd*: through the node's relay holder (a
        process outside this plugin's container) when one is configured, else as a
        detached process of our own. Returns its ready line and pid."""
        if self.holder_socket:
            answer = holder.send_request(self.holder_socket, fd, {
                "spec": spec_file, "log_file": log_file, "env": dict(env),
                "resend_timeout": self.resend_timeout_s, "timeout": self.timeout_s},
                timeout=self.timeout_s + 10)
            return str(answer.get("line", "")), int(answer.get("pid", 0))
        r, w = os.pipe()
        try:
            with open(log_file, "ab") as logf:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "fusecache.relay", "--fuse-fd", str(fd),
                     "--spec", spec_file, "--ready-fd", str(w), "--log-file", log_file,
                     "--resend-timeout", f"{self.resend_timeout_s:g}"],
                    stdin=subprocess.DEVNULL, stdout=logf, stderr=logf, env=dict(env),
                    pass_fds=(fd, w), close_fds=True, start_new_session=True)
        except OSError:
            os.close(r)
            raise
        finally:
            os.close(w)
        _children[proc.pid] = proc
        return wait_ready(r, self.timeout_s) or "", proc.pid


# Relays started by this plugin process (reaped here; a previous plugin's relays
# were re-parented to init, which reaps them).
_children: dict[int, subprocess.Popen] = {}


def relay_log(server_log: str) -> str:
    """The relay's own log beside its server's (each rotates its own file)."""
    base = server_log[:-len(".log")] if server_log.endswith(".log") else server_log
    return base + ".relay.log"


def write_spec(path: str, argv: list[str]) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"argv": argv}, f)
    os.replace(tmp, path)


def read_spec(path: str) -> list[str] | None:
    try:
        with open(path, encoding="utf-8") as f:
            return list(json.load(f)["argv"])
    except (OSError, ValueError, KeyError):
        return None


def reap() -> None:
    """Forget the relays that have ended. RPCs run in threads that reap at once (several
    pods' volumes torn down together): one's pop must not fail on another's (a blind test
    of the plugin: 9 of 50 concurrent unstages failed with a KeyError)."""
    for pid, proc in list(_children.items()):
        if proc.poll() is not None:
            _children.pop(pid, None)


def relay_alive(pid: int) -> bool:
    reap()
    if not pid or not process_alive(pid):
        return False
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"fusecache.relay" in f.read()
    except OSError:
        return False


def stop_relay(pid: int, timeout: float = 15.0) -> None:
    """SIGTERM a volume's relay (it stops its server and closes the connection) and
    wait for it to exit; SIGKILL after *timeout*."""
    if not relay_alive(pid):
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while relay_alive(pid):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 5
        time.sleep(0.05)
    reap()
