"""Offline authorisation: which credential S3 last let read which bucket/prefix, and when.

Why: blocks and listings in the node cache are shared by every mount on the node.
While S3 answers, S3 itself refuses a credential that may not read a bucket. When
S3 cannot be reached, the cache would answer anyone; these records make a mount
serve cached data only for what its own credential was authorised for, and only
for a bounded time after S3 last said so (``--offline-auth-max-age``).

Who calls it: ``mount.py`` records after the mount check and from the flusher
(``sync``: the S3Store's ``authorised_at`` / ``denied_at``), re-checks with S3 now
and then while the mount is idle, and prefetchd records after a warm
(``record_authorised``). A mount made while S3 is unreachable is refused without a
record (``OfflineGate.check``). The namespace and the
reader call ``OfflineGate.check`` whenever they serve without S3 (stale-if-error,
or any read while the S3 circuit breaker is open); a refusal is AccessDenied
(EACCES).

Data: table ``offline_auth`` in the node cache's LMDB environment,
``tag (16 bytes) + bucket + NUL + prefix -> last authorised (float, wall clock)``.
The tag is HMAC-SHA256 of the access key id and the S3 endpoint under a node-local
random key (32 bytes, ``<cache-dir>/offline-auth.key``, mode 0600, created on first use), so the
shared LMDB file holds no access key id, nor a plain hash one could test guesses
against; the secret key is never seen here. An AccessDenied from S3 deletes the
record of that prefix and of every prefix above it.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import lmdb

from fusecache import errors

if TYPE_CHECKING:
    from fusecache.nodecache import NodeCache
    from fusecache.s3store import S3Store

log = logging.getLogger(__name__)

KEY_FILE = "offline-auth.key"
_AT = struct.Struct("<d")
_TAG_BYTES = 16
# Refresh a record at most this often from ordinary traffic (one LMDB write).
_RECORD_EVERY = 30.0
# While the record answers a check, re-read it at most this often.
_GATE_RECHECK = 1.0


def load_key(cache_dir: Path) -> bytes:
    """The node's HMAC key, created (atomically, mode 0600) if absent."""
    path = Path(cache_dir) / KEY_FILE
    try:
        data = path.read_bytes()
        if len(data) == 32:
            return data
    except FileNotFoundError:
        pass
    tmp = path.with_name(f".{KEY_FILE}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, secrets.token_bytes(32))
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)  # fails if another process made it first: use theirs
    except FileExistsError:
        pass
    finally:
        tmp.unlink()
    data = path.read_bytes()
    if len(data) != 32:
        raise errors.ConfigError(f"{path} is not a fusecache offline-auth key (32 bytes)")
    return data


def credential_tag(key: bytes, access_key_id: str, endpoint: str = "") -> bytes:
    """The tag of a credential at one S3 endpoint: a bucket of another S3 service (a
    mount whose endpoint is missing or wrong, while that one is down) is another bucket
    (a new user's walkthrough, 2026-12-07: a MinIO bucket's cached copy was served for
    AWS's bucket of the same name)."""
    return hmac.new(key, b"fusecache offline auth\0" + access_key_id.encode() + b"\0"
                    + endpoint.rstrip("/").encode(), hashlib.sha256).digest()[:_TAG_BYTES]


def _ancestors(prefix: str) -> list[str]:
    """'' and each prefix of *prefix* ending in '/': 'a/b/' -> '', 'a/', 'a/b/'."""
    out = [""]
    parts = [p for p in prefix.split("/") if p]
    for i in range(len(parts)):
        out.append("/".join(parts[:i + 1]) + "/")
    return out


def _open_db(env: lmdb.Environment) -> object:
    """The records' database, opened inside a write transaction of our own: open_db
    without txn= begins one while holding the GIL, which deadlocked a prefetchd agent
    (its node publisher waited here for LMDB's write lock, held by a warm thread that
    waited for the GIL; see NodeCache.__init__)."""
    with env.begin(write=True) as txn:
        return env.open_db(b"offline_auth", txn=txn)


class OfflineAuth:
    """The records in the node cache. Methods block briefly (LMDB); thread-safe."""

    def __init__(self, env: lmdb.Environment, key: bytes,
                 clock: Callable[[], float] = time.time) -> None:
        self.env = env
        self._key = key
        self.clock = clock
        self._db = _open_db(env)

    def tag(self, access_key_id: str, endpoint: str = "") -> bytes:
        return credential_tag(self._key, access_key_id, endpoint)

    @staticmethod
    def _rec(tag: bytes, bucket: str, prefix: str) -> bytes:
        return tag + bucket.encode() + b"\0" + prefix.encode()

    def record(self, tag: bytes, bucket: str, prefix: str, when: float | None = None) -> None:
        when = self.clock() if when is None else when
        k = self._rec(tag, bucket, prefix)
        with self.env.begin(write=True, db=self._db) as txn:
            old = txn.get(k)
            if old is None or _AT.unpack(old)[0] < when:
                txn.put(k, _AT.pack(when))

    def revoke(self, tag: bytes, bucket: str, prefix: str) -> None:
        with self.env.begin(write=True, db=self._db) as txn:
            for p in _ancestors(prefix):
                txn.delete(self._rec(tag, bucket, p))

    def authorised_at(self, tag: bytes, bucket: str, prefix: str) -> float | None:
        """Newest record of *tag* for *prefix* or a prefix above it."""
        best: float | None = None
        with self.env.begin(db=self._db) as txn:
            for p in _ancestors(prefix):
                raw = txn.get(self._rec(tag, bucket, p))
                if raw is not None:
                    at = _AT.unpack(raw)[0]
                    best = at if best is None else max(best, at)
        return best


