"""The object-store interface the core reads through, and its value types.

Only ``s3store`` (and its data plane ``s3data``) talk to S3; unit tests use
``tests/fakes.FakeStore``, which counts requests and fails on cue. All methods are
blocking and are called from worker threads (``trio.to_thread.run_sync``), never from the trio loop.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """One object as listed or HEADed: enough to identify its bytes."""

    key: str
    size: int
    etag: str
    mtime: float = 0.0


@dataclass(slots=True)
class ListPage:
    """One page of ListObjectsV2 with a delimiter."""

    objects: list[ObjectInfo] = field(default_factory=list)
    prefixes: list[str] = field(default_factory=list)
    next_token: str | None = None


class ObjectStore(Protocol):
    """A bucket, read-only. Raises the ``errors.Store*`` family, never botocore errors."""

    bucket: str
    # wall-clock time of the last AccessDenied S3 answered (0: never); the mount asks S3
    # again before serving what an earlier yes allowed (namespace.authorize_read)
    denied_at: float
    # monotonic time a GET last got body bytes (-inf: never)
    body_seen_at: float

    def check_bucket(self) -> None:
        """Fail fast (BucketNotFound, AccessDenied, StoreUnavailable) before mounting."""

    def head(self, key: str) -> ObjectInfo:
        """Metadata of *key*; ObjectNotFound if absent."""

    def get_range(self, key: str, start: int, end: int, etag: str | None = None,
                  into: bytearray | None = None,
                  progress: Callable[[int], None] | None = None
                  ) -> bytes | memoryview | bytearray:
        """Bytes [start, end) of *key*, exactly; ObjectChanged if the ETag moved on.
        A memoryview (of a native client's buffer) is read-only and never copied.
        *into*: a buffer of end - start bytes the caller lends for the body; the result
        may be it or other bytes, and the caller must not use *into* otherwise until
        this returns (a store may ignore it). *progress(n)*, called from the calling
        thread while the body arrives: the first n bytes of *into* are the object's (of
        *etag*) and stay so; n may start over lower when a try is retried."""

    def list_page(self, prefix: str, token: str | None = None, delimiter: str | None = "/",
                  max_keys: int = 1000) -> ListPage:
        """One page of the listing under *prefix*."""

    def list_dir(self, prefix: str) -> ListPage | None:
        """Folder *prefix* whole as one page when a cheaper listing can say exactly what
        ``list_page``'s pages would; None: page through ``list_page``."""

    def list_all(self, prefix: str) -> Iterator[ObjectInfo]:
        """Every object whose key starts with *prefix*, no delimiter, in S3's order (a
        page at a time: stop iterating to stop listing)."""

    def has_under(self, prefix: str) -> bool:
        """Whether any key starts with *prefix* (ending in '/'): a folder (one LIST)."""
