"""Shared fixtures: a real SeaweedFS S3 server on loopback, unique buckets, cleanup.

Tests marked ``fuse`` need root and /dev/fuse. Without them they are skipped, except
under ``CI=true``, where a ``fuse`` test that does not run (skipped for any reason)
fails the run: CI must not go green without its real mounts.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from fusecache.locals3 import LocalS3

from pagecache import disk_dir


@pytest.fixture(scope="session")
def local_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalS3]:
    """One SeaweedFS for the whole session (it takes seconds to start and stop)."""
    s3 = LocalS3(data_dir=tmp_path_factory.mktemp("seaweedfs"))
    s3.start()
    try:
        yield s3
    finally:
        s3.cleanup()


@pytest.fixture()
def s3_env(local_s3: LocalS3, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Point boto3's standard chain (and so fusecache) at the local server."""
    env = local_s3.env()
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.delenv("AWS_CA_BUNDLE", raising=False)
    return env


def _delete_bucket(client, name: str) -> None:
    """Delete *name* and its objects if it exists (SeaweedFS gives every bucket volumes of
    its own; deleting it gives them back)."""
    try:
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=name):
            keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            if keys:
                client.delete_objects(Bucket=name, Delete={"Objects": keys, "Quiet": True})
        client.delete_bucket(Bucket=name)
    except Exception:  # noqa: BLE001 - absent, or a test stopped the server: only tidying
        pass


@pytest.fixture()
def bucket(local_s3: LocalS3) -> Iterator[str]:
    """A fresh, empty bucket for one test, deleted after it."""
    name = "t-" + secrets.token_hex(6)
    client = local_s3.client()
    client.create_bucket(Bucket=name)
    yield name
    _delete_bucket(client, name)


@pytest.fixture()
def fixed_bucket(local_s3: LocalS3, request: pytest.FixtureRequest) -> Iterator[str]:
    """A bucket whose name is the same every run of the test (block owners hash the bucket
    name too: with seeded data, the cache group's shares are then fixed), emptied before
    and after."""
    name = "fixed-" + hashlib.sha256(request.node.name.encode()).hexdigest()[:12]
    client = local_s3.client()
    _delete_bucket(client, name)
    client.create_bucket(Bucket=name)
    yield name
    _delete_bucket(client, name)


@pytest.fixture()
def private_s3(tmp_path) -> Iterator[LocalS3]:
    """A SeaweedFS of the test's own: the test may stop it, and processes under test reach it
    by its endpoint."""
    s3 = LocalS3(data_dir=tmp_path / "s3")
    s3.start()
    try:
        yield s3
    finally:
        s3.cleanup()


@pytest.fixture()
def disk_tmp_path(tmp_path: Path) -> Iterator[Path]:
    """A temporary directory on a disk (tmp_path unless that is tmpfs), for tests of
    reads that must wait for the disk after the page cache is dropped."""
    path = disk_dir(tmp_path)
    yield path
    if path != tmp_path:
        shutil.rmtree(path, ignore_errors=True)


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.geteuid() != 0 or not os.path.exists("/dev/fuse"):
        skip = pytest.mark.skip(reason="needs root and /dev/fuse")
        for item in items:
            if "fuse" in item.keywords:
                item.add_marker(skip)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    rep = outcome.get_result()
    # A real-cluster suite skips wherever no Kubernetes binaries are named (CI has none):
    # that skip is expected, not a lost FUSE test.
    if (rep.skipped and not hasattr(rep, "wasxfail") and "fuse" in item.keywords
            and "real_cluster" not in item.keywords and _in_ci()):
        reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
        rep.outcome = "failed"
        rep.longrepr = f"CI=true: a test that needs real FUSE mounts was skipped ({reason})"