class OfflineGate:
    """One mount's question: may I serve s3://bucket/prefix from the cache without S3?"""

    def __init__(self, auth: OfflineAuth | None, access_key_id: str | None, bucket: str,
                 prefix: str, max_age: float, clock: Callable[[], float] = time.time,
                 on_refuse: Callable[[], None] | None = None, endpoint: str = "") -> None:
        self.auth = auth
        self.tag = None if auth is None or access_key_id is None \
            else auth.tag(access_key_id, endpoint)
        self.bucket = bucket
        self.prefix = prefix
        self.max_age = max_age
        self.clock = clock
        self._on_refuse = on_refuse
        self._ok_until = -1.0
        self._recorded = 0.0
        self._denied_seen = 0.0
        self._warned = False

    def _where(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    def age(self) -> float | None:
        """Seconds since S3 last authorised this credential here (None: never)."""
        if self.auth is None or self.tag is None:
            return None
        at = self.auth.authorised_at(self.tag, self.bucket, self.prefix)
        return None if at is None else max(0.0, self.clock() - at)

    def check(self) -> None:
        """Raise AccessDenied unless authorised within max_age. Reads LMDB at most once a
        second while allowed (cheap on the loop); every refusal re-reads."""
        now = self.clock()
        if now < self._ok_until:
            return
        try:
            age = self.age()
        except lmdb.Error as e:
            age = None
            log.warning("cannot read the offline-authorisation records: %s", e)
        if age is not None and age <= self.max_age:
            self._ok_until = min(now + _GATE_RECHECK, now + self.max_age - age)
            return
        if self._on_refuse is not None:
            self._on_refuse()
        if not self._warned:
            self._warned = True
            log.warning("S3 unreachable and %s: refusing to serve cached data of %s (EACCES)",
                        self.why_not(age), self._where())
        raise errors.AccessDenied(
            f"S3 unreachable and {self.why_not(age)}: not serving {self._where()} from the "
            "node cache")

    def why_not(self, age: float | None) -> str:
        if self.tag is None:
            return "this mount has no credential to check"
        if age is None:
            return "S3 never authorised this mount's credential for it on this node"
        return (f"S3 last authorised this mount's credential for it {age:.0f}s ago "
                f"(--offline-auth-max-age {self.max_age:g}s)")

    def sync(self, authorised_at: float, denied_at: float) -> None:
        """Record the S3Store's latest success or denial (from a worker thread)."""
        if self.auth is None or self.tag is None:
            return
        if denied_at > self._denied_seen:
            self._denied_seen = denied_at
            if denied_at >= authorised_at:
                self.auth.revoke(self.tag, self.bucket, self.prefix)
                self._ok_until = -1.0
                self._recorded = 0.0
                return
        if authorised_at > self._recorded + _RECORD_EVERY:
            self.auth.record(self.tag, self.bucket, self.prefix, authorised_at)
            self._recorded = authorised_at

    def refresh_interval(self) -> float:
        """How often an idle mount asks S3 again, so its record never ages out
        while S3 answers: a quarter of the max age, at most 10 minutes."""
        return max(1.0, min(600.0, self.max_age / 4))


def open_gate(env: lmdb.Environment, key_dir: Path, access_key_id: str | None, bucket: str,
              prefix: str, max_age: float,
              on_refuse: Callable[[], None] | None = None, endpoint: str = "") -> OfflineGate:
    """The gate of one mount; without a usable key it refuses every offline serve."""
    auth: OfflineAuth | None
    try:
        auth = OfflineAuth(env, load_key(key_dir))
    except (OSError, lmdb.Error, errors.ConfigError) as e:
        log.warning("offline-authorisation records unusable (%s): while S3 is unreachable "
                    "this mount will serve nothing from the node cache", e)
        auth = None
    return OfflineGate(auth, access_key_id, bucket, prefix, max_age, on_refuse=on_refuse,
                       endpoint=endpoint)


def record_authorised(cache: NodeCache, store: S3Store, bucket: str, prefix: str) -> bool:
    """Record that *store*'s credential read s3://bucket/prefix successfully (prefetchd,
    after a warm). A prefix not ending in '/' is recorded as the directory below it
    (narrower, never wider). Returns whether a record was written. Blocking."""
    if store.authorised_at <= 0:
        return False
    key_id = store.access_key_id
    if key_id is None:
        return False
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    try:
        auth = OfflineAuth(cache.env, load_key(cache.path.parent))
        auth.record(auth.tag(key_id, store.endpoint_url or ""), bucket, prefix,
                    store.authorised_at)
    except (OSError, lmdb.Error, errors.ConfigError) as e:
        log.warning("could not record the offline authorisation of s3://%s/%s: %s",
                    bucket, prefix, e)
        return False
    return True


def authorised_buckets(cache: NodeCache, limit: int = 64) -> list[str]:
    """The buckets some credential on this node was authorised to read (mounts and warms),
    at most *limit*, sorted: what the node's cache-group peers may serve it
    (prefetchd.k8s.group_watch publishes them). Blocking."""
    found: set[str] = set()
    db = _open_db(cache.env)
    with cache.env.begin(db=db) as txn:
        for raw in txn.cursor().iternext(keys=True, values=False):
            bucket = bytes(raw[_TAG_BYTES:]).split(b"\0", 1)[0].decode(errors="replace")
            if bucket:
                found.add(bucket)
            if len(found) >= limit:
                break
    return sorted(found)
