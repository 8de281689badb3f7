"""A real ``fusecache mount`` answers a read from the bytes of a block that have come,
while the rest of the block is still on its way from S3 (reader.BlockReader
._while_arriving): the body of the block's GET pauses half-way in the fault proxy."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from faultkit import BLOCK, Obj, cached_bytes, wait_counter
from s3_fault_proxy import FaultProxy, Rule

from fusecache.locals3 import LocalS3

from mounting import mounted

pytestmark = [pytest.mark.s3, pytest.mark.fuse]

PAUSE = 3.0


def test_a_read_is_answered_before_its_block_has_all_come(
        local_s3: LocalS3, s3_env: dict, bucket: str, obj: Obj, proxy: FaultProxy,
        tmp_path: Path) -> None:
    """The head of a cold block comes back well before the block's body resumes; a read
    of its tail waits for the rest and gets exact bytes; one GET for the block, which
    is cached whole and exact."""
    cache = tmp_path / "c"
    with mounted(f"s3://{bucket}", tmp_path / "m", s3_env, "--cache-dir", str(cache),
                 "--endpoint-url", proxy.url, "--block-size", str(BLOCK),
                 "--read-timeout", "30") as mp:
        fd = os.open(mp / obj.key, os.O_RDONLY)
        try:
            proxy.add(Rule("pause", key=obj.key, range_start=0, after_bytes=BLOCK // 2,
                           seconds=PAUSE))
            t = time.monotonic()
            head = os.pread(fd, 4096, 0)
            took_head = time.monotonic() - t
            tail = os.pread(fd, 4096, BLOCK - 4096)
            took_tail = time.monotonic() - t
        finally:
            os.close(fd)
        print(f"head after {took_head:.2f}s, tail after {took_tail:.2f}s (pause {PAUSE:g}s)")
        assert head == obj.data[:4096]
        assert tail == obj.data[BLOCK - 4096:BLOCK]
        assert took_head < PAUSE / 2, f"the head waited {took_head:.2f}s for the whole block"
        assert took_tail >= PAUSE * 0.8, "the tail was answered before its bytes came"
        assert proxy.spoiled(obj.key) == 1
        assert proxy.gets(obj.key)[0] == 1  # the tail's read took the same GET's bytes
        wait_counter(cache, "used_bytes", len(obj.data))
    assert cached_bytes(cache, obj).get(0) == obj.data[:BLOCK]
