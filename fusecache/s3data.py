"""The S3 data plane: ranged GETs, HEADs, folder probes and folder listings through a
native client that releases the GIL.

Who calls it: ``s3store.S3Store.get_range`` (the FUSE reader's fetches and
read-ahead, ``fusecache/warm.py``, prefetchd's warm), ``S3Store.head`` and
``S3Store.has_under`` (a mount's lookups of names no listing has yet: a HEAD and a
one-key LIST under ``name/`` side by side; the HEAD also revalidates a file whose
metadata is older than the TTL), ``S3Store.list_dir`` (a folder's listing, when the
objects under it fit a few pages). boto3 stays the control plane for the rest (paged
listings of big folders, the bucket check, the circuit breaker's probe) and the fallback
for what this module cannot do (see ``usable`` and ``native_key``).

Why: measured on the 2-core bench machine against loopback SeaweedFS, 600 GETs of
60-160 KiB, boto3 spent 3.7-4.3 ms of CPU per GET (parameter validation, event
hooks, signing, urllib3, parsing, all holding the GIL the FUSE loop needs) and
moved 110-200 GET/s with 4 or 16 threads; obstore (Rust ``object_store``:
reqwest/hyper, SigV4 in Rust) spent 0.6-1.0 ms per GET and moved 340-470 GET/s.
A HEAD, one after another on the same machine: boto3 1.9 ms of CPU and 3.0 ms
of wall time, obstore 0.25 and 0.96 ms. The folder probe of a lookup (LIST under
``name/``): boto3 1.9 ms of CPU and 4.5 ms of wall time, obstore 0.23 and 2.2 ms; in a
cold pass of 2,000 small files in 200 folders by 16 readers the mount made about 620
of them, 1.6 s of its 7-8 s of CPU while they went through boto3. A folder's listing
(same machine, one after another): 20 objects, boto3 3.8 ms of CPU and 5.4 ms of wall
time, obstore 0.32 and 2.0 ms; 600 objects, boto3 64 ms and 76 ms (botocore parses every
timestamp with dateutil), obstore 3.6 and 14 ms.

Data flow of one GET: one blocking call (``obstore.get`` + ``bytes()``) signs the
request, sends it with ``Range`` and ``If-Match``, and reads the whole body into
one Rust-owned buffer with the GIL released; the caller gets a ``memoryview`` of
that buffer (no copy into a Python ``bytes``). A caller that lends a buffer (the
mount, for a whole block: one its RAM tier let go) gets the body streamed into it
instead, 256 KiB at a time: a fresh 8 MiB buffer per GET costs 2,048 page faults,
zeroed pages and an munmap, which a reused one does not. Nothing here retries: obstore's
retries are off, and ``S3Store._call`` applies the one retry policy, the breaker
and the counters, as for boto3.

Errors are translated into the ``errors`` family here: 404 -> ObjectNotFound
(BucketNotFound for NoSuchBucket), 412 -> ObjectChanged, 401/403 -> AccessDenied,
5xx and broken or short bodies -> ``retry.TemporaryFailure``, no connection or a
timeout -> ``Unreachable`` (the store trips its circuit breaker on it, as on
botocore's connect/read timeouts). Messages are built here from the status, the
S3 error code and the kind of failure; obstore's own text (which names the URL)
is never passed on whole, and credentials never appear in either.

Credentials: a callback into the boto3 session the store already has, so they
come from the same places (explicit per-volume Secret values, environment,
profile, instance or pod identity) and refresh the same way; static ones are
cached by obstore, refreshable ones are asked for again every few minutes.

Timeouts: connect ``connect_timeout``, each read of the body ``request_timeout``,
the whole request at most ``op_deadline`` (all already capped by the caller).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import re
from collections.abc import Callable, Iterator
from typing import Any

from fusecache import errors, retry

log = logging.getLogger(__name__)

try:  # a hard dependency; the guard only keeps boto3 serving if the wheel is broken
    import obstore
    from obstore import exceptions as oe
    from obstore.store import S3Store as _ObStore
except ImportError:  # pragma: no cover - exercised only on a broken install
    obstore = None  # type: ignore[assignment]

# FUSECACHE_S3_DATA_PLANE=boto3 switches the native data plane off (A/B measurements,
# or an endpoint whose TLS needs something obstore does not take).
ENV_SWITCH = "FUSECACHE_S3_DATA_PLANE"
_CODE = re.compile(r"<Code>([^<]{1,64})</Code>")
_STATUS = re.compile(r"status code: (\d{3})")
_KIND = re.compile(r"kind: (Connect|Timeout|Request|Interrupted|Decode|Unknown)\b")
_REFRESH = dt.timedelta(minutes=5)
LIST_CHUNK = 1000  # objects per chunk of a native listing: one ListObjectsV2 page


class Unreachable(Exception):
    """No answer from the endpoint (refused, DNS, connect or read timeout)."""


class NotNative(Exception):
    """obstore cannot name this key as it is: the caller GETs it through boto3."""


def usable(endpoint_url: str) -> str | None:
    """None when the native data plane can be used here, else why not (for the log)."""
    if obstore is None:
        return "obstore is not installed"
    choice = os.environ.get(ENV_SWITCH, "native").strip().lower()
    if choice == "boto3":
        return f"{ENV_SWITCH}=boto3"
    if choice not in ("", "native"):
        log.warning("ignoring %s=%r (expected native or boto3)", ENV_SWITCH, choice)
    if endpoint_url.startswith("https://") and os.environ.get("AWS_CA_BUNDLE"):
        return "AWS_CA_BUNDLE is set for an https endpoint (boto3 honours it, obstore not)"
    return None


def native_key(key: str) -> bool:
    """Keys obstore's path type takes unchanged: no empty, '.' or '..' segment (so no
    leading, trailing or double '/'), no control characters. Others go through boto3."""
    if not key or any(ord(c) < 0x20 or c == "\x7f" for c in key):
        return False
    return all(p and p not in (".", "..") for p in key.split("/"))


def _credential_provider(session: Any) -> Callable[[], dict]:
    def provide() -> dict:
        creds = session.get_credentials()
        if creds is None:
            raise PermissionError("no usable AWS credentials found in the standard chain")
        frozen = creds.get_frozen_credentials()
        refreshable = hasattr(creds, "refresh_needed")
        return {"access_key_id": frozen.access_key, "secret_access_key": frozen.secret_key,
                "token": frozen.token,
                "expires_at": dt.datetime.now(dt.UTC) + _REFRESH if refreshable else None}
    return provide


# Chunks of a body streamed into a caller's buffer: at least this many bytes each, and
# under the mount's 1 MiB mmap threshold (mount.limit_malloc_arenas), so that the next
# chunk reuses a freed one's memory instead of mapping and faulting in fresh pages.
_STREAM_CHUNK = 256 * 1024


# S3's answers that mean "again later" (with 5xx and HTTP 429): retried with backoff. 429
# (TooManyRequests: S3-compatible stores and gateways throttle with it, and botocore's own
# policy retries it) had failed at once (a blind test of the mount: EIO in 0.01 s).
THROTTLED = frozenset({"SlowDown", "RequestTimeout", "InternalError", "ServiceUnavailable",
                       "TooManyRequests", "Throttling", "ThrottlingException",
                       "RequestLimitExceeded", "RequestThrottled"})


def answered_for(key: str, etag: str | None, answered: str | None) -> None:
    """ObjectChanged unless a GET sent with ``If-Match: etag`` was answered by that
    version: the bytes of another are never served or stored under this one's name. A
    blind test of the mount: a replaying middlebox (or a server that ignores If-Match)
    answered with an earlier version's 206; its bytes were served and cached under the
    new ETag, a file of two versions, until evicted. An answer without an ETag is taken
    (the request's If-Match stands for it)."""
    if etag and answered and answered.strip().strip('"') != etag:
        raise errors.ObjectChanged(f"{key}: asked for version {etag}, answered with "
                                   f"{answered.strip()}")


def _stream_into(result: Any, into: bytearray,
                 progress: Callable[[int], None] | None = None) -> bytearray:
    """The body of *result* copied into *into* as it arrives; *into* when it fills it
    exactly, else the bytes that came (the caller's length check rejects them).
    *progress(n)*: after each chunk, the first n bytes of *into* are the body's."""
    view = memoryview(into)
    pos = 0
    for chunk in result.stream(min_chunk_size=_STREAM_CHUNK):
        n = len(chunk)
        if pos + n > len(into):  # longer than the range asked for: never served
            return into[:pos] + bytes(chunk)
        view[pos:pos + n] = chunk
        pos += n
        if progress is not None:
            progress(pos)
    return into if pos == len(into) else into[:pos]


class RangeGetter:
    """One bucket's ranged GETs through obstore; thread-safe (one pooled client)."""

    def __init__(self, bucket: str, *, endpoint_url: str, region: str, session: Any,
                 max_connections: int, connect_timeout: float, read_timeout: float,
                 op_deadline: float) -> None:
        self.bucket = bucket
        self._where = endpoint_url
        self._store = _ObStore(
            bucket, endpoint=endpoint_url, region=region,
            virtual_hosted_style_request=False,
            credential_provider=_credential_provider(session),
            client_options={
                "allow_http": endpoint_url.startswith("http://"),
                "connect_timeout": dt.timedelta(seconds=connect_timeout),
                "read_timeout": dt.timedelta(seconds=read_timeout),
                "timeout": dt.timedelta(seconds=op_deadline),
                "pool_max_idle_per_host": str(max_connections),
            },
            # one attempt: S3Store._call owns retries, their deadline and their counter
            retry_config={"max_retries": 0, "retry_timeout": dt.timedelta(seconds=1),
                          "backoff": {"init_backoff": dt.timedelta(milliseconds=100),
                                      "max_backoff": dt.timedelta(seconds=1), "base": 2.0}},
        )

    def get(self, key: str, start: int, end: int, etag: str | None,
            into: bytearray | None = None,
            progress: Callable[[int], None] | None = None) -> memoryview | bytearray:
        """Bytes [start, end) of *key* (the body as sent; the caller checks its length):
        a view of obstore's buffer, or, given *into* (a buffer of end - start bytes),
        the body streamed into it (*into* itself when the body fills it exactly), with
        *progress* told how much of it has arrived (``_stream_into``)."""
        opts: dict[str, Any] = {"range": (start, end)}
        if etag:
            opts["if_match"] = f'"{etag}"'
        def answer() -> Any:
            result = obstore.get(self._store, key, options=opts)
            answered_for(key, etag, (result.meta or {}).get("e_tag"))
            return result

        if into is None:
            return memoryview(self._request(key, lambda: answer().bytes()))
        return self._request(key, lambda: _stream_into(answer(), into, progress))

    def head(self, key: str) -> tuple[int, str, float]:
        """(size, ETag without quotes, mtime) of *key*: one HEAD, as ``get`` its GETs."""
        meta = self._request(key, lambda: obstore.head(self._store, key))
        return (int(meta["size"]), (meta["e_tag"] or "").strip('"'),
                _timestamp(meta["last_modified"]))

    def has_under(self, key: str) -> bool:
        """Whether any object's key starts with ``key + "/"`` (one LIST of at most one
        page; object_store's prefixes match whole path segments, so ``d`` does not
        match ``dx``)."""
        def first_chunk() -> list:
            return next(iter(obstore.list(self._store, prefix=key, chunk_size=1)), [])
        return bool(self._request(key, first_chunk))

    def list_chunks(self, key: str) -> Iterator[list[tuple[str, int, str, float]]]:
        """Every object under ``key + "/"`` (the whole bucket for key ""), recursively, as
        chunks of at most LIST_CHUNK (key, size, ETag, mtime), one LIST page each, fetched
        as the caller asks for them.

        object_store names a key as a path: a trailing '/' is dropped (the folder marker
        ``a/b/`` is listed as ``a/b``), and a key with an empty or '.' segment or a
        control character ends the listing with NotNative. The caller decides what such
        names can stand for (``S3Store.list_dir``)."""
        stream = iter(self._request(
            key, lambda: obstore.list(self._store, prefix=key or None,
                                 chunk_size=LIST_CHUNK)))
        while True:
            chunk = self._request(key, lambda: next(stream, None))
            if not chunk:
                return
            yield [(m["path"], int(m["size"]), (m["e_tag"] or "").strip('"'),
                    _timestamp(m["last_modified"])) for m in chunk]

    def _request(self, key: str, send: Callable[[], Any]) -> Any:
        """*send()*'s answer; NotNative when obstore refused a path (*key* before any
        request, or a listed key it cannot name), any other failure as the domain error
        (_translate)."""
        try:
            return send()
        except errors.StoreError:
            raise  # (answered_for's)
        except (ValueError, oe.InvalidPathError) as e:
            raise NotNative(str(e)) from None
        except Exception as e:  # noqa: BLE001 - translated below
            raise self._translate(e, key) from None

    def _translate(self, e: BaseException, key: str) -> BaseException:
        where = f"s3://{self.bucket}/{key}"
        text = str(e)
        m = _CODE.search(text)
        code = m.group(1) if m else ""
        m = _STATUS.search(text)
        status = int(m.group(1)) if m else 0
        if isinstance(e, oe.NotFoundError) or status == 404:
            if code == "NoSuchBucket":
                return errors.BucketNotFound(f"bucket {self.bucket!r} does not exist")
            return errors.ObjectNotFound(f"{where} not found")
        if isinstance(e, oe.PreconditionError) or status == 412:
            return errors.ObjectChanged(f"{where} changed on the server")
        if isinstance(e, oe.PermissionDeniedError | oe.UnauthenticatedError) \
                or status in (401, 403):
            return errors.AccessDenied(
                f"access denied to {where} ({code or status}): check the credentials")
        if isinstance(e, PermissionError) or "no usable AWS credentials" in text:
            return errors.AccessDenied("no usable AWS credentials found in the standard chain")
        if status >= 500 or status == 429 or code in THROTTLED:
            return retry.TemporaryFailure(OSError(f"GET {where}: {code or status}"))
        if status:
            return errors.StoreError(f"{where}: {code or status}")
        m = _KIND.search(text)
        kind = m.group(1) if m else ""
        if kind in ("Connect", "Timeout"):
            what = "no connection" if kind == "Connect" else "timed out"
            return Unreachable(f"GET {where}: {what} ({_first_cause(text)})")
        if kind in ("Request", "Interrupted", "Decode") or isinstance(e, oe.GenericError):
            # dropped connection, reset, body shorter than its Content-Length: S3 is there
            # (a ConnectionError: no answer came, what S3Store counts toward an outage)
            return retry.TemporaryFailure(ConnectionError(
                f"GET {where}: response broken ({kind or 'HTTP'} error: {_first_cause(text)})"))
        return errors.StoreError(f"{where}: {type(e).__name__}")


def _timestamp(value: object) -> float:
    return value.timestamp() if isinstance(value, dt.datetime) else 0.0


def _first_cause(text: str) -> str:
    """The innermost OS error or reason in obstore's debug text, briefly."""
    m = re.search(r'message: "([^"]{1,80})"', text) or re.search(r"source: (\w{1,40}),\s*\}",
                                                               text)
    return m.group(1) if m else "see the debug log"
