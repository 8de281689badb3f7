"""fusecache.fs._FailureLog: during an outage, failed operations are logged at most 20 a
minute, then counted (blind FUSE round 3: one warning per failed read, 250 KiB/s with 16
readers, rotated the outage's first messages out of the log within a minute)."""

from __future__ import annotations

import logging

import pytest
import trio
import trio.testing

from fusecache import errors
from fusecache.fs import _FailureLog


def test_outage_failures_are_logged_at_most_twenty_a_minute(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = trio.testing.MockClock()
    failures = _FailureLog()

    async def main() -> None:
        for i in range(30):
            failures.warning(f"read k{i}@0", errors.StoreUnavailable("endpoint unreachable"))
        failures.warning("read other@0", errors.AccessDenied("access denied"))  # always
        clock.jump(61)
        failures.warning("read k30@0", errors.StoreUnavailable("endpoint unreachable"))

    with caplog.at_level(logging.WARNING, logger="fusecache.fs"):
        trio.run(main, clock=clock)
    lines = [r.getMessage() for r in caplog.records]
    assert sum("endpoint unreachable" in m for m in lines) == 21
    assert "read other@0: access denied" in lines
    assert "10 more failed operations not logged in the last 60s (StoreUnavailable)" in lines
