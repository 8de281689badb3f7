"""A cheaper wait for the next FUSE request: what pyfuse3's request loop awaits per request.

Who calls it: ``mount.FusecacheMount.serve``, once, before ``pyfuse3.main`` (``install``).
pyfuse3 then finds this module's stand-in under its global name ``trio`` (the hook it
offers for other event loops: ``pyfuse3.asyncio`` replaces the same name); everything
but the two calls below is trio's own.

Why: for every request pyfuse3's loop takes a ``trio.Lock`` (one task waits on
/dev/fuse at a time) and then ``trio.lowlevel.wait_readable(fd)``. Each is a trip through
trio's scheduler (an uncontended ``Lock.acquire`` still yields; ``wait_readable`` registers
the fd with epoll and yields), so a request costs two scheduler passes and two or three
epoll calls before its handler runs, even when the kernel has the next requests queued.
Data flow with the stand-in, per request:

    lock: taken at once when free (no yield); else park until released
    wait: /dev/fuse readable now (poll, no wait)? return at once: pyfuse3 reads the
          request and runs its handler in the same scheduler pass;
          else, or after _STREAK requests in a row answered that way,
          trio.lowlevel.wait_readable (yields to every other task)

So a loaded mount serves a burst of queued requests without a scheduler pass each, and
still yields at least every _STREAK requests: read-ahead, timers and deadlines run as
before, and cancellation (unmount) is seen at the next yield. The readiness test is the
one trio's epoll would make; pyfuse3 reads the request right after it, with no yield in
between, so no other task can take the request in between.
"""

from __future__ import annotations

import logging
import os
import select
import types
from collections.abc import Iterator
from typing import Any

import trio
from prometheus_client.core import CounterMetricFamily

log = logging.getLogger(__name__)

# FUSECACHE_FUSE_LOOP=trio leaves pyfuse3's loop as it is (A/B measurements, or a pyfuse3
# whose loop this stand-in does not fit).
ENV_SWITCH = "FUSECACHE_FUSE_LOOP"

# Requests served in a row without a scheduler pass before one is forced.
_STREAK = 16


class _FreeLock:
    """The part of trio.Lock pyfuse3 uses (``async with``), without the checkpoint an
    uncontended trio.Lock.acquire makes. Waiters park; a released lock wakes one."""

    def __init__(self) -> None:
        self._held = False
        self._lot = trio.lowlevel.ParkingLot()

    async def __aenter__(self) -> None:
        while self._held:
            await self._lot.park()
        self._held = True

    async def __aexit__(self, *exc: object) -> None:
        self._held = False
        self._lot.unpark()


class _ReadyWait:
    """``wait_readable`` for the /dev/fuse descriptor: returns at once while requests are
    queued (at most _STREAK times in a row), else waits through trio."""

    def __init__(self) -> None:
        self._polls: dict[int, Any] = {}
        self._streak = 0
        self.fast = 0   # waits answered at once (for tests and measurements)
        self.slow = 0   # waits through trio

    async def __call__(self, fd: Any) -> None:
        if self._streak < _STREAK and isinstance(fd, int):
            poller = self._polls.get(fd)
            if poller is None:
                poller = self._polls[fd] = select.poll()
                poller.register(fd, select.POLLIN)
            if poller.poll(0):
                self._streak += 1
                self.fast += 1
                return
        self._streak = 0
        self.slow += 1
        await trio.lowlevel.wait_readable(fd)


class _Forward(types.ModuleType):
    """A module that answers with *target*'s attributes except those set on it."""

    def __init__(self, name: str, target: types.ModuleType) -> None:
        super().__init__(name)
        self._target = target

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._target, attr)


class WaitCounts:
    """A Prometheus collector of the wait's two counters, read when scraped (nothing is
    added to the per-request path)."""

    def __init__(self, wait: _ReadyWait) -> None:
        self._wait = wait

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(
            "fusecache_fuse_request_waits",
            "Waits for the next FUSE request: at_once (queued already, no scheduler pass) "
            "or scheduled (through trio's event loop)", labels=["how"])
        family.add_metric(["at_once"], self._wait.fast)
        family.add_metric(["scheduled"], self._wait.slow)
        yield family


def install(pyfuse3_module: types.ModuleType) -> _ReadyWait | None:
    """Give *pyfuse3_module* the stand-in for trio; the wait (with its counters), or None
    where this pyfuse3 has no global ``trio`` to replace or FUSECACHE_FUSE_LOOP=trio
    (pyfuse3 then runs as it would)."""
    choice = os.environ.get(ENV_SWITCH, "").strip().lower()
    if choice == "trio":
        log.info("%s=trio: pyfuse3's own request loop", ENV_SWITCH)
        return None
    if choice:
        log.warning("ignoring %s=%r (expected trio)", ENV_SWITCH, choice)
    if getattr(pyfuse3_module, "trio", None) is not trio:
        log.warning("pyfuse3 has no global 'trio' to replace: its own request loop")
        return None
    wait = _ReadyWait()
    lowlevel = _Forward("trio.lowlevel", trio.lowlevel)
    lowlevel.wait_readable = wait  # type: ignore[attr-defined]
    shim = _Forward("trio", trio)
    shim.lowlevel = lowlevel  # type: ignore[attr-defined]
    shim.Lock = _FreeLock  # type: ignore[attr-defined]
    pyfuse3_module.trio = shim  # type: ignore[attr-defined]
    return wait


def uninstall(pyfuse3_module: types.ModuleType) -> None:
    """Give *pyfuse3_module* trio back (tests; a mount process ends with its loop)."""
    if isinstance(getattr(pyfuse3_module, "trio", None), _Forward):
        pyfuse3_module.trio = trio  # type: ignore[attr-defined]
