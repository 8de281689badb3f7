"""Cross-cutting RPC concerns, applied to servicer methods as decorators.

Servicer methods raise :class:`CsiError` (a gRPC code and a message) and never
touch ``context`` for errors themselves; ``@log_rpc`` is the single place that
turns an exception into ``context.abort``. That keeps the "set a code, forget the
return" bug out of the servicers: a method either returns its response or raises.

Decorator order on a method, outermost first::

    @log_rpc                     # timing, outcome, abort; never logs secrets
    @require("volume_id", ...)   # INVALID_ARGUMENT for missing fields
    @when_ready                  # UNAVAILABLE while start-up recovery runs
    @serialized_by("volume_id")  # one operation per volume at a time

Secrets: request fields that the CSI proto marks ``csi_secret`` are replaced by
``***`` before a request is logged, and so are mount flags (the spec says they
MAY hold sensitive data). Messages built from subprocess output go through
:func:`scrub` with the request's secret values before they reach a caller.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import grpc
from google.protobuf import message as _message

from csi._proto import csi_pb2

log = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])

#: How long an RPC waits for another RPC on the same volume before ABORTED.
#: Shorter than the CO's usual 2 minute deadline so the CO sees a clear code.
VOLUME_LOCK_TIMEOUT_S = 60.0
#: How long a volume RPC waits for start-up recovery before UNAVAILABLE.
READY_TIMEOUT_S = 60.0

# RPCs that a CO calls all the time (liveness probes, registrar): debug only.
_QUIET = {"Probe", "GetPluginInfo", "GetPluginCapabilities", "NodeGetCapabilities",
          "ControllerGetCapabilities", "NodeGetInfo", "NodeGetVolumeStats"}
# Codes that mean "the caller asked for something wrong", not a plugin anomaly.
_CALLER_CODES = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND,
                 grpc.StatusCode.ALREADY_EXISTS, grpc.StatusCode.FAILED_PRECONDITION,
                 grpc.StatusCode.OUT_OF_RANGE, grpc.StatusCode.ABORTED,
                 grpc.StatusCode.UNAVAILABLE}


class CsiError(Exception):
    """A failure with the gRPC code the CSI spec assigns to it."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def scrub(text: str, secrets: Iterable[str]) -> str:
    """Replace every secret value (4+ chars) found in *text* by ``***``."""
    for value in sorted((s for s in secrets if s and len(s) >= 4), key=len, reverse=True):
        text = text.replace(value, "***")
    return text


def redacted(msg: _message.Message) -> _message.Message:
    """A copy of *msg* with csi_secret fields and mount flags masked, for logging."""
    copy = type(msg)()
    copy.CopyFrom(msg)
    _redact_in_place(copy)
    return copy


def _redact_in_place(msg: _message.Message) -> None:
    for field, value in msg.ListFields():
        opts = field.GetOptions()
        if opts.Extensions[csi_pb2.csi_secret] or field.name == "mount_flags":
            if field.message_type is not None and field.message_type.GetOptions().map_entry:
                for key in list(value):
                    value[key] = "***"
            elif _repeated(field):
                value[:] = ["***"] * len(value)
            else:
                msg.ClearField(field.name)
            continue
        if field.message_type is None or field.message_type.GetOptions().map_entry:
            continue
        if _repeated(field):
            for item in value:
                _redact_in_place(item)
        else:
            _redact_in_place(value)


def _repeated(field: Any) -> bool:
    """protobuf >= 5 has ``is_repeated``; older releases only ``label``."""
    flag = getattr(field, "is_repeated", None)
    return bool(flag) if flag is not None else field.label == 3


def _one_line(msg: _message.Message) -> str:
    from google.protobuf import text_format

    return text_format.MessageToString(redacted(msg), as_one_line=True)


