"""Directory listings in the node cache, shared by every mount and by prefetchd.

A prefix listed once (by any process on the node) is served from here while fresh,
so a remount or a second pod does not list S3 again: listing a dataset of a million
objects takes minutes, a lookup here takes microseconds.

Layout in the node cache's LMDB environment:

- ``dirs``     dir digest -> JSON {gen, at, n}       (the committed listing)
- ``dirents``  dir digest + gen (8 bytes) + name -> entry
- ``names``    digest of one key -> (confirmed at, entry): positive lookups made
               without a listing, so other mounts (and a mount while S3 is down)
               need not ask S3 again

One entry per key means a lookup is one get and a readdir a cursor walk from any
name, with no whole-listing value to load. A listing is written under a new
generation (its start time) page by page, in short transactions, then committed by
pointing ``dirs`` at it; older generations are swept afterwards. A writer that finds
a newer generation already committed discards its own.
"""

from __future__ import annotations

import hashlib
import json
import logging
import struct
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import lmdb

from fusecache.store import ObjectInfo

log = logging.getLogger(__name__)

_GEN = struct.Struct(">Q")
_ENTRY = struct.Struct("<BQd")  # is_dir, size, mtime; then the etag
_CHECKED = struct.Struct("<d")
_FLUSH_EVERY = 1000
_MAX_NAMES = 1_000_000  # ~100 MB of lookups remembered at most
_NAMES_CHECK = 1024
_SWEEP_CHUNK = 5000
_MAX_NAME = 255


def valid_name(name: str) -> bool:
    """Whether *name* can be a POSIX file name (non-empty, not . or .., <= 255 bytes)."""
    return bool(name) and name not in (".", "..") and "\0" not in name \
        and len(name.encode("utf-8", "surrogateescape")) <= _MAX_NAME


def _name_key(bucket: str, key: str) -> bytes:
    return hashlib.blake2b(f"{bucket}\0{key}".encode(), digest_size=20).digest()


def dir_digest(bucket: str, prefix: str) -> bytes:
    return hashlib.blake2b(f"{bucket}\0{prefix}".encode(), digest_size=16).digest()


@dataclass(frozen=True, slots=True)
class DirEntry:
    name: str
    is_dir: bool
    size: int = 0
    etag: str = ""
    mtime: float = 0.0


@dataclass(frozen=True, slots=True)
class DirRecord:
    gen: int
    listed_at: float
    count: int


def _pack(e: DirEntry) -> bytes:
    return _ENTRY.pack(1 if e.is_dir else 0, e.size, e.mtime) + e.etag.encode()


def _record(raw: bytes) -> DirRecord:
    d = json.loads(raw)
    return DirRecord(d["gen"], d["at"], d["n"])


def _entries_base(digest: bytes, gen: int) -> bytes:
    """The key prefix of a listing's entries: its directory's digest and generation."""
    return digest + _GEN.pack(gen)


def _unpack(name: str, raw: bytes) -> DirEntry:
    is_dir, size, mtime = _ENTRY.unpack_from(raw)
    return DirEntry(name, bool(is_dir), size, bytes(raw[_ENTRY.size:]).decode(), mtime)


