"""Fixtures of the fault tests: a fault proxy in front of the session's SeaweedFS
and an object of four 1 MiB blocks to read through it."""

from __future__ import annotations

import sys
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from faultkit import BLOCK, Obj, put_object  # noqa: E402
from s3_fault_proxy import FaultProxy  # noqa: E402

from fusecache.locals3 import LocalS3  # noqa: E402


@pytest.fixture()
def proxy(local_s3: LocalS3) -> Iterator[FaultProxy]:
    u = urllib.parse.urlsplit(local_s3.endpoint_url)
    with FaultProxy((u.hostname or "127.0.0.1", u.port or 80)) as p:
        yield p


@pytest.fixture()
def obj(local_s3: LocalS3, bucket: str) -> Obj:
    """An object of 4 blocks of 1 MiB, the last one short."""
    return put_object(local_s3, bucket, "data/obj.bin", 3 * BLOCK + 12_345)