def log_rpc(fn: F) -> F:
    """Log an RPC's duration and outcome; turn :class:`CsiError` into ``abort``."""
    name = fn.__name__

    @functools.wraps(fn)
    def wrapper(self: Any, request: _message.Message, context: grpc.ServicerContext) -> Any:
        quiet = name in _QUIET
        start = time.monotonic()
        try:
            if log.isEnabledFor(logging.DEBUG):
                log.debug("%s <- %s", name, _one_line(request))
            response = fn(self, request, context)
        except CsiError as e:
            level = logging.INFO if e.code in _CALLER_CODES else logging.WARNING
            log.log(level, "%s failed in %.3fs: %s: %s", name, time.monotonic() - start,
                    e.code.name, e.message)
            context.abort(e.code, e.message)
        except Exception as e:  # noqa: BLE001 - last resort: INTERNAL, traceback in the log
            log.exception("%s: unexpected error after %.3fs", name, time.monotonic() - start)
            context.abort(grpc.StatusCode.INTERNAL,
                          f"{name}: internal error ({type(e).__name__}); see the plugin log")
        log.log(logging.DEBUG if quiet else logging.INFO, "%s ok in %.3fs%s", name,
                time.monotonic() - start, _volume_suffix(request))
        return response

    return wrapper  # type: ignore[return-value]


def _volume_suffix(request: _message.Message) -> str:
    vid = getattr(request, "volume_id", "") or getattr(request, "name", "")
    return f" ({vid})" if vid else ""


def require(*fields: str) -> Callable[[F], F]:
    """Fail with INVALID_ARGUMENT unless every named request field is set."""

    def deco(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(self: Any, request: _message.Message, context: Any) -> Any:
            for name in fields:
                if not _is_set(request, name):
                    raise CsiError(grpc.StatusCode.INVALID_ARGUMENT, f"{name} is required")
            return fn(self, request, context)

        return wrapper  # type: ignore[return-value]

    return deco


def _is_set(request: _message.Message, name: str) -> bool:
    field = request.DESCRIPTOR.fields_by_name[name]
    value = getattr(request, name)
    if _repeated(field):
        return len(value) > 0
    if field.message_type is not None:
        return request.HasField(name)
    return bool(value)


class Readiness:
    """Set once the plugin can serve volume RPCs (Probe reports it)."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def set(self) -> None:
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float) -> bool:
        return self._event.wait(timeout)


def when_ready(fn: F) -> F:
    """Wait for ``self.readiness``; UNAVAILABLE if start-up recovery is still running."""

    @functools.wraps(fn)
    def wrapper(self: Any, request: _message.Message, context: Any) -> Any:
        if not self.readiness.wait(READY_TIMEOUT_S):
            raise CsiError(grpc.StatusCode.UNAVAILABLE,
                           "the plugin is still re-establishing staged volumes; retry")
        return fn(self, request, context)

    return wrapper  # type: ignore[return-value]


class KeyedLocks:
    """One lock per key (volume id); entries are dropped when nobody holds them."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, list[Any]] = {}  # key -> [lock, users]

    def acquire(self, key: str, timeout: float) -> bool:
        with self._guard:
            entry = self._locks.setdefault(key, [threading.Lock(), 0])
            entry[1] += 1
        if entry[0].acquire(timeout=timeout):
            return True
        self._release_user(key)
        return False

    def release(self, key: str) -> None:
        with self._guard:
            entry = self._locks[key]
            entry[0].release()
        self._release_user(key)

    def _release_user(self, key: str) -> None:
        with self._guard:
            entry = self._locks[key]
            entry[1] -= 1
            if entry[1] == 0:
                del self._locks[key]


def serialized_by(field: str) -> Callable[[F], F]:
    """Run at most one decorated RPC per value of *field* (``self.locks``) at a time."""

    def deco(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(self: Any, request: _message.Message, context: Any) -> Any:
            key = getattr(request, field)
            if not self.locks.acquire(key, VOLUME_LOCK_TIMEOUT_S):
                raise CsiError(grpc.StatusCode.ABORTED,
                               f"another operation on {field} {key!r} is in progress")
            try:
                return fn(self, request, context)
            finally:
                self.locks.release(key)

        return wrapper  # type: ignore[return-value]

    return deco


def secrets_of(request: _message.Message) -> Mapping[str, str]:
    """The request's ``secrets`` map (empty for requests without one)."""
    return dict(getattr(request, "secrets", {}) or {})
