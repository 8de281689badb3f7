"""One retry policy for every S3 request: exponential backoff, jitter, a deadline.

Errors are classified by the caller into temporary (retry) and permanent (raise
at once). Log level escalates: first retries at debug, later ones at warning, so
a flapping endpoint is visible without flooding the log.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")


class TemporaryFailure(Exception):
    """Wraps an error worth retrying; ``cause`` is the original."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


def call_with_retry(fn: Callable[[], T], *, what: str, deadline: float, max_attempts: int,
                    base_delay: float = 0.1, max_delay: float = 5.0,
                    on_give_up: Callable[[BaseException], BaseException],
                    on_retry: Callable[[], None] | None = None) -> T:
    """Call *fn* until it succeeds, raises a permanent error, or time/attempts run out.

    *deadline* is an absolute ``time.monotonic()`` value; *max_attempts* 0 means the
    deadline alone decides. *fn* signals a retryable error by raising
    TemporaryFailure. On giving up, ``on_give_up(cause)`` is raised. *on_retry* is
    called before each retry (a counter).
    Runs in a worker thread (it sleeps).
    """
    attempt = 0
    while True:
        attempt += 1
        try:
            return fn()
        except TemporaryFailure as e:
            delay = min(max_delay, base_delay * 2 ** (attempt - 1)) * (0.5 + random.random())
            left = deadline - time.monotonic()
            if (max_attempts and attempt >= max_attempts) or left <= delay:
                log.warning("%s failed after %d attempts: %s", what, attempt, e.cause)
                raise on_give_up(e.cause) from e.cause
            level = logging.DEBUG if attempt < 3 else logging.WARNING
            log.log(level, "%s: attempt %d failed (%s); retrying in %.2fs",
                    what, attempt, e.cause, delay)
            if on_retry is not None:
                on_retry()
            time.sleep(delay)
