"""The node's relay holder: starts volume relays outside the CSI plugin's container.

Who runs it: the ``fusecache-csi-holder`` DaemonSet (manifests/node.yaml), one per
node, in a pod of its own, so that the relays (fusecache/relay.py) and the FUSE
servers they run are not in the plugin container: restarting or upgrading the
plugin's pod (a DaemonSet roll, an OOM kill) leaves every FUSE connection held.

Data flow: the plugin mounts a volume with mount(2) and connects to ``--socket``;
it sends one message: the /dev/fuse fd (SCM_RIGHTS) and a JSON body (the relay's
spec file, log file, resend timeout and environment, which may hold the volume's
S3 credentials: the socket is root-only). The holder starts ``python -m
fusecache.relay`` with that fd, waits for the relay's ready line and answers with
one JSON line ``{"line": "ok" | "error: ...", "pid": N}``. It reaps its relays;
it keeps no other state. Its own restart (a new holder image) ends the relays it
started and so their mounts: it is meant to change rarely (updateStrategy
OnDelete).
"""

from __future__ import annotations

import argparse
import array
import contextlib
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from fusecache.readyline import wait_ready

log = logging.getLogger("fusecache.holder")
_MAX_MSG = 1 << 20


def send_request(sock_path: str, fd: int, body: dict, timeout: float) -> dict:
    """The plugin's side: hand *fd* and *body* to the holder, return its answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(sock_path)
        data = json.dumps(body).encode()
        s.sendmsg([len(data).to_bytes(4, "big") + data],
                  [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))])
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(4096)
            if not chunk:
                break
            buf += chunk
    return json.loads(buf or b'{"line": "error: the relay holder closed the connection"}')


def _recv_request(conn: socket.socket) -> tuple[int, dict]:
    fds = array.array("i")
    msg, anc, _flags, _addr = conn.recvmsg(_MAX_MSG, socket.CMSG_SPACE(fds.itemsize))
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[:len(data) - (len(data) % fds.itemsize)])
    if len(fds) != 1 or len(msg) < 4:
        for fd in fds:
            os.close(fd)
        raise ValueError("expected one fd and a body")
    size = int.from_bytes(msg[:4], "big")
    body = msg[4:]
    while len(body) < size:
        chunk = conn.recv(size - len(body))
        if not chunk:
            break
        body += chunk
    return fds[0], json.loads(body)


class Holder:
    def __init__(self, sock_path: Path) -> None:
        self.sock_path = sock_path
        self.children: dict[int, subprocess.Popen] = {}
        self.lock = threading.Lock()

    def start_relay(self, fd: int, req: dict) -> dict:
        r, w = os.pipe()
        try:
            with open(req["log_file"], "ab") as logf:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "fusecache.relay", "--fuse-fd", str(fd),
                     "--spec", req["spec"], "--ready-fd", str(w),
                     "--log-file", req["log_file"],
                     "--resend-timeout", str(float(req["resend_timeout"]))],
                    stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
                    env={str(k): str(v) for k, v in req["env"].items()},
                    pass_fds=(fd, w), close_fds=True, start_new_session=True)
        finally:
            os.close(fd)
            os.close(w)
        with self.lock:
            self.children[proc.pid] = proc
        line = wait_ready(r, float(req.get("timeout", 120))) or ""
        return {"line": line, "pid": proc.pid}

    def serve_one(self, conn: socket.socket) -> None:
        with conn:
            try:
                fd, req = _recv_request(conn)
                answer = self.start_relay(fd, req)
            except (OSError, ValueError, KeyError) as e:
                answer = {"line": f"error: relay holder: {e}", "pid": 0}
            with contextlib.suppress(OSError):
                conn.sendall(json.dumps(answer).encode() + b"\n")

    def reap_loop(self) -> None:
        while True:
            time.sleep(1.0)
            with self.lock:
                for pid, proc in list(self.children.items()):
                    if proc.poll() is not None:
                        del self.children[pid]

    def run(self) -> None:
        self.sock_path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.sock_path.unlink()
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            srv.bind(str(self.sock_path))
        finally:
            os.umask(old)
        srv.listen(16)
        threading.Thread(target=self.reap_loop, daemon=True).start()
        log.info("relay holder listening on %s", self.sock_path)
        while True:
            conn, _ = srv.accept()
            threading.Thread(target=self.serve_one, args=(conn,), daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="fusecache-holder", description=__doc__.splitlines()[0])
    p.add_argument("--socket", type=Path, required=True, help="unix socket to listen on")
    p.add_argument("--log-file", type=Path, default=None)
    a = p.parse_args(argv)
    from fusecache.mount import setup_logging
    setup_logging("info", a.log_file)
    try:
        Holder(a.socket).run()
    except KeyboardInterrupt:
        return 0
    except OSError as e:
        print(f"fusecache-holder: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
