"""The embedded SeaweedFS starts again on new ports when one it picked is taken."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from fusecache import locals3


@pytest.mark.s3
def test_a_port_taken_after_it_was_picked_means_a_new_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = locals3._free_ports
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()
    taken = squatter.getsockname()[1]
    calls = []

    def first_one_taken(n: int) -> list[int]:
        ports = real(n)
        calls.append(ports)
        if len(calls) == 1:
            ports[2] = taken  # the filer's port: what CI once saw
        return ports

    monkeypatch.setattr(locals3, "_free_ports", first_one_taken)
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
