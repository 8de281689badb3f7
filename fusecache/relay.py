"""Holder and relay of one volume's FUSE connection, so the mount outlives its server.

Who runs it: the CSI node plugin (csi/mounts.py), once per staged volume, detached
from the plugin (own session), right after it has mounted the volume with mount(2)
on an fd of /dev/fuse that it hands to this process and then closes. From then on
this process is the only holder of the connection: the kernel keeps the mount
alive as long as an fd of the connection is open, whatever happens to the plugin
or to the FUSE server.

Data flow::

    kernel --/dev/fuse--> relay --SOCK_SEQPACKET--> fusecache mount /dev/fd/N
    kernel <--/dev/fuse-- relay <--SOCK_SEQPACKET-- (the FUSE server: libfuse reads
                                                     one request per packet and
                                                     writes one reply per packet)

The server is an ordinary ``fusecache mount --foreground`` whose mountpoint is
``/dev/fd/N`` (libfuse: "already mounted, use this fd"), N being its end of a
socketpair. The relay starts it, and starts a new one whenever it dies (crash,
SIGKILL) or when told to change version (SIGHUP: the spec file names the argv).
What makes a restart invisible to the kernel:

* INIT: the kernel sends FUSE_INIT once per connection. The relay keeps it and
  replays it to every new server (libfuse answers EIO to anything before INIT); the
  new server's INIT reply is dropped.
* Requests in flight: every request forwarded and not yet answered is kept, and
  sent again to the next server (so FUSE_NOTIFY_RESEND is not needed). A request
  is sent at most ``MAX_SENDS`` times (a request that kills every server fails with
  EIO), and is answered EIO when no server has been serving for ``resend_timeout``
  seconds since it was queued: reads in flight never hang on a server that cannot
  come back.
* Inodes and file handles: the relay records, from the traffic, each node id the
  kernel holds (LOOKUP and READDIRPLUS replies, minus FORGETs: parent id, name,
  directory or not, lookup count) and each open file and directory handle (OPEN,
  OPENDIR replies minus RELEASE). A new server receives that table as a JSON file
  (``FUSECACHE_RESTORE`` in its environment) and answers for those ids and handles.
  The table is bounded by what the kernel references, like the server's own.

SIGTERM: stop the server, close the connection (a mount still in place then
answers ENOTCONN) and exit; the plugin unmounts first. The connection going away
(unmount, abort) ends the relay too.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import logging
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from fusecache.readyline import wait_ready

log = logging.getLogger("fusecache.relay")

IN_HDR = struct.Struct("<IIQQIIIHH")   # fuse_in_header: len opcode unique nodeid uid gid pid ...
OUT_HDR = struct.Struct("<IiQ")        # fuse_out_header: len error unique
LOOKUP, FORGET, OPEN, RELEASE, INIT, OPENDIR, RELEASEDIR = 1, 2, 14, 18, 26, 27, 29
INTERRUPT, BATCH_FORGET, READDIRPLUS = 36, 42, 44
NO_REPLY = {FORGET, BATCH_FORGET, INTERRUPT}
ENTRY_OUT_SIZE = 128                   # fuse_entry_out; attr.mode at offset 100
DIRENT_HDR = struct.Struct("<QQII")    # fuse_dirent: ino off namelen type

BUF_SIZE = (1 << 20) + (64 << 10)      # above libfuse's max_write + header
SOCK_BUF = 8 << 20                     # a 1 MiB read reply fits in one packet
MAX_SENDS = 3
SPAWN_TIMEOUT = 300.0                  # a server that is not ready by then is killed
MAX_PENDING = 4096
S_IFDIR, S_IFMT = 0o040000, 0o170000


@dataclass
class _Pending:
    opcode: int
    nodeid: int
    data: bytes
    queued_at: float
    sends: int = 0
    name: str = ""


@dataclass
class _Table:
    """What the kernel references: node ids and open handles (see module docstring)."""

    nodes: dict[int, list] = field(default_factory=dict)  # id -> [parent, name, is_dir, n]
    files: dict[int, int] = field(default_factory=dict)   # fh -> node id
    dirs: dict[int, int] = field(default_factory=dict)

    def looked_up(self, nodeid: int, parent: int, name: str, is_dir: bool) -> None:
        rec = self.nodes.get(nodeid)
        if rec is None:
            self.nodes[nodeid] = [parent, name, is_dir, 1]
        else:
            rec[3] += 1

    def forget(self, nodeid: int, n: int) -> None:
        rec = self.nodes.get(nodeid)
        if rec is not None:
            rec[3] -= n
            if rec[3] <= 0:
                del self.nodes[nodeid]

    def to_json(self) -> dict:
        return {"nodes": [[k, *v] for k, v in self.nodes.items()],
                "files": list(self.files.items()), "dirs": list(self.dirs.items())}


def _set_bufs(s: socket.socket) -> None:
    """Socket buffers big enough for a 1 MiB reply in one packet (SO_*BUFFORCE needs
    CAP_NET_ADMIN; without it the kernel caps them at net.core.[wr]mem_max)."""
    for force, plain in ((33, socket.SO_SNDBUF), (32, socket.SO_RCVBUF)):  # *BUFFORCE
        try:
            s.setsockopt(socket.SOL_SOCKET, force, SOCK_BUF)
        except OSError:
            s.setsockopt(socket.SOL_SOCKET, plain, SOCK_BUF)
    if s.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) < BUF_SIZE + 4096:
        log.error("socket buffers are capped below %d bytes (no CAP_NET_ADMIN and a low "
                  "net.core.wmem_max): large reads will fail", BUF_SIZE)


class Relay:
    """One FUSE connection, one server at a time (see module docstring)."""

    def __init__(self, fuse_fd: int, spec_file: Path, resend_timeout: float) -> None:
        self.fd = fuse_fd
        self.spec_file = spec_file
        self.resend_timeout = resend_timeout
        self.state_lock = threading.Lock()   # pending, table, init: brief holds only
        self.send_lock = threading.Lock()    # the server socket: held while sending
        self.pending: dict[int, _Pending] = {}
        self.table = _Table()
        self.init: bytes | None = None
        self.drop_unique: int | None = None
        self.sock: socket.socket | None = None
        self.proc: subprocess.Popen | None = None
        self.serving_since: float | None = None
        self.down_since = time.monotonic()
        self.stop = threading.Event()
        self.restart = threading.Event()
        self.gone = threading.Event()       # the connection ended (unmounted)
        self.restarts = 0
        # FORGETs that arrive after a starting server's table was taken: sent to it
        # once it is attached (the table it loaded does not have them).
        self.late_forgets: list[bytes] | None = None

    # ------------------------------------------------------------ kernel -> server

    def kernel_loop(self) -> None:
        buf = bytearray(BUF_SIZE)
        view = memoryview(buf)
        while not self.stop.is_set():
            try:
                n = os.readv(self.fd, [buf])
            except OSError as e:
                if e.errno in (errno.EINTR, errno.EAGAIN, errno.ENOENT):
                    continue
                if e.errno != errno.ENODEV:
                    log.error("reading /dev/fuse: %s", e)
                self.gone.set()
                return
            if n < IN_HDR.size:
                continue
            data = bytes(view[:n])
            self._from_kernel(data)

    def _from_kernel(self, data: bytes) -> None:
        _ln, opcode, unique, nodeid, *_ = IN_HDR.unpack_from(data)
        body = data[IN_HDR.size:]
        late = False
        with self.state_lock:
            if opcode in (FORGET, BATCH_FORGET) and self.late_forgets is not None \
                    and len(self.late_forgets) < MAX_PENDING:
                self.late_forgets.append(data)
                late = True
            if opcode == FORGET:
                self.table.forget(nodeid, struct.unpack_from("<Q", body)[0])
            elif opcode == BATCH_FORGET:
                count = struct.unpack_from("<I", body)[0]
                for i in range(count):
                    nid, n = struct.unpack_from("<QQ", body, 8 + 16 * i)
                    self.table.forget(nid, n)
            elif opcode == RELEASE:
                self.table.files.pop(struct.unpack_from("<Q", body)[0], None)
            elif opcode == RELEASEDIR:
                self.table.dirs.pop(struct.unpack_from("<Q", body)[0], None)
            if opcode == INIT:
                self.init = data
            if opcode not in NO_REPLY:
                if len(self.pending) >= MAX_PENDING:
                    overflow = True
                else:
                    overflow = False
                    p = _Pending(opcode, nodeid, data, time.monotonic())
                    if opcode == LOOKUP:
                        p.name = body.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
                    self.pending[unique] = p
            else:
                overflow = False
        if overflow:
            log.warning("more than %d requests pending; answering EIO", MAX_PENDING)
            self._reply_error(unique, errno.EIO)
            return
        if not late:
            self._send(data, unique)

    def _send(self, data: bytes, unique: int) -> None:
        with self.send_lock:
            if self.sock is None:
                return  # queued in pending; sent when a server is back
            with self.state_lock:
                p = self.pending.get(unique)
                if p is not None:
                    if p.sends:
                        return  # a server attaching meanwhile has sent it already
                    p.sends += 1
            with contextlib.suppress(OSError):  # a dead server: the supervisor re-sends
                self.sock.send(data)

    def _reply_error(self, unique: int, err: int) -> None:
        with contextlib.suppress(OSError):
            os.write(self.fd, OUT_HDR.pack(OUT_HDR.size, -err, unique))

    # ------------------------------------------------------------ server -> kernel

    def server_loop(self, sock: socket.socket) -> None:
        buf = bytearray(BUF_SIZE)
        view = memoryview(buf)
        while True:
            try:
                n = sock.recv_into(buf)
            except OSError:
                n = 0
            if n == 0:
                return  # the server is gone
            if n < OUT_HDR.size:
                continue
            _ln, error, unique = OUT_HDR.unpack_from(buf)
            if unique == 0:  # a notification
                self._write(view[:n])
                continue
            with self.state_lock:
                if unique == self.drop_unique:
                    self.drop_unique = None
                    continue  # a restarted server's INIT reply: the kernel had its own
                p = self.pending.pop(unique, None)
                # Recorded before the kernel sees the reply: a FORGET that follows it
                # must find the node. Undone if the kernel refuses the reply.
                looked_up = self._record_reply(p, view[OUT_HDR.size:n]) \
                    if p is not None and error == 0 else []
            if not self._write(view[:n]) and looked_up:
                with self.state_lock:
                    for nid in looked_up:
                        self.table.forget(nid, 1)

    def _write(self, data: memoryview) -> bool:
        try:
            os.write(self.fd, data)
            return True
        except OSError as e:
            if e.errno == errno.ENODEV:
                self.gone.set()
            return False  # ENOENT: the kernel gave up on that request (interrupted)

    def _record_reply(self, p: _Pending, body: memoryview) -> list[int]:
        """Update the table from a successful reply (state_lock held); returns the
        node ids it counted a lookup for."""
        counted: list[int] = []
        if p.opcode == LOOKUP and len(body) >= ENTRY_OUT_SIZE:
            nid = struct.unpack_from("<Q", body)[0]
            mode = struct.unpack_from("<I", body, 100)[0]
            if nid:
                self.table.looked_up(nid, p.nodeid, p.name, mode & S_IFMT == S_IFDIR)
                counted.append(nid)
        elif p.opcode in (OPEN, OPENDIR) and len(body) >= 8:
            fh = struct.unpack_from("<Q", body)[0]
            (self.table.files if p.opcode == OPEN else self.table.dirs)[fh] = p.nodeid
        elif p.opcode == READDIRPLUS:
            off = 0
            while off + ENTRY_OUT_SIZE + DIRENT_HDR.size <= len(body):
                nid = struct.unpack_from("<Q", body, off)[0]
                mode = struct.unpack_from("<I", body, off + 100)[0]
                _ino, _o, namelen, _t = DIRENT_HDR.unpack_from(body, off + ENTRY_OUT_SIZE)
                start = off + ENTRY_OUT_SIZE + DIRENT_HDR.size
                name = bytes(body[start:start + namelen]).decode("utf-8", "surrogateescape")
                if nid and name not in (".", ".."):
                    self.table.looked_up(nid, p.nodeid, name, mode & S_IFMT == S_IFDIR)
                    counted.append(nid)
                off += (ENTRY_OUT_SIZE + DIRENT_HDR.size + namelen + 7) & ~7
        return counted

    # ------------------------------------------------------------ the server process

    def _spawn(self, ready_w: int | None) -> tuple[subprocess.Popen, socket.socket, int]:
        spec = json.loads(self.spec_file.read_text(encoding="utf-8"))
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        _set_bufs(mine)
        _set_bufs(theirs)
        r, w = os.pipe()
        with self.state_lock:
            restore = json.dumps(self.table.to_json())
            self.late_forgets = []
        tmp = tempfile.NamedTemporaryFile(  # noqa: SIM115 - removed once the server is up
            "w", prefix="fusecache-restore-", suffix=".json", delete=False,
            dir=self.spec_file.parent)
        with tmp:
            tmp.write(restore)
        argv = [a.replace("{fuse_fd}", str(theirs.fileno())).replace("{ready_fd}", str(w))
                for a in spec["argv"]]
        env = dict(os.environ, FUSECACHE_RESTORE=tmp.name)
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, env=env,
                                pass_fds=(theirs.fileno(), w), close_fds=True)
        theirs.close()
        os.close(w)
        # The server reports "warning: ..." lines (e.g. an empty source), then one final
        # line: "ok" or "error N: ...".
        try:
            text = wait_ready(r, SPAWN_TIMEOUT,
                              lambda w: log.warning("FUSE server: %s", w)) or ""
        finally:  # (a failed start left them behind: a blind test of the plugin)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp.name)
        if ready_w is not None:
            with contextlib.suppress(OSError):
                os.write(ready_w, (text or "error: the FUSE server exited before it was "
                                   "ready").encode() + b"\n")
        if text != "ok":
            mine.close()
            with contextlib.suppress(OSError):
                proc.kill()
            proc.wait()
            raise RuntimeError(text or f"server exited with status {proc.returncode}")
        return proc, mine, proc.pid

    def _attach(self, proc: subprocess.Popen, sock: socket.socket) -> threading.Thread:
        """Make *sock* the server: replay INIT, re-send what is pending, then go live."""
        t = threading.Thread(target=self.server_loop, args=(sock,), daemon=True,
                             name="relay-server")
        t.start()
        with self.send_lock:
            with self.state_lock:
                again = sorted(self.pending.items())
                forgets, self.late_forgets = self.late_forgets or [], None
                replay = None
                if self.init is not None and self.restarts:
                    init_unique = IN_HDR.unpack_from(self.init)[2]
                    if init_unique not in self.pending:  # answered: the kernel is set up
                        replay = self.init
                        self.drop_unique = init_unique
            if replay is not None:
                sock.send(replay)
            for unique, p in again:
                if p.sends >= MAX_SENDS:
                    with self.state_lock:
                        self.pending.pop(unique, None)
                    log.warning("request %d (opcode %d) was sent %d times; EIO", unique,
                                p.opcode, p.sends)
                    self._reply_error(unique, errno.EIO)
                    continue
                with contextlib.suppress(OSError):
                    sock.send(p.data)
                    p.sends += 1
            for data in forgets:
                with contextlib.suppress(OSError):
                    sock.send(data)
            self.sock = sock
            self.proc = proc
            self.serving_since = time.monotonic()
        if self.restarts:
            log.info("server %d attached; %d request(s) sent again", proc.pid, len(again))
        return t

    def _detach(self, t: threading.Thread) -> None:
        with self.send_lock:
            sock, self.sock = self.sock, None
            self.serving_since = None
            self.down_since = time.monotonic()
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_WR)
            t.join(timeout=5)   # replies already sent by the dead server still count
            sock.close()

    def _expire(self) -> None:
        """EIO for requests queued longer than resend_timeout while no server serves."""
        if self.sock is not None:
            return
        now = time.monotonic()
        with self.state_lock:
            late = [u for u, p in self.pending.items()
                    if p.opcode != INIT and now - max(p.queued_at, self.down_since)
                    > self.resend_timeout]
            for u in late:
                del self.pending[u]
        for u in late:
            self._reply_error(u, errno.EIO)
        if late:
            log.warning("no FUSE server for %.0fs: %d request(s) answered EIO",
                        self.resend_timeout, len(late))

    def expire_loop(self) -> None:
        while not self.stop.wait(0.1):
            self._expire()

    def _stop_server(self, proc: subprocess.Popen, sig: int) -> None:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(sig)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def run(self, ready_w: int) -> int:
        """Serve until SIGTERM or until the connection goes away."""
        kernel = threading.Thread(target=self.kernel_loop, daemon=True, name="relay-kernel")
        kernel.start()
        threading.Thread(target=self.expire_loop, daemon=True, name="relay-expire").start()
        try:
            proc, sock, _pid = self._spawn(ready_w)
        except (RuntimeError, OSError) as e:
            log.error("the first FUSE server failed: %s", e)
            return 1
        finally:
            os.close(ready_w)
        backoff = 0.5
        while True:
            t = self._attach(proc, sock)
            while proc.poll() is None and not (self.stop.is_set() or self.gone.is_set()
                                               or self.restart.is_set()):
                time.sleep(0.05)
            if self.stop.is_set() or self.gone.is_set():
                self._stop_server(proc, signal.SIGTERM)
                self._detach(t)
                return 0
            if self.restart.is_set():
                self.restart.clear()
                log.info("restarting the FUSE server (new spec)")
                self._stop_server(proc, signal.SIGTERM)
            else:
                log.warning("FUSE server %d exited with status %s; starting another",
                            proc.pid, proc.returncode)
            self._detach(t)
            self.restarts += 1
            while True:
                if self.stop.is_set() or self.gone.is_set():
                    return 0
                self.restart.clear()  # the spec is read now: a SIGHUP until here is served
                try:
                    proc, sock, _pid = self._spawn(None)
                    backoff = 0.5
                    break
                except (RuntimeError, OSError) as e:
                    log.error("FUSE server did not start: %s; retrying in %.1fs", e, backoff)
                    deadline = time.monotonic() + backoff
                    while time.monotonic() < deadline and not self.stop.is_set():
                        time.sleep(0.1)
                    backoff = min(backoff * 2, 10.0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="fusecache-relay", description=__doc__.splitlines()[0])
    p.add_argument("--fuse-fd", type=int, required=True, help="an fd of /dev/fuse (mounted)")
    p.add_argument("--spec", type=Path, required=True,
                   help="JSON file: {\"argv\": [...]} of the server, with {fuse_fd} and "
                        "{ready_fd} placeholders; re-read on SIGHUP")
    p.add_argument("--ready-fd", type=int, required=True)
    p.add_argument("--resend-timeout", type=float, default=30.0,
                   help="seconds a request waits for a server before EIO")
    p.add_argument("--log-file", type=Path, default=None)
    a = p.parse_args(argv)
    from fusecache.mount import setup_logging
    setup_logging("info", a.log_file)
    os.set_inheritable(a.fuse_fd, False)
    relay = Relay(a.fuse_fd, a.spec, a.resend_timeout)
    signal.signal(signal.SIGTERM, lambda *_: relay.stop.set())
    signal.signal(signal.SIGINT, lambda *_: relay.stop.set())
    signal.signal(signal.SIGHUP, lambda *_: relay.restart.set())
    rc = relay.run(a.ready_fd)
    log.info("relay exiting (%s)", "connection gone" if relay.gone.is_set() else "stopped")
    os.close(a.fuse_fd)
    return rc


if __name__ == "__main__":
    sys.exit(main())