class ListingCache:
    """Listings per (bucket, prefix). Methods block briefly; call from a thread."""

    def __init__(self, env: lmdb.Environment,
                 clock: Callable[[], float] = time.time) -> None:
        self.env = env
        self.clock = clock  # wall-clock seconds: records are shared between processes
        # inside a write transaction of our own: see NodeCache.__init__ (open_db without
        # txn= holds the GIL while waiting for LMDB's write lock)
        with env.begin(write=True) as txn:
            self._dirs = env.open_db(b"dirs", txn=txn)
            self._ents = env.open_db(b"dirents", txn=txn)
            self._names = env.open_db(b"names", txn=txn)
        self._puts = 0

    def get_dir(self, bucket: str, prefix: str) -> DirRecord | None:
        with self.env.begin(db=self._dirs) as txn:
            raw = txn.get(dir_digest(bucket, prefix))
        return None if raw is None else _record(raw)

    def index_dbs(self) -> list[object]:
        """The databases a lookup reads (for indexwarm.IndexWarmer)."""
        return [self._dirs, self._ents, self._names]

    def find(self, bucket: str, prefix: str, name: str
             ) -> tuple[DirRecord | None, DirEntry | None]:
        """The directory's record and *name*'s entry in that listing, in one read
        transaction: a lookup's hot path (get_dir then lookup cost two)."""
        digest = dir_digest(bucket, prefix)
        with self.env.begin() as txn:
            raw = txn.get(digest, db=self._dirs)
            if raw is None:
                return None, None
            rec = _record(raw)
            ent = txn.get(_entries_base(digest, rec.gen) + name.encode(), db=self._ents)
        return rec, None if ent is None else _unpack(name, ent)

    def lookup(self, bucket: str, prefix: str, rec: DirRecord, name: str) -> DirEntry | None:
        key = _entries_base(dir_digest(bucket, prefix), rec.gen) + name.encode()
        with self.env.begin(db=self._ents) as txn:
            raw = txn.get(key)
        return None if raw is None else _unpack(name, raw)

    def entries(self, bucket: str, prefix: str, rec: DirRecord, after: str | None = None,
                limit: int = 1000) -> list[DirEntry]:
        """Up to *limit* entries in name (byte) order, strictly after *after*."""
        base = _entries_base(dir_digest(bucket, prefix), rec.gen)
        start = base + (after.encode() + b"\0" if after is not None else b"")
        out: list[DirEntry] = []
        with self.env.begin(db=self._ents) as txn:
            cur = txn.cursor()
            if not cur.set_range(start):
                return out
            for key, raw in cur:
                if not key.startswith(base) or len(out) >= limit:
                    break
                out.append(_unpack(key[len(base):].decode(), raw))
        return out

    # -- single names (positive lookups), shared between mounts --------------------

    def put_name(self, bucket: str, key: str, entry: DirEntry) -> None:
        """Remember that *key* exists (a directory key ends in '/'), with when.

        The table is an optimisation only, so it is kept bounded the blunt way:
        past _MAX_NAMES entries it is emptied (checked every _NAMES_CHECK puts).
        """
        self._puts += 1
        with self.env.begin(write=True, db=self._names) as txn:
            if self._puts % _NAMES_CHECK == 0 and \
                    txn.stat(self._names)["entries"] >= _MAX_NAMES:
                log.info("positive-lookup table reached %d entries; emptying it", _MAX_NAMES)
                txn.drop(self._names, delete=False)
            txn.put(_name_key(bucket, key), _CHECKED.pack(self.clock()) + _pack(entry))

    def forget_name(self, bucket: str, key: str) -> None:
        """Drop what is remembered of *key* (seen changed on the server)."""
        with self.env.begin(write=True, db=self._names) as txn:
            txn.delete(_name_key(bucket, key))

    def get_name(self, bucket: str, key: str, name: str) -> tuple[DirEntry, float] | None:
        """The remembered entry for *key* and when it was confirmed, if any."""
        with self.env.begin(db=self._names) as txn:
            raw = txn.get(_name_key(bucket, key))
        if raw is None:
            return None
        return _unpack(name, raw[_CHECKED.size:]), _CHECKED.unpack_from(raw)[0]

    def writer(self, bucket: str, prefix: str) -> ListingWriter:
        return ListingWriter(self, bucket, prefix)

    def invalidate(self, bucket: str, prefix: str) -> None:
        with self.env.begin(write=True, db=self._dirs) as txn:
            txn.delete(dir_digest(bucket, prefix))

    def store_recursive(self, bucket: str, prefix: str, objects: Iterable[ObjectInfo],
                        skipped: Callable[[str], None] | None = None) -> int:
        """Store the listing of every directory under *prefix* from a flat listing.

        *objects* is a recursive (no delimiter) listing of *prefix*, as prefetchd and
        a mount's whole-tree listing make it. What each directory shows is what a
        listing of it with a delimiter would: a folder marker (``a/``) makes a folder,
        and a key with a name no POSIX path can have (``a//x``, ``.``, 256 bytes) is
        left out from that name on, its folders up to there kept. Returns the number
        of directories written; *skipped* is told each key left out so.
        """
        writers: dict[str, ListingWriter] = {}
        subdirs: dict[str, set[str]] = {}

        def writer_for(p: str) -> ListingWriter:
            w = writers.get(p)
            if w is None:
                w = writers[p] = self.writer(bucket, p)
                subdirs[p] = set()
            return w

        writer_for(prefix)
        for obj in objects:
            rel = obj.key[len(prefix):]
            if not rel:
                continue  # the marker of *prefix* itself
            *folders, leaf = rel.split("/")
            cur, whole = prefix, True
            for part in folders:
                if not valid_name(part):
                    whole = False
                    break
                if part not in subdirs[cur]:
                    subdirs[cur].add(part)
                    writers[cur].add(DirEntry(part, True))
                cur = cur + part + "/"
                writer_for(cur)
            if whole and valid_name(leaf):  # leaf "": a folder marker, no file
                writers[cur].add(DirEntry(leaf, False, obj.size, obj.etag, obj.mtime))
            elif skipped is not None and (not whole or leaf):
                skipped(obj.key)
        for w in writers.values():
            w.commit()
        if writers[prefix].count:
            self._put_ancestors(bucket, prefix)
        return len(writers)

    def _put_ancestors(self, bucket: str, prefix: str) -> None:
        """A non-empty *prefix* proves its ancestors are directories: remember them, so
        that a mount's first lookup of a warmed dataset's path asks S3 nothing."""
        parts = prefix.rstrip("/").split("/")
        for i, name in enumerate(parts):
            if valid_name(name):
                self.put_name(bucket, "/".join(parts[:i + 1]) + "/", DirEntry(name, True))


