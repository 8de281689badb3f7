"""Circuit breaker for one S3 endpoint: fail fast while S3 cannot be reached.

Who calls it: ``S3Store`` owns one. It checks it before every request attempt,
trips it on a connection failure or timeout, and closes it on any answer. The
reader and the namespace check ``is_open`` on the trio thread before they hand a
request to a worker thread (so a fast failure never queues behind stuck threads),
and trip it when S3 did not answer within the operation's bound.

States and data flow::

    closed --(refused/DNS/connect or read timeout, or no answer within the bound)--> open
    open   --(one probe, or any request, gets an answer of any kind)------------->  closed

While open, ``check`` raises ``StoreUnavailable`` at once, and one daemon thread
probes S3 every ``probe_interval`` seconds with a cheap request bounded by short
timeouts. Any HTTP answer (even 403: the endpoint is reachable) closes the
breaker; callers then find S3 again on their next request.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from fusecache import errors

log = logging.getLogger(__name__)

Event = Callable[[str], None]


def _noop(event: str) -> None:
    return None


class CircuitBreaker:
    """Thread-safe; ``is_open`` is a plain attribute read (cheap on the hot path)."""

    def __init__(self, probe: Callable[[], None], *, name: str = "S3",
                 probe_interval: float = 1.0, on_event: Event = _noop) -> None:
        """*probe* raises on no answer and returns when the endpoint answered."""
        self._probe = probe
        self.name = name
        self.probe_interval = probe_interval
        self._on_event = on_event
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self.is_open = False
        self.opened_at = 0.0     # time.monotonic() of the last trip
        self.reason = ""
        self._prober: threading.Thread | None = None
        self._closed_for_good = False

    def check(self, what: str = "request") -> None:
        """Raise StoreUnavailable at once while the breaker is open."""
        if self.is_open:
            self._on_event("fast_fail")
            raise errors.StoreUnavailable(
                f"{what}: {self.name} unreachable for {time.monotonic() - self.opened_at:.0f}s "
                f"({self.reason}); failing fast until it answers again")

    def trip(self, reason: str) -> None:
        """Open the breaker (idempotent) and start the probe if none runs."""
        with self._lock:
            if self.is_open or self._closed_for_good:
                return
            self.is_open = True
            self.opened_at = time.monotonic()
            self.reason = reason
            self._wake.clear()
            if self._prober is None:
                self._prober = threading.Thread(target=self._probe_loop, daemon=True,
                                                name="fusecache-s3-probe")
                self._prober.start()
        log.warning("%s unreachable (%s): operations that need it fail fast; probing "
                    "every %gs", self.name, reason, self.probe_interval)
        self._on_event("open")

    def record_success(self) -> None:
        """An answer came back: close the breaker if it was open."""
        if not self.is_open:
            return
        with self._lock:
            if not self.is_open:
                return
            self.is_open = False
            down = time.monotonic() - self.opened_at
            self._wake.set()
        log.warning("%s answers again after %.1fs: resuming normal operation", self.name, down)
        self._on_event("close")

    def shutdown(self) -> None:
        """Stop probing (the owner is closing)."""
        with self._lock:
            self._closed_for_good = True
            self._wake.set()

    def _probe_loop(self) -> None:
        while True:
            self._wake.wait(self.probe_interval)
            with self._lock:
                if not self.is_open or self._closed_for_good:
                    self._prober = None
                    return
            try:
                self._probe()
            except Exception as e:  # noqa: BLE001 - any failure means: still unreachable
                log.debug("%s probe: still unreachable (%s)", self.name, e)
                continue
            self.record_success()
