"""A warmed peer node for the training experiment's ``fusecache-group`` contender.

Who calls it: bench/run_train_bench.py (``--contenders ...,fusecache-group``): "a pod on an
unwarmed node of a warmed group". Data flow: the caller's warm function fills a node cache of
its own (the warmed node) -> a CA and two node certificates (openssl CLI) -> both caches get a
group file naming both nodes (the warmed one publishes the datasets it holds) -> ``fusecache
peer-serve`` on the warmed cache (127.0.0.1, mutual TLS) -> the caller mounts the *reader*
cache, which asks the warmed peer before S3. Everything started here stops on exit.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from fusecache.group import Group, Member, TlsFiles, write_group


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def _certificates(d: Path, names: list[str]) -> dict[str, TlsFiles]:
    d.mkdir(parents=True, exist_ok=True)
    ca, ca_key = d / "ca.crt", d / "ca.key"
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", str(ca_key), "-out", str(ca), "-subj", "/CN=bench-group-ca",
             "-days", "2")
    out = {}
    for n in names:
        key, csr, crt, ext = (d / f"{n}.{x}" for x in ("key", "csr", "crt", "ext"))
        ext.write_text(f"subjectAltName=DNS:{n}\nextendedKeyUsage=serverAuth,clientAuth\n")
        _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                 "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={n}")
        _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
                 "-CAcreateserial", "-out", str(crt), "-days", "2", "-extfile", str(ext))
        out[n] = TlsFiles(str(ca), str(crt), str(key))
    return out


def _free_port() -> int:
    """A free port whose next one is free too (the peer's gRPC port and its block lane)."""
    for _ in range(100):
        with socket.socket() as s, socket.socket() as t:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
            try:
                t.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
            return port
    raise RuntimeError("no two free ports in a row on 127.0.0.1")


@contextlib.contextmanager
def warmed_peer(work: Path, reader_cache: Path, bucket: str, datasets: list[str],
                warm: Callable[[Path], dict], lane: bool = True
                ) -> Iterator[tuple[dict, int]]:
    """Warm *datasets* into a peer's cache with *warm(cache_dir)*, serve it, and make
    *reader_cache* a member of its group; yields the warm's report and the serving
    process's pid (its CPU is another node's in a real group, this machine's here)."""
    holder = work / "cache-group-peer"
    shutil.rmtree(holder, ignore_errors=True)
    report = warm(holder)
    tls = _certificates(work / "group-pki", ["warmed", "reader"])
    port = _free_port()
    members = (Member("warmed", f"127.0.0.1:{port}", 1.0, (bucket,), tuple(datasets),
                      f"127.0.0.1:{port + 1}" if lane else ""),
               Member("reader", "127.0.0.1:9", 1.0, (bucket,)))
    write_group(holder / "group.json", Group("warmed", members, tls=tls["warmed"]))
    reader_cache.mkdir(parents=True, exist_ok=True)
    write_group(reader_cache / "group.json", Group("reader", members, tls=tls["reader"]))
    log = open(work / "peer-serve.log", "ab")  # noqa: SIM115 - owned by the process
    # cwd: not the checkout, whose fusecache/ would come before PYTHONPATH's (A/B copies),
    # as for the mount (bench/_mounts.py)
    p = subprocess.Popen([sys.executable, "-m", "fusecache.cli", "peer-serve", "--cache-dir",
                          str(holder), "--listen", f"127.0.0.1:{port}",
                          *(["--lane-listen", f"127.0.0.1:{port + 1}"] if lane else [])],
                         stdout=subprocess.PIPE,
                         stderr=log, stdin=subprocess.DEVNULL, start_new_session=True, cwd=work)
    log.close()
    try:
        line = p.stdout.readline().decode() if p.stdout else ""
        if "listening on" not in line:
            raise RuntimeError(f"peer-serve did not start (see {work / 'peer-serve.log'})")
        yield report, p.pid
    finally:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)
        shutil.rmtree(holder, ignore_errors=True)