class ListingWriter:
    """Collects one directory's entries and commits them as a new generation."""

    def __init__(self, cache: ListingCache, bucket: str, prefix: str) -> None:
        self.cache = cache
        self.digest = dir_digest(bucket, prefix)
        self.gen = time.time_ns()
        self._base = _entries_base(self.digest, self.gen)
        self._buf: list[DirEntry] = []
        self.count = 0

    def add(self, entry: DirEntry) -> None:
        self._buf.append(entry)
        if len(self._buf) >= _FLUSH_EVERY:
            self.flush()

    def add_many(self, entries: Iterable[DirEntry]) -> None:
        for e in entries:
            self.add(e)

    def flush(self) -> None:
        if not self._buf:
            return
        with self.cache.env.begin(write=True, db=self.cache._ents) as txn:
            for e in self._buf:
                # A directory shadows a file of the same name (as Mountpoint does).
                if txn.put(self._base + e.name.encode(), _pack(e), overwrite=e.is_dir):
                    self.count += 1
        self._buf.clear()

    def commit(self) -> bool:
        """Publish this listing; False if a newer one was committed meanwhile."""
        self.flush()
        with self.cache.env.begin(write=True, db=self.cache._dirs) as txn:
            raw = txn.get(self.digest)
            current = json.loads(raw)["gen"] if raw else -1
            newer = current > self.gen
            if not newer:
                txn.put(self.digest, json.dumps(
                    {"gen": self.gen, "at": self.cache.clock(), "n": self.count}).encode())
        self._sweep(keep=current if newer else self.gen)
        return not newer

    def _sweep(self, keep: int) -> None:
        """Delete this directory's generations older than *keep*, in short txns.

        Newer generations are left alone: they belong to a writer still at work.
        """
        stop = _entries_base(self.digest, keep)
        while True:
            n = 0
            with self.cache.env.begin(write=True, db=self.cache._ents) as txn:
                cur = txn.cursor()
                ok = cur.set_range(self.digest)
                while ok and n < _SWEEP_CHUNK and cur.key() < stop:
                    ok = cur.delete()
                    n += 1
            if n < _SWEEP_CHUNK:
                return
