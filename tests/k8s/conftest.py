"""Fixtures for the Kubernetes tests: a fake API server, a real client for it, log policing."""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterator

import pytest
from fake_apiserver import FakeApiServer
from kubernetes import client


@pytest.fixture()
def fake() -> Iterator[FakeApiServer]:
    """A started fake API server; stopped (threads joined) after the test."""
    before = set(threading.enumerate())
    server = FakeApiServer().start()
    try:
        yield server
    finally:
        server.stop()
    leaked = [t for t in set(threading.enumerate()) - before
              if t.is_alive() and "fake-apiserver" in t.name]
    assert not leaked, leaked


@pytest.fixture()
def api(fake: FakeApiServer) -> Iterator[client.ApiClient]:
    """The real kubernetes client configured for the fake."""
    cfg = client.Configuration()
    cfg.host = fake.url
    with client.ApiClient(cfg) as api_client:
        yield api_client


class LogPolice:
    """Tests declare the warnings they expect; anything else at WARNING+ fails the test."""

    def __init__(self) -> None:
        self.allowed: list[tuple[re.Pattern[str], int]] = []

    def allow(self, pattern: str, level: int = logging.WARNING) -> None:
        self.allowed.append((re.compile(pattern), level))

    def check(self, records: list[logging.LogRecord]) -> None:
        bad = [r for r in records if r.levelno >= logging.WARNING
               and r.name.startswith("prefetchd")
               and not any(p.search(r.getMessage()) and r.levelno <= lvl
                           for p, lvl in self.allowed)]
        assert not bad, "unexpected warnings: " + "; ".join(r.getMessage() for r in bad)


@pytest.fixture(autouse=True)
def log_police(caplog: pytest.LogCaptureFixture) -> Iterator[LogPolice]:
    caplog.set_level(logging.DEBUG, logger="prefetchd")
    police = LogPolice()
    yield police
    police.check(caplog.records)

