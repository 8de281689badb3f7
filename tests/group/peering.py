"""Test helpers for the cache group: certificates (openssl CLI), group files, and real
``fusecache peer-serve`` processes on 127.0.0.1."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from fusecache.group import Group, Member, TlsFiles, write_group
from fusecache.nodecache import ObjectId

FUSECACHE = [sys.executable, "-m", "fusecache.cli"]


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


@dataclass
class Pki:
    """A CA and node certificates under *root*, made with the openssl CLI."""

    root: Path
    name: str = "ca"

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.ca = self.root / f"{self.name}.crt"
        self.ca_key = self.root / f"{self.name}.key"
        _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                 "-nodes", "-keyout", str(self.ca_key), "-out", str(self.ca),
                 "-subj", f"/CN=fusecache-test-{self.name}", "-days", "2")

    def node(self, node: str) -> TlsFiles:
        """A certificate for *node* (CN and DNS SAN), client and server use."""
        key, csr = self.root / f"{node}.key", self.root / f"{node}.csr"
        crt, ext = self.root / f"{node}.crt", self.root / f"{node}.ext"
        ext.write_text(f"subjectAltName=DNS:{node}\nextendedKeyUsage=serverAuth,clientAuth\n")
        _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                 "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={node}")
        _openssl("x509", "-req", "-in", str(csr), "-CA", str(self.ca), "-CAkey",
                 str(self.ca_key), "-CAcreateserial", "-out", str(crt), "-days", "2",
                 "-extfile", str(ext))
        return TlsFiles(str(self.ca), str(crt), str(key))


def group_file(path: Path, self_name: str, members: list[Member],
               tls: TlsFiles | None = None) -> Path:
    write_group(path, Group(self_name, tuple(members), tls=tls))
    return path


@contextlib.contextmanager
def peer_serve(cache_dir: Path, *extra: str, env: dict[str, str] | None = None,
               timeout: float = 60) -> Iterator[tuple[subprocess.Popen, int]]:
    """``fusecache peer-serve --listen 127.0.0.1:0``; yields (process, port) once listening
    (with ``--lane-listen`` in *extra*, the lane's port is ``process.lane_port``)."""
    lines = 2 if "--lane-listen" in extra else 1
    full_env = dict(os.environ, **(env or {}))
    log = open(cache_dir.parent / f"peer-serve-{cache_dir.name}.log", "ab")
    proc = subprocess.Popen([*FUSECACHE, "peer-serve", "--cache-dir", str(cache_dir),
                             "--listen", "127.0.0.1:0", *extra], stdout=subprocess.PIPE,
                            stderr=log, env=full_env)
    try:
        out = b""
        deadline = time.monotonic() + timeout
        while out.count(b"\n") < lines:
            left = deadline - time.monotonic()
            assert left > 0 and proc.poll() is None, (
                f"peer-serve did not start: {(cache_dir.parent / log.name).read_text()}")
            ready, _, _ = select.select([proc.stdout], [], [], min(left, 0.5))
            if ready:
                chunk = os.read(proc.stdout.fileno(), 256)
                assert chunk, f"peer-serve exited: {Path(log.name).read_text()}"
                out += chunk
        said = out.split(b"\n")
        assert said[0].startswith(b"listening on 127.0.0.1:"), out
        if lines == 2:
            assert said[1].startswith(b"block lane on 127.0.0.1:"), out
            proc.lane_port = int(said[1].split(b":")[-1])  # type: ignore[attr-defined]
        yield proc, int(said[0].split(b":")[-1])
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()


def node_stats(cache_dir: Path) -> dict:
    r = subprocess.run([*FUSECACHE, "stats", "--cache-dir", str(cache_dir), "--json"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def upload(local_s3, bucket: str, files: dict[str, bytes]) -> None:
    c = local_s3.client()
    for k, v in files.items():
        c.put_object(Bucket=bucket, Key=k, Body=v)


def warm(cache: Path, uri: str) -> None:
    """A node's cache filled by the real warm (before it has a group file)."""
    r = subprocess.run([sys.executable, "-m", "prefetchd.cli", "warm", uri, "--cache-dir",
                        str(cache)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr


def oid_of(local_s3, bucket: str, key: str) -> ObjectId:
    """The object as S3 has it now (its ETag and size)."""
    h = local_s3.client().head_object(Bucket=bucket, Key=key)
    return ObjectId(bucket, key, h["ETag"].strip('"'), h["ContentLength"])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(pred, what: str, timeout: float = 30.0):
    """Poll *pred* until it returns a truthy value; fail naming *what* after *timeout*."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
