"""A counting, failing-on-cue in-memory ObjectStore for unit tests of the core."""

from __future__ import annotations

import hashlib
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator

from fusecache import errors
from fusecache.store import ListPage, ObjectInfo


def ramp(key: str, size: int) -> bytes:
    """Deterministic bytes that differ per key and per offset."""
    seed = hashlib.sha256(key.encode()).digest()
    reps = size // len(seed) + 1
    base = bytes(((i * 7) ^ b) & 0xFF for i, b in enumerate(seed * reps))[:size]
    return base


class FakeStore:
    def __init__(self, bucket: str = "fake") -> None:
        self.bucket = bucket
        self.denied_at = 0.0  # (ObjectStore: never refused)
        self.body_seen_at = -math.inf  # (ObjectStore: no body came yet)
        self.objects: dict[str, bytes] = {}
        self.etags: dict[str, str] = {}
        self.calls: Counter[str] = Counter()
        self.fail_next: dict[str, list[BaseException]] = {}
        self.delay = 0.0
        # id() of each buffer a GET was given to fill (into=); not the buffer itself, which
        # would keep it from being reused
        self.lent: list[int] = []
        # set: a GET into a lent buffer delivers half the body, then waits for this
        # threading.Event (at most 10 s) before the rest (early serving)
        self.body_gate: threading.Event | None = None
        self.body_error: BaseException | None = None  # raised at the gate instead
        self._lock = threading.Lock()

    def put(self, key: str, data: bytes) -> None:
        self.objects[key] = data
        self.etags[key] = hashlib.md5(data).hexdigest()

    def _maybe_fail(self, op: str) -> None:
        with self._lock:
            self.calls[op] += 1
            queue = self.fail_next.get(op)
            exc = queue.pop(0) if queue else None
        if self.delay:
            time.sleep(self.delay)
        if exc is not None:
            try:
                raise exc
            finally:  # not a cycle through this frame (the reader's tests check leaks)
                del exc

    def check_bucket(self) -> None:
        self._maybe_fail("check")

    def head(self, key: str) -> ObjectInfo:
        self._maybe_fail("head")
        if key not in self.objects:
            raise errors.ObjectNotFound(key)
        return ObjectInfo(key, len(self.objects[key]), self.etags[key], 1.0)

    def get_range(self, key: str, start: int, end: int, etag: str | None = None,
                  into: bytearray | None = None,
                  progress: Callable[[int], None] | None = None) -> bytes:
        self._maybe_fail("get")
        if key not in self.objects:
            raise errors.ObjectNotFound(key)
        if etag is not None and etag != self.etags[key]:
            raise errors.ObjectChanged(key)
        data = self.objects[key][start:end]
        if into is not None and len(into) == len(data):  # as S3Store streams a body in
            self.lent.append(id(into))
            gate = self.body_gate
            if gate is None:
                into[:] = data
            else:  # the first half, then wait for the test to let the rest come
                half = len(data) // 2
                into[:half] = data[:half]
                if progress is not None:
                    progress(half)
                gate.wait(10)
                if self.body_error is not None:
                    raise self.body_error
                into[half:] = data[half:]
            if progress is not None:
                progress(len(data))
            return into
        return data

    def list_page(self, prefix: str, token: str | None = None, delimiter: str | None = "/",
                  max_keys: int = 1000) -> ListPage:
        self._maybe_fail("list")
        keys = sorted(k for k in self.objects if k.startswith(prefix))
        entries: list[tuple[str, bool]] = []
        seen: set[str] = set()
        for k in keys:
            rest = k[len(prefix):]
            if delimiter and delimiter in rest:
                p = prefix + rest.split(delimiter, 1)[0] + delimiter
                if p not in seen:
                    seen.add(p)
                    entries.append((p, True))
            else:
                entries.append((k, False))
        entries.sort()
        start = int(token or 0)
        chunk = entries[start:start + max_keys]
        page = ListPage()
        for name, is_prefix in chunk:
            if is_prefix:
                page.prefixes.append(name)
            else:
                page.objects.append(self.head_nocount(name))
        if start + max_keys < len(entries):
            page.next_token = str(start + max_keys)
        return page

    def list_dir(self, prefix: str) -> ListPage | None:
        return None  # the paged listing (S3Store's native one is tested on SeaweedFS)

    def list_all(self, prefix: str) -> Iterator[ObjectInfo]:
        token = None
        while True:
            page = self.list_page(prefix, token, delimiter=None)
            yield from page.objects
            token = page.next_token
            if token is None:
                return

    def has_under(self, prefix: str) -> bool:
        self._maybe_fail("list")
        return any(k.startswith(prefix) for k in self.objects)

    def head_nocount(self, key: str) -> ObjectInfo:
        return ObjectInfo(key, len(self.objects[key]), self.etags[key], 1.0)
