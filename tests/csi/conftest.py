"""Fixtures for the CSI tests (helpers and their rationale: csi_helpers.py)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from csi_helpers import PluginProc, S3Volume, detach_mounts_under, pids_mentioning


@pytest.fixture()
def csi_root(tmp_path: Path) -> Iterator[Path]:
    """A directory for one test's plugin; everything below it is cleaned up."""
    root = tmp_path / "csi"
    root.mkdir()
    try:
        yield root
    finally:
        for pid in pids_mentioning(str(root)):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        detach_mounts_under(root)


@pytest.fixture()
def plugin(csi_root: Path, request: pytest.FixtureRequest) -> Iterator[PluginProc]:
    """A started, ready fusecache-csi (mode all) for one test."""
    p = PluginProc(csi_root).start()
    try:
        yield p
    finally:
        p.kill()
        rep = getattr(request.node, "rep_call", None)
        if rep is not None and rep.failed:
            print(f"---- plugin log ----\n{p.log()}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):  # noqa: ANN201
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)


@pytest.fixture()
def dataset(local_s3, bucket: str) -> S3Volume:
    """Objects under ``datasets/demo/`` of a fresh bucket, plus matching CSI maps."""
    files = {
        "a.txt": b"hello fusecache\n",
        "dir/b.bin": bytes(range(256)) * 4096,  # 1 MiB
        "dir/sub/c.bin": os.urandom(5 * 1024 * 1024 + 123),
    }
    client = local_s3.client()
    for name, data in files.items():
        client.put_object(Bucket=bucket, Key=f"datasets/demo/{name}", Body=data)
    client.put_object(Bucket=bucket, Key="outside.txt", Body=b"not in the volume")
    common = {"bucket": bucket, "endpointUrl": local_s3.endpoint_url, "region": "us-east-1"}
    return S3Volume(
        bucket=bucket, prefix="datasets/demo", files=files,
        context={**common, "prefix": "datasets/demo"},
        secrets={"accessKeyID": local_s3.access_key, "secretAccessKey": local_s3.secret_key},
        parameters={**common, "prefix": "datasets", "prefixPolicy": "pvcName"},
    )
