"""The node cache: one LMDB environment per cache dir, shared by every process on the node.

Who uses it: each ``fusecache mount`` (through ``reader.BlockReader``), prefetchd
(to fill and pin), ``fusecache stats`` and the CSI plugin. Every process opens the
same environment; LMDB serialises writers across processes with its lock file and
gives readers a consistent snapshot without locks.

Layout (named databases in one environment):

- ``blocks``  block key -> the block's bytes (blocks shorter than a slot, see below)
- ``bmeta``   block key -> (last access ns, length, crc32), then for a block larger than
               GRANULE the crc32 of each of its granules (``get_range``)
- ``boffs``   block key -> offset of the block's bytes in data.mdb (read with pread)
- ``bslot``   block key -> slot (8 bytes) in ``slots.dat`` holding the block's bytes
- ``freeslots`` slot (8 bytes, big-endian) -> b''    (slots below ``slots`` holding nothing)
- ``lru``     access ns (8 bytes, big-endian) + block key -> b''   (eviction order)
- ``pins``    object digest or block key -> JSON {owner: expiry (0 = never)}
- ``objects`` object digest -> JSON {bucket, key, etag, size}       (for status)
- ``meta``    format version, used bytes, limit, slots, shared counters

A full block of the cache's own block size (the bulk of the bytes: every block of a
large object but its last) is not an LMDB value: its bytes lie in one slot of
``slots.dat`` beside data.mdb, written past the page cache (``slots.py`` says why), and
``bslot`` says which. Everything else (small files, last blocks, blocks of another block
size) is a value in ``blocks``. A cache created before slots existed (no ``slots`` in
``meta``) keeps every block an LMDB value: its data.mdb has grown to its bound already and
never shrinks, so slots beside it would take up to twice the disk the bound allows.
Removing its directory starts a cache with slots.

A block key is ``digest(bucket, key, etag, size)[16] + block size[4] + index[4]``, so a
changed object (new ETag) can never be served from an old block, and mounts with
different block sizes never mix blocks.

Invariants:
- ``used`` in ``meta`` equals the sum of the lengths in ``bmeta``: every put and every
  eviction updates both in the same write transaction.
- Every block in ``bmeta`` has its bytes in ``blocks`` or in a slot (``bslot``), never
  both; a slot belongs to at most one block, and a slot below ``slots`` that none holds
  is in ``freeslots``. A slot is taken and written in the transaction that records its
  block, so a process killed before the commit leaves it free.
- Writes are short transactions (a block, or the few a mount's write-behind has queued,
  at most 16 MiB, plus the evictions they need, scanning at most ``_MAX_EVICT_SCAN`` LRU
  entries per block) so no process waits long on another.
- Pinned blocks are never evicted; a put that cannot make room without evicting
  pinned data is refused (returns False).
- Reads verify the crc32 and the length; a bad block is deleted and reported as a
  miss, so wrong bytes are never returned. A recorded offset is only a hint: bytes
  read there that fail the crc32 are read again through the map before judging. A
  slot read that fails it is a miss without blame when the block no longer holds that
  slot (evicted, the slot written again, while the read was under way).
- Access times of hits are recorded in memory and written in batches
  (``flush_touches``), so a cache hit never takes the write lock.

Durability: opened with ``sync=False``; a killed process never leaves a half-written
block (LMDB commits are atomic), a power loss may lose the last commits. A file that
cannot be opened or has another format is moved aside and a fresh cache created.

Failpoints (tests only; off by default): ``FUSECACHE_FAILPOINT=SITE:N``, read once at
import, makes the process SIGKILL itself when the Nth block reaches SITE (the blocks of
one write transaction reach it together), so a test can kill -9 a mount or a warm at a
chosen point of a cache write. Sites: ``put:begin`` (write transaction open, nothing
written), ``put:data`` (block bytes written, not its metadata), ``put:commit``
(everything written, not committed), ``put:committed`` (committed, offset not recorded),
``evict:delete`` (one block evicted in an uncommitted transaction), ``offset:commit``,
``touch:commit``. Unset, each site costs one test of a module global against None.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import os
import signal
import struct
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import lmdb

# The same CRC-32 as the stdlib's zlib.crc32 (stored checksums stay valid), computed
# with carry-less multiply: measured on this 2-core VM, 12 ms per 64 MiB against 79 ms
# for Debian's zlib 1.2.13, on every block read from and written to the cache.
from zlib_ng.zlib_ng import crc32 as _crc32

from fusecache import errors, slots
from fusecache.slots import SlotFile

log = logging.getLogger(__name__)


def _parse_failpoint(spec: str | None) -> tuple[str, int] | None:
    if not spec:
        return None
    site, _, n = spec.rpartition(":")
    if not site or not n.isdigit() or int(n) < 1:
        log.warning("ignoring FUSECACHE_FAILPOINT=%r (expected SITE:N, N >= 1)", spec)
        return None
    return site, int(n)


_FAILPOINT = _parse_failpoint(os.environ.get("FUSECACHE_FAILPOINT"))
_FAILPOINT_HITS = [0]
_FAILPOINT_LOCK = threading.Lock()


def _failpoint(site: str, blocks: int = 1) -> None:
    """SIGKILL this process when the Nth block reaches the configured site (see the
    docstring); *blocks* reach it together (one transaction of several blocks)."""
    assert _FAILPOINT is not None
    if site != _FAILPOINT[0] or blocks < 1:
        return
    with _FAILPOINT_LOCK:
        before = _FAILPOINT_HITS[0]
        _FAILPOINT_HITS[0] += blocks
        if before < _FAILPOINT[1] <= _FAILPOINT_HITS[0]:
            os.kill(os.getpid(), signal.SIGKILL)

FORMAT = b"fusecache-node-cache-1"
_ENV_DIR = "cache.lmdb"
_MAX_EVICT_SCAN = 4096
# the share of its file system the node cache leaves free (a kubelet's default eviction
# threshold is nodefs.available < 10%): the cache stops short of it and gives space back
FREE_SPACE_FLOOR = 0.10
_MAX_PENDING_TOUCHES = 65536
_UNMAP_EVERY = 64 << 20  # bytes read through the map between two unmaps
_PREAD_MIN = 8 << 10  # blocks at least this big are read with pread (see _record_offsets)
_MAX_FILE_OFFSET = 1 << 50
_MADV_DONTNEED = 4
_PAGE = os.sysconf("SC_PAGE_SIZE")
_RWF_NOWAIT = getattr(os, "RWF_NOWAIT", 8)
_BMETA = struct.Struct("<QII")  # atime ns, length, crc32; then the granules' crc32s
# A block larger than this is also checked granule by granule (its granules' crc32s follow
# its own in bmeta), so a random small read of a big cached file reads and checks the
# granules it asks for, not the whole block: 1,000 random 4 KiB reads of a 500 MB file read
# 6 GiB from the node cache (blind data-format test: LMDB and np.load(mmap_mode='r')
# datasets 4-13x slower than local disk). 128 KiB: one FUSE read.
GRANULE = 128 << 10
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_SLOT = struct.Struct(">Q")  # freeslots keys: big-endian, so the lowest slot comes first
_ATIME = struct.Struct(">Q")
_BKEY_TAIL = struct.Struct(">II")  # block size, index
# The map is a reservation of address space, not disk: 1 TiB, or twice the limit
# when someone asks for more. All openers must agree on "at least the file size".
_DEFAULT_MAP_SIZE = 1 << 40
# 8 MiB: measured on 2 cores, a cold sequential read moved 458 MB/s at 1.06 CPU-s
# per 512 MiB with 8 MiB blocks vs 303 MB/s at 1.63 CPU-s with 4 MiB (half the
# GETs and cache transactions); Mountpoint uses 8 MiB parts for the same reason.
DEFAULT_BLOCK_SIZE = 8 << 20

COUNTERS = ("ram_hits", "ram_misses", "disk_hits", "disk_misses", "s3_bytes", "s3_gets",
            "evictions", "integrity_errors", "write_dropped", "s3_retries",
            # the cache group (peer_client.py, peer_server.py)
            "peer_hits", "peer_misses", "peer_bytes", "peer_fallbacks", "peer_blocks_served",
            "peer_bytes_served")


@dataclass(frozen=True)
class ObjectId:
    """The identity of an object's bytes: where it is and which version (ETag)."""

    bucket: str
    key: str
    etag: str
    size: int

    @cached_property
    def digest(self) -> bytes:
        h = hashlib.blake2b(digest_size=16)
        h.update(f"{self.bucket}\0{self.key}\0{self.etag}\0{self.size}".encode())
        return h.digest()

    def block_count(self, block_size: int) -> int:
        """Number of blocks; an empty object has none, a small one exactly one."""
        return (self.size + block_size - 1) // block_size

    def block_span(self, index: int, block_size: int) -> tuple[int, int]:
        """Byte range [start, end) of block *index*."""
        start = index * block_size
        return start, min(self.size, start + block_size)


def block_key(oid: ObjectId, index: int, block_size: int) -> bytes:
    return oid.digest + _BKEY_TAIL.pack(block_size, index)


@dataclass(frozen=True)
class CacheStats:
    """A snapshot of the node cache, shared by all processes."""

    path: str
    used_bytes: int
    limit_bytes: int
    blocks: int
    objects: int
    pinned_entries: int
    file_bytes: int
    counters: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {
            "path": self.path, "used_bytes": self.used_bytes, "limit_bytes": self.limit_bytes,
            "blocks": self.blocks, "objects": self.objects,
            "pinned_entries": self.pinned_entries, "file_bytes": self.file_bytes,
            **self.counters,
        }


class NodeCache:
    """The node cache: LMDB, and the slot file for full blocks. Thread-safe; every method
    blocks briefly (call from a thread)."""

    def __init__(self, env: lmdb.Environment, path: Path, limit_bytes: int,
                 block_size: int, slot_size: int | None = None,
                 direct_slot_writes: bool = False) -> None:
        self.env = env
        self.path = path
        self.limit_bytes = limit_bytes
        # LMDB reuses freed pages only once no reader can still see them, and a
        # transaction cannot reuse what it frees itself, so the file runs a few
        # blocks ahead of the live data (measured: 48 MiB file for a 24 MiB limit
        # with 8 MiB blocks). Filling to limit - 2 blocks keeps the file itself
        # within about the limit (tiny caches of under 8 blocks fill to the limit).
        headroom = 2 * block_size if limit_bytes >= 8 * block_size else 0
        self._fill_limit = limit_bytes - headroom
        self.block_size = block_size
        # Named databases are opened inside a write transaction of our own: py-lmdb's
        # open_db without txn= begins one while holding the GIL, which deadlocks against
        # another thread of this process that holds the write lock and waits for the GIL
        # (seen: the prefetchd agent's publisher opening the cache during a warm).
        with env.begin(write=True) as txn:
            self._blocks = env.open_db(b"blocks", txn=txn)
            self._bmeta = env.open_db(b"bmeta", txn=txn)
            # Where each block's bytes lie in data.mdb, recorded right after the block is
            # stored (see _record_offsets). Absent for a block: it is read through the map.
            self._boffs = env.open_db(b"boffs", txn=txn)
            self._bslot = env.open_db(b"bslot", txn=txn)
            self._freeslots = env.open_db(b"freeslots", txn=txn)
            self._lru = env.open_db(b"lru", txn=txn)
            self._pins = env.open_db(b"pins", txn=txn)
            self._objects = env.open_db(b"objects", txn=txn)
            self._meta = env.open_db(b"meta", txn=txn)
        self._lock = threading.Lock()
        self._floor_warned = False
        self._pending_touch: OrderedDict[bytes, int] = OrderedDict()
        self._mapped_since = 0
        self._closed = False
        # this process's mapping of data.mdb (_map_span), looked up again if a value
        # lies outside it (remapped)
        self._map: tuple[int, int, int] | None = None
        self._pending_offsets: OrderedDict[bytes, int] = OrderedDict()
        try:
            self._data_fd: int | None = os.open(path / "data.mdb", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self._data_fd = None
        # the cache's own block size: its full blocks go to slots (None: none do)
        self._slots = SlotFile.open(path, slot_size, direct_slot_writes) if slot_size else None

    def own_block_size(self) -> int:
        """The block size the cache was made with (what a mount uses unless told another)."""
        with self.env.begin(db=self._meta) as txn:
            raw = txn.get(b"block_size")
        return _U64.unpack(raw)[0] if raw else self.block_size

    # -- opening ---------------------------------------------------------------

    @classmethod
    def open(cls, cache_dir: str | os.PathLike, *, limit_bytes: int | None = None,
             block_size: int | None = None, direct_slot_writes: bool = False) -> NodeCache:
        """Open (or create) the node cache in *cache_dir*.

        *block_size* None means the cache's own (set when it was created,
        DEFAULT_BLOCK_SIZE for a new one), so a mount and prefetchd that do not
        say otherwise share blocks. Another value works (keys carry the block
        size) but does not share blocks with users of the cache's own size.

        A corrupt or incompatible environment is moved aside (``cache.lmdb.bad-<ts>``)
        with a warning and a fresh one created. Raises ``errors.CacheUnavailable`` when
        the directory cannot be created or written.

        *direct_slot_writes*: write full blocks' slots past the page cache (the mount;
        slots.py says when that pays).
        """
        root = Path(cache_dir)
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise CacheUnavailable(f"cannot create cache dir {root}: {e.strerror}") from None
        if not os.access(root, os.W_OK | os.X_OK):
            raise CacheUnavailable(f"cache dir {root} is not writable")
        path = root / _ENV_DIR
        error: BaseException
        try:
            env = _acquire_env(path, limit_bytes)
        except lmdb.Error as e:
            error = e
        else:
            try:
                return cls._init(env, path, limit_bytes, block_size, direct_slot_writes)
            except (lmdb.Error, struct.error, IncompatibleCache) as e:
                if _release_env(path):  # others in this process use it: not ours to move
                    raise CacheUnavailable(f"cache {path} not usable: {e}") from None
                error = e
        if not isinstance(error, _DAMAGE + (IncompatibleCache,)):
            # Disk full, read-only, permissions, I/O errors: the file may be
            # fine, so keep it and run without the disk tier.
            raise CacheUnavailable(f"cache {path} not usable: {error}") from None
        aside = path.with_name(f"{_ENV_DIR}.bad-{int(time.time())}")
        log.warning("node cache %s is corrupt or incompatible (%s); moved it to %s "
                    "and starting a fresh cache", path, error, aside)
        try:
            os.replace(path, aside)
        except OSError as e2:
            raise CacheUnavailable(f"cannot move aside bad cache {path}: {e2}") from None
        env = _acquire_env(path, limit_bytes)
        try:
            return cls._init(env, path, limit_bytes, block_size, direct_slot_writes)
        except BaseException:
            _release_env(path)
            raise

    @classmethod
    def _init(cls, env: lmdb.Environment, path: Path, limit_bytes: int | None,
              block_size: int | None, direct_slot_writes: bool = False) -> NodeCache:
        with env.begin(write=True) as txn:  # open_db with txn=: see __init__
            meta = env.open_db(b"meta", txn=txn)
        with env.begin(write=True, db=meta) as txn:
            fmt = txn.get(b"format")
            if fmt is None:
                if env.stat()["entries"] > 1:  # other databases but no marker: not ours
                    raise IncompatibleCache("no fusecache format marker")
                txn.put(b"format", FORMAT)
                txn.put(b"used", _U64.pack(0))
                txn.put(b"slots", _U64.pack(0))  # this cache keeps full blocks in slots
            elif fmt != FORMAT:
                raise IncompatibleCache(f"format {fmt!r}, expected {FORMAT!r}")
            raw_bs = txn.get(b"block_size")
            if raw_bs is None:
                raw_bs = _U64.pack(block_size or DEFAULT_BLOCK_SIZE)
                txn.put(b"block_size", raw_bs)
            if block_size is None:
                block_size = _U64.unpack(raw_bs)[0]
            elif block_size != _U64.unpack(raw_bs)[0]:
                log.info("using block size %d; the node cache's own is %d (blocks are not "
                         "shared between the two)", block_size, _U64.unpack(raw_bs)[0])
            lowered = False
            if limit_bytes is not None:
                raw = txn.get(b"limit")
                lowered = raw is not None and limit_bytes < _U64.unpack(raw)[0]
                txn.put(b"limit", _U64.pack(limit_bytes))
            else:
                raw = txn.get(b"limit")
                limit_bytes = _U64.unpack(raw)[0] if raw else 20 << 30
            with_slots = txn.get(b"slots") is not None
        # Readers left behind by killed processes pin old pages; clear them now.
        env.reader_check()
        cache = cls(env, path, limit_bytes, block_size,
                    _U64.unpack(raw_bs)[0] if with_slots else None, direct_slot_writes)
        if lowered:
            cache.trim()
        return cache

    def close(self) -> None:
        if not self._closed:
            try:
                self.flush_touches()
            except lmdb.Error as e:
                log.warning("could not record access times on close: %s", e)
            self._closed = True
            if self._data_fd is not None:
                os.close(self._data_fd)
                self._data_fd = None
            if self._slots is not None:
                self._slots.close()
            _release_env(self.path)

    # -- blocks ----------------------------------------------------------------

    def block_key(self, oid: ObjectId, index: int) -> bytes:
        return block_key(oid, index, self.block_size)

    def get_block(self, oid: ObjectId, index: int, *, nowait: bool = False,
                  into: bytearray | None = None) -> bytes | bytearray | None:
        """The verified bytes of a cached block, or None (miss or bad block).

        With *nowait*, only bytes already in the page cache are read (one
        ``preadv2(RWF_NOWAIT)``): a block that would wait for the disk raises
        ``NotInMemory`` instead, so the caller can read it in a thread while it
        serves others (see reader._block_nowait).

        *into*: a buffer of exactly the block's length to read into (the mount reuses
        the buffers of blocks its RAM tier let go; a fresh 8 MiB buffer costs 2,048
        page faults). The result is then *into* itself, or other bytes when the block
        had to be read through the map; *into* is not kept either way.
        """
        got = self.get_block_crc(oid, index, nowait=nowait, into=into)
        return None if got is None else got[0]

    def index_dbs(self) -> list[object]:
        """The databases a read looks a block up in (for indexwarm.IndexWarmer)."""
        return [self._bmeta, self._boffs]

    def get_block_crc(self, oid: ObjectId, index: int, *, nowait: bool = False,
                      into: bytearray | None = None,
                      ) -> tuple[bytes | bytearray, int] | None:
        """(verified bytes, their crc32) of a cached block, or None (miss or bad block).

        The crc32 is the stored one the bytes were just checked against, so a caller that
        passes it on (the peer server) need not compute it again. *nowait* and *into* as in
        get_block.
        """
        key = self.block_key(oid, index)
        start, end = oid.block_span(index, self.block_size)
        slot = None
        with self.env.begin(buffers=True) as txn:
            raw = txn.get(key, db=self._bmeta)
            if raw is None:
                return None
            _, length, crc = _BMETA.unpack_from(bytes(raw))
            raw_slot = txn.get(key, db=self._bslot)
            if raw_slot is not None:
                slot = _U64.unpack(bytes(raw_slot))[0]
            elif nowait:
                data = self._pread_nowait(txn.get(key, db=self._boffs), length)
            else:
                data = self._pread(txn.get(key, db=self._boffs), length, into)
            mapped = slot is None and (data is None or _crc32(data) != crc)
            heal = None
            if mapped and nowait:  # the map may fault in from disk: the caller's thread
                raise NotInMemory(key)
            if mapped:  # no recorded place, or it disagrees: read through the map
                buf = txn.get(key, db=self._blocks)
                data = bytes(buf) if buf is not None else b""
                if len(data) >= _PREAD_MIN:
                    heal = self._file_offset(_buffer_address(buf))
        if slot is not None:  # outside the transaction: a disk read holds no reader slot
            data = self._read_slot(key, slot, length, nowait, into)
            if data is None:
                return None
        # bytes read from a slot are checked here; from data.mdb, above (or here if mapped)
        ok = length == len(data) == end - start and (
            _crc32(data) == crc if slot is not None or mapped else True)
        if not ok and nowait:  # judged by the verifying read, in a thread: a drop writes
            raise NotInMemory(key)
        if not ok and slot is not None and self._slot_of(key) != slot:
            return None  # the block left that slot while it was read: a plain miss
        if not ok:
            log.warning("cached block %d of s3://%s/%s failed verification; dropping it",
                        index, oid.bucket, oid.key)
            self._drop(key)
            return None
        self._touched(key, heal)
        if mapped:
            self._count_mapped(len(data))
        return data, crc

    def get_range(self, oid: ObjectId, index: int, lo: int, hi: int) -> bytes | None:
        """Bytes [lo, hi) of a cached block, read and checked granule by granule
        (``GRANULE``): a random 4 KiB read costs one granule, not the block. None when
        the block is not cached, has no granule checksums (stored by an earlier version, or
        no larger than one), has no place to pread from, or a granule does not check (its
        slot was taken meanwhile, or the bytes are bad): the caller then reads the whole
        block, which judges it."""
        key = self.block_key(oid, index)
        with self.env.begin(buffers=True) as txn:
            raw = txn.get(key, db=self._bmeta)
            if raw is None or len(raw) <= _BMETA.size:
                return None
            meta = bytes(raw)
            place = self._place(txn, key)
        length = _BMETA.unpack_from(meta)[1]
        granules = memoryview(meta)[_BMETA.size:]
        if place is None or len(granules) != 4 * -(-length // GRANULE) \
                or not 0 <= lo < hi <= length:
            return None
        g0, g1 = lo // GRANULE, -(-hi // GRANULE)
        start, end = g0 * GRANULE, min(length, g1 * GRANULE)
        in_slots, off = place
        fd = self._slots.read_fd if in_slots and self._slots is not None else self._data_fd
        if fd is None:
            return None
        data = _read_exact(fd, off + start, end - start)
        if data is None:
            return None
        view = memoryview(data)
        for g in range(g0, g1):
            part = view[(g - g0) * GRANULE:(g - g0 + 1) * GRANULE]
            if _crc32(part) != _U32.unpack_from(granules, 4 * g)[0]:
                return None
        self._touched(key)
        return bytes(view[lo - start:hi - start])

    def _touched(self, key: bytes, heal: int | None = None) -> None:
        """A block was read: its access time (and, *heal*, where it lies in data.mdb) for
        the next flush_touches, bounded."""
        with self._lock:
            self._pending_touch[key] = time.time_ns()
            self._pending_touch.move_to_end(key)
            if len(self._pending_touch) > _MAX_PENDING_TOUCHES:
                self._pending_touch.popitem(last=False)
            if heal is not None:  # record it with the access times (flush_touches)
                self._pending_offsets[key] = heal
                if len(self._pending_offsets) > _MAX_PENDING_TOUCHES:
                    self._pending_offsets.popitem(last=False)

    def _read_slot(self, key: bytes, slot: int, length: int, nowait: bool,
                   into: bytearray | None) -> bytes | bytearray | None:
        """A slot's bytes (checked by the caller), b"" when they cannot be read (the
        caller then judges the block), None when this process has no slot file."""
        if self._slots is None:
            return None
        fd, off = self._slots.read_fd, self._slots.offset(slot)
        data = (_read_cached(fd, off, length, key) if nowait
                else _read_exact(fd, off, length, into))
        return b"" if data is None else data

    def _slot_of(self, key: bytes) -> int | None:
        with self.env.begin(db=self._bslot) as txn:
            raw = txn.get(key)
        return None if raw is None else _U64.unpack(raw)[0]

    def block_location(self, oid: ObjectId, index: int) -> tuple[Path, int, int] | None:
        """(file, offset, length) of a cached block's bytes where a read finds them, None
        when not cached or not yet placed (tests drop exactly these pages)."""
        key = self.block_key(oid, index)
        with self.env.begin(buffers=True) as txn:
            raw = txn.get(key, db=self._bmeta)
            if raw is None:
                return None
            length = _BMETA.unpack_from(bytes(raw))[1]
            place = self._place(txn, key)
        if place is None:
            return None
        in_slots, off = place
        return (self._slots.path if in_slots and self._slots is not None
                else self.path / "data.mdb"), off, length

    def _place(self, txn: Any, key: bytes) -> tuple[bool, int] | None:
        """(in the slot file?, offset in that file) where a block's bytes are read with
        pread, inside a read transaction; None when it has no such place (not cached, not
        yet placed, or no file open for it in this process)."""
        raw_slot = txn.get(key, db=self._bslot)
        if raw_slot is not None:
            if self._slots is None:
                return None
            return True, self._slots.offset(_U64.unpack(bytes(raw_slot))[0])
        raw = txn.get(key, db=self._boffs)
        if raw is None or self._data_fd is None:
            return None
        return False, _U64.unpack(bytes(raw))[0]

    def _count_mapped(self, nbytes: int) -> None:
        """Every _UNMAP_EVERY bytes touched through the map, unmap what was touched."""
        with self._lock:
            self._mapped_since += nbytes
            release = self._mapped_since > _UNMAP_EVERY
            if release:
                self._mapped_since = 0
        if release:
            self._release_mapped_pages()

    def _release_mapped_pages(self) -> None:
        """Drop this process's mappings of pages already copied out of the map.

        Every value read through LMDB's memory map stays mapped into this process
        and counts in its RSS (measured: 520 MiB of file pages after streaming a
        512 MiB object), which is what the OOM killer weighs. MADV_DONTNEED on a
        shared read-only file mapping only unmaps: the data stays in the page
        cache and a later read faults it back in (a minor fault).
        """
        span = _map_span(self.path / "data.mdb")
        if span is not None:
            _unmap(span[0], span[1] - span[0])

    def contains_block(self, oid: ObjectId, index: int) -> bool:
        with self.env.begin(db=self._bmeta) as txn:
            return txn.get(self.block_key(oid, index)) is not None

    def lacking_first_blocks(self, oids: Iterable[ObjectId]) -> list[ObjectId]:
        """The objects whose block 0 is not cached (one read transaction)."""
        with self.env.begin(db=self._bmeta) as txn:
            return [o for o in oids if txn.get(self.block_key(o, 0)) is None]

    def advise_first_blocks(self, oids: Iterable[ObjectId]) -> int:
        """Ask these objects' first blocks into the page cache where they are held
        (``POSIX_FADV_WILLNEED`` at their recorded offsets, one read transaction: the
        kernel starts the reads and returns), so that a reader about to open one finds it
        in memory and is served on the mount's loop (``get_block(nowait=True)``), or waits
        for a read already under way. Only a hint: nothing happens without a recorded
        offset. Returns how many were asked for."""
        asked = 0
        with self.env.begin(buffers=True) as txn:
            for oid in oids:
                start, end = oid.block_span(0, self.block_size)
                try:
                    place = self._place(txn, self.block_key(oid, 0))
                    if place is None:
                        continue
                    in_slots, off = place
                    fd = self._slots.read_fd if in_slots and self._slots else self._data_fd
                    os.posix_fadvise(fd, off, end - start, os.POSIX_FADV_WILLNEED)
                except (OSError, struct.error, OverflowError, ValueError):
                    # (a recorded offset no file has, from a damaged environment: only a
                    # hint; blind FUSE round 3 saw it end the mount)
                    continue
                asked += 1
        return asked

    @property
    def fill_limit(self) -> int:
        """The bytes the cache fills to: its bound less LMDB's headroom (see __init__)."""
        return self._fill_limit

    def used_bytes(self) -> int:
        with self.env.begin() as txn:
            return self._used_in(txn)

    def _used_in(self, txn: lmdb.Transaction) -> int:
        """``used`` in ``meta`` as *txn* sees it (the sum of the blocks' lengths)."""
        return _U64.unpack(txn.get(b"used", db=self._meta))[0]

    def pinned_bytes(self) -> int:
        """Bytes of the blocks held now under a live pin: what eviction cannot free. One
        pass over every block (a block's key starts with its object's digest, so one
        object's blocks come together); ``prefetchd warm`` asks only when the cache may be
        short of room."""
        now = time.time_ns()
        total = 0
        digest, object_pinned = b"", False
        with self.env.begin() as txn:
            for key, raw in txn.cursor(db=self._bmeta):
                if key[:16] != digest:
                    digest = bytes(key[:16])
                    object_pinned = _pin_live(txn.get(digest, db=self._pins), now)
                if object_pinned or _pin_live(txn.get(key, db=self._pins), now):
                    total += _BMETA.unpack_from(raw)[1]
        return total

    def missing_blocks(self, oid: ObjectId) -> list[int]:
        """Indices of the object's blocks not in the cache (one read transaction)."""
        n = oid.block_count(self.block_size)
        with self.env.begin(db=self._bmeta) as txn:
            return [i for i in range(n) if txn.get(self.block_key(oid, i)) is None]

    def contains_object(self, oid: ObjectId) -> bool:
        return not self.missing_blocks(oid)

    def put_block(self, oid: ObjectId, index: int, data: bytes) -> bool:
        """Store one block, evicting unpinned LRU blocks as needed.

        Returns False (and stores nothing) when the block does not fit without
        evicting pinned data. Raises lmdb.Error on disk problems (caller decides).
        """
        return self.put_blocks([(oid, index, data)]) == [True]

    def put_blocks(self, blocks: list[tuple[ObjectId, int, bytes]]) -> list[bool]:
        """Store several blocks in one write transaction (and their offsets in one more),
        each as ``put_block`` would: per block, False when it does not fit without
        evicting pinned data. The mount's write-behind stores what is queued this way: two
        commits per block cost its thread more than the copies (cold small files).
        """
        checked = []
        for oid, index, data in blocks:
            start, end = oid.block_span(index, self.block_size)
            if len(data) != end - start:
                raise ValueError(f"block {index} of {oid.key}: {len(data)} bytes, "
                                 f"expected {end - start}")
            # the crcs before the write lock: other writers need not wait for them
            checked.append((oid, self.block_key(oid, index), data, _crc32(data),
                            granule_crcs(data)))
        now = time.time_ns()
        stored: list[bool] = []
        fresh: list[bytes] = []  # stored as LMDB values: their offsets are recorded after
        added = 0
        freed: set[int] = set()  # slots this transaction frees: not written again in it
        with self.env.begin(write=True) as txn:
            if _FAILPOINT is not None:
                _failpoint("put:begin", len(checked))
            used = was_used = self._used_in(txn)
            disk = self._disk_room()
            limit = self._room_limit(used, disk)
            for oid, key, data, crc, granules in checked:
                if txn.get(key, db=self._bmeta) is not None:
                    stored.append(True)  # another process stored it first: same bytes
                    continue
                if used + len(data) > limit:
                    used, _ = self._evict(txn, used, len(data), now, freed, limit)
                    if used + len(data) > limit:
                        stored.append(False)
                        continue
                if disk is not None:
                    # the disk of the slots evicted here comes back only after the commit
                    # (_release_slots): the next put takes them; this one waits
                    if disk < len(data):
                        stored.append(False)
                        continue
                    disk -= len(data)
                if self._slots is not None and len(data) == self._slots.slot_size:
                    slot = self._take_slot(txn, freed)
                    try:
                        self._slots.write(slot, data)
                    except OSError as e:  # callers handle a disk error as LMDB's own
                        raise lmdb.DiskError(f"{self._slots.path}: {e.strerror or e}") \
                            from None
                    txn.put(key, _U64.pack(slot), db=self._bslot)
                else:
                    txn.put(key, data, db=self._blocks)
                    fresh.append(key)
                if _FAILPOINT is not None:
                    _failpoint("put:data")
                txn.put(key, _BMETA.pack(now, len(data), crc) + granules, db=self._bmeta)
                txn.put(_ATIME.pack(now) + key, b"", db=self._lru)
                used += len(data)
                if txn.get(oid.digest, db=self._objects) is None:
                    txn.put(oid.digest, json.dumps(
                        {"bucket": oid.bucket, "key": oid.key, "etag": oid.etag,
                         "size": oid.size}).encode(), db=self._objects)
                stored.append(True)
                added += 1
            if used != was_used:  # nothing stored or evicted: a commit that writes nothing
                txn.put(b"used", _U64.pack(used), db=self._meta)
            if _FAILPOINT is not None:
                _failpoint("put:commit", added)
        if _FAILPOINT is not None:
            _failpoint("put:committed", added)
        self._release_slots(freed)
        self._record_offsets(fresh)
        return stored

    # -- reading blocks with pread -----------------------------------------------
    #
    # py-lmdb touches every page of a value through the memory map before handing
    # it over. A cold page fault in a map reads the disk's read_ahead_kb around it
    # (8 MiB on the VM this was measured on), so a cold ~110 KiB block cost an 8 MiB
    # read, serialised on the reading thread: the first batch of a training epoch
    # on a cold node cache waited 0.29 s (0.13 s at 128 KiB read-ahead). Instead the
    # file offset of each block is recorded once it is committed (a value's overflow
    # pages are contiguous in the file), blocks are read with one pread of their
    # bytes (the kernel's own file read-ahead applies; the GIL is released), and the
    # map is opened without read-ahead so B-tree pages fault in 4 KiB at a time. The
    # CRC is checked on every read; a missing or disagreeing offset falls back to the
    # map. Measured (bench/run_bench.py, loopback, 512 MiB, two runs each): sequential
    # reads from the node cache 829-878 -> 956-1001 MB/s, after a remount 802-901 ->
    # 848-1035 MB/s, remount small files 2946-3098 -> 3557-3802/s, peak RSS 374-380
    # -> 329 MiB; cold small files 318-334 -> 275-363/s (noisy; one more write each).

    def _record_offsets(self, keys: list[bytes]) -> None:
        """Record where blocks just committed lie in data.mdb.

        A transaction of its own right after the put (the address is known only
        once the block is in the map). Batching these into the mount's
        once-a-second flush was measured slower: cold small files 318 -> 128-150/s,
        as the batch holds the write lock while it pages in a second of blocks.

        Looking a value up maps every page of it into this process (py-lmdb touches
        them), so the pages of each block whose offset was recorded are unmapped right
        after (``_unmap``): they are read with pread from now on. Left mapped until the
        next unmap of the whole map (every _UNMAP_EVERY bytes), a cold pass's stored
        blocks held up to 80 MiB of the mount's peak RSS (measured, bench/run_bench.py:
        RssFile 109 MiB at the peak, 29 MiB of it the libraries).
        """
        if self._data_fd is None or not keys:
            return
        touched = 0
        recorded: list[tuple[int, int]] = []
        try:
            with self.env.begin(write=True, buffers=True) as txn:
                for key in keys:
                    buf = txn.get(key, db=self._blocks)
                    n = len(buf) if buf is not None else 0  # paged in through the map
                    address = _buffer_address(buf) if n >= _PREAD_MIN else -1
                    off = self._file_offset(address) if address >= 0 else None
                    if off is not None:
                        txn.put(key, _U64.pack(off), db=self._boffs)
                        recorded.append((address, n))
                    else:
                        touched += n
                if _FAILPOINT is not None:
                    _failpoint("offset:commit", len(keys))
        except lmdb.Error as e:  # an optimisation: the blocks are stored either way
            log.debug("could not record where %d block(s) lie: %s", len(keys), e)
            return
        span = self._map  # what _file_offset just found the blocks in
        for address, n in recorded:  # only ever inside the file's read-only map
            if span is not None and span[0] <= address and address + n <= span[1]:
                _unmap(address, n)
            else:
                touched += n  # left mapped: the next unmap of the whole map takes it
        self._count_mapped(touched)

    def _file_offset(self, address: int) -> int | None:
        """The offset in data.mdb of a value LMDB handed out from its map at *address*
        (_buffer_address)."""
        for _ in range(2):
            if self._map is None:
                self._map = _map_span(self.path / "data.mdb")
                if self._map is None:
                    return None
            start, _end, offset = self._map
            off = address - (start - offset)  # start - offset: file offset 0
            if 0 <= off < _MAX_FILE_OFFSET:
                return off
            self._map = None  # remapped? look the mapping up again
        return None

    def _pread(self, raw_off: object, length: int,
               into: bytearray | None = None) -> bytes | bytearray | None:
        if raw_off is None or self._data_fd is None:
            return None
        try:
            off = _U64.unpack(bytes(raw_off))[0]
        except struct.error:
            return None
        return _read_exact(self._data_fd, off, length, into)

    def _pread_nowait_supported(self) -> bool:
        """Whether this kernel and file system answer RWF_NOWAIT reads (else every
        nowait read reports NotInMemory and blocks are read in threads)."""
        if self._data_fd is None:
            return False
        try:
            os.preadv(self._data_fd, [bytearray(1)], 0, _RWF_NOWAIT)
        except BlockingIOError:
            return True
        except OSError:
            return False
        return True

    def _pread_nowait(self, raw_off: object, length: int) -> bytearray | None:
        """The block's bytes if all of them are in the page cache; else raise
        NotInMemory (None: no recorded offset, or the read failed)."""
        if raw_off is None or self._data_fd is None:
            return None
        try:
            off = _U64.unpack(bytes(raw_off))[0]
        except struct.error:
            return None
        return _read_cached(self._data_fd, off, length, raw_off)

    def _evict(self, txn: lmdb.Transaction, used: int, need: int, now: int,
               freed: set[int], limit: int) -> tuple[int, int]:
        """Evict LRU unpinned blocks until *need* fits under *limit*; pinned ones move to
        the tail. The slots of evicted blocks are added to *freed*."""
        evicted = 0
        rotate: list[tuple[bytes, bytes]] = []
        cur = txn.cursor(db=self._lru)
        ok = cur.first()
        scanned = 0
        while ok and used + need > limit and scanned < _MAX_EVICT_SCAN:
            scanned += 1
            lru_key = cur.key()
            if len(lru_key) <= 8:
                # past the last record: a cursor.delete() of the last one leaves it there,
                # and its empty key made every insert fail with MDB_BAD_VALSIZE once only
                # pinned blocks were left over the bound (a blind test of the mount, M3/M4)
                break
            key = lru_key[8:]
            if self._pinned_in(txn, key, now):
                rotate.append((lru_key, key))
                ok = cur.next()
                continue
            raw = txn.get(key, db=self._bmeta)
            if raw is not None:
                used -= _BMETA.unpack_from(raw)[1]
            txn.delete(key, db=self._blocks)
            txn.delete(key, db=self._bmeta)
            txn.delete(key, db=self._boffs)
            self._free_slot(txn, key, freed)
            ok = cur.delete()
            evicted += 1
            if _FAILPOINT is not None:
                _failpoint("evict:delete")
            self._forget_object_if_empty(txn, key[:16])
        for lru_key, key in rotate:
            txn.delete(lru_key, db=self._lru)
            txn.put(_ATIME.pack(now) + key, b"", db=self._lru)
            raw = txn.get(key, db=self._bmeta)
            if raw is not None:
                _, length, crc = _BMETA.unpack_from(raw)
                txn.put(key, _BMETA.pack(now, length, crc) + bytes(raw[_BMETA.size:]),
                        db=self._bmeta)
        if evicted:
            _add_counter(txn, self._meta, "evictions", evicted)
        return used, evicted

    def _disk_room(self) -> int | None:
        """Bytes the cache's file system has free above FREE_SPACE_FLOOR of its size
        (negative: below it); None where statvfs fails. A blind test of the mount: a
        cache on a full file system took every byte and kept it, so every other writer
        there got ENOSPC; a kubelet evicts pods from a node whose file system has less
        than 10% free."""
        try:
            st = os.statvfs(self.path)
        except OSError:
            return None
        free = st.f_bavail * st.f_frsize
        floor = int(st.f_blocks * st.f_frsize * FREE_SPACE_FLOOR)
        if free < floor and not self._floor_warned:
            self._floor_warned = True
            log.warning("node cache %s: its file system has %.1f MiB free, under the %d%% "
                        "(%.1f MiB) kept free: evicting to give space back", self.path,
                        free / (1 << 20), int(FREE_SPACE_FLOOR * 100), floor / (1 << 20))
        return free - floor

    def _room_limit(self, used: int, disk: int | None) -> int:
        """What the cache may fill to now: its fill limit, or less where its file system
        has less than *disk* above its floor (_disk_room): what is missing is evicted,
        and freed slots give their disk back."""
        return self._fill_limit if disk is None else min(self._fill_limit, used + disk)

    def trim(self) -> int:
        """Evict what lies over the bound now (a lowered --disk-cache-size), not at the next
        insert (a blind test: 284% of a lowered bound stayed while every read hit). Returns
        the blocks evicted."""
        total = 0
        while True:
            freed: set[int] = set()
            with self.env.begin(write=True) as txn:
                used = self._used_in(txn)
                limit = self._room_limit(used, self._disk_room())
                if used <= limit:
                    return total
                left, evicted = self._evict(txn, used, 0, time.time_ns(), freed, limit)
                if left != used:
                    txn.put(b"used", _U64.pack(left), db=self._meta)
            self._release_slots(freed)
            total += evicted
            if not evicted:
                return total  # (only pinned blocks left over it)

    def _release_slots(self, freed: set[int]) -> None:
        """Give the disk of the slots a committed transaction freed back (SlotFile.release),
        under the write lock, in a transaction of its own that changes nothing: a slot
        still free then is nobody's (one another writer has taken since is left alone),
        and a process killed here leaves every slot as the commit left it. (Punched in
        the transaction that frees it, a kill before its commit left a live block's slot
        a hole: the kill -9 tests.)"""
        if not freed or self._slots is None or not self._slots.can_release:
            return
        txn = self.env.begin(write=True)
        try:
            for slot in sorted(freed):
                if txn.get(_SLOT.pack(slot), db=self._freeslots) is not None:
                    self._slots.release(slot)
        finally:
            txn.abort()

    def _take_slot(self, txn: lmdb.Transaction, freed: set[int]) -> int:
        """The lowest free slot not freed by this transaction (a reader that looked its
        block up before the commit may still be reading it), else a new one at the end."""
        cur = txn.cursor(db=self._freeslots)
        ok = cur.first()
        while ok:
            slot = _SLOT.unpack(cur.key())[0]
            if slot not in freed:
                cur.delete()
                return slot
            ok = cur.next()
        raw = txn.get(b"slots", db=self._meta)
        slot = _U64.unpack(raw)[0] if raw else 0
        txn.put(b"slots", _U64.pack(slot + 1), db=self._meta)
        return slot

    def _free_slot(self, txn: lmdb.Transaction, key: bytes, freed: set[int]) -> None:
        raw = txn.get(key, db=self._bslot)
        if raw is not None:
            slot = _U64.unpack(raw)[0]
            txn.put(_SLOT.pack(slot), b"", db=self._freeslots)
            txn.delete(key, db=self._bslot)
            freed.add(slot)

    def _forget_object_if_empty(self, txn: lmdb.Transaction, digest: bytes) -> None:
        """Keep ``objects`` bounded: drop the record when its last block is gone."""
        cur = txn.cursor(db=self._bmeta)
        if not cur.set_range(digest) or not cur.key().startswith(digest):
            txn.delete(digest, db=self._objects)

    def _drop(self, key: bytes) -> None:
        with self.env.begin(write=True) as txn:
            raw = txn.get(key, db=self._bmeta)
            if raw is not None:
                atime, length, _ = _BMETA.unpack_from(raw)
                txn.delete(_ATIME.pack(atime) + key, db=self._lru)
                used = self._used_in(txn)
                txn.put(b"used", _U64.pack(max(0, used - length)), db=self._meta)
            txn.delete(key, db=self._bmeta)
            txn.delete(key, db=self._blocks)
            txn.delete(key, db=self._boffs)
            self._free_slot(txn, key, set())
            self._forget_object_if_empty(txn, key[:16])
            _add_counter(txn, self._meta, "integrity_errors", 1)

    def flush_touches(self) -> int:
        """Write batched access times of hits to the LRU order. Returns how many.

        Also records the offsets learnt by reads through the map (a block stored
        without one), so that its next read is a pread.
        """
        with self._lock:
            pending, self._pending_touch = self._pending_touch, OrderedDict()
            offsets, self._pending_offsets = self._pending_offsets, OrderedDict()
        if not pending and not offsets:
            return 0
        with self.env.begin(write=True) as txn:
            for key, off in offsets.items():
                if txn.get(key, db=self._bmeta) is not None:  # still cached
                    txn.put(key, _U64.pack(off), db=self._boffs)
            for key, ns in pending.items():
                raw = txn.get(key, db=self._bmeta)
                if raw is None:
                    continue
                atime, length, crc = _BMETA.unpack_from(raw)
                if ns <= atime:
                    continue
                txn.delete(_ATIME.pack(atime) + key, db=self._lru)
                txn.put(_ATIME.pack(ns) + key, b"", db=self._lru)
                txn.put(key, _BMETA.pack(ns, length, crc) + bytes(raw[_BMETA.size:]),
                        db=self._bmeta)
            if _FAILPOINT is not None:
                _failpoint("touch:commit")
        return len(pending)

    # -- pins --------------------------------------------------------------------

    def pin_object(self, oid: ObjectId, owner: str = "default",
                   ttl: float | None = None) -> None:
        """Protect every block of *oid* (present or future) from eviction."""
        self._pin(oid.digest, owner, ttl)

    def unpin_object(self, oid: ObjectId, owner: str | None = None) -> bool:
        """Drop *owner*'s pin (or every pin when owner is None); True if there was one."""
        return self._unpin(oid.digest, owner)

    def pin_block(self, oid: ObjectId, index: int, owner: str = "default",
                  ttl: float | None = None) -> None:
        self._pin(self.block_key(oid, index), owner, ttl)

    def unpin_block(self, oid: ObjectId, index: int, owner: str | None = None) -> None:
        self._unpin(self.block_key(oid, index), owner)

    def unpin_owner(self, owner: str) -> int:
        """Drop every pin *owner* holds, on objects and blocks alike; the number dropped.
        One pass over the pins: it finds an object pinned before any of its blocks came
        (a warm stopped there), which a walk of the cached objects does not (a blind test
        of the agent: a warm stopped by a release left such pins, and nothing dropped
        them)."""
        n = 0
        mark = json.dumps(owner).encode()  # (as it stands in a record: most are skipped unread)
        with self.env.begin(write=True, db=self._pins) as txn:
            cur = txn.cursor()
            ok = cur.first()
            while ok and cur.key():  # (a delete of the last leaves the cursor past the end)
                if mark not in cur.value():
                    ok = cur.next()
                    continue
                owners = json.loads(cur.value())
                if owner in owners:
                    del owners[owner]
                    n += 1
                    if owners:
                        cur.put(cur.key(), json.dumps(owners).encode())
                        ok = cur.next()
                    else:
                        ok = cur.delete()
                    continue
                ok = cur.next()
        return n

    def is_pinned(self, oid: ObjectId, index: int | None = None) -> bool:
        now = time.time_ns()
        with self.env.begin() as txn:
            if index is None:
                return _pin_live(txn.get(oid.digest, db=self._pins), now)
            return self._pinned_in(txn, self.block_key(oid, index), now)

    def _pin(self, pkey: bytes, owner: str, ttl: float | None) -> None:
        expiry = 0 if ttl is None else time.time_ns() + int(ttl * 1e9)
        with self.env.begin(write=True, db=self._pins) as txn:
            raw = txn.get(pkey)
            owners = json.loads(raw) if raw else {}
            owners[owner] = expiry
            txn.put(pkey, json.dumps(owners).encode())

    def _unpin(self, pkey: bytes, owner: str | None) -> bool:
        with self.env.begin(write=True, db=self._pins) as txn:
            raw = txn.get(pkey)
            if raw is None:
                return False
            owners = json.loads(raw)
            if owner is None:
                found = bool(owners)
                owners = {}
            else:
                found = owners.pop(owner, None) is not None
            if owners:
                txn.put(pkey, json.dumps(owners).encode())
            else:
                txn.delete(pkey)
            return found

    def _pinned_in(self, txn: lmdb.Transaction, key: bytes, now: int) -> bool:
        return (_pin_live(txn.get(key[:16], db=self._pins), now)
                or _pin_live(txn.get(key, db=self._pins), now))

    # -- counters and stats -----------------------------------------------------------

    def add_counters(self, deltas: dict[str, int], scope: str | None = None) -> None:
        """Add a process's counter deltas to the node-wide totals (one short txn).

        With *scope* (a mount passes its ``s3://bucket/prefix/``) the deltas are also
        added to that scope's own totals, so the hit ratio a dataset's mounts saw can
        be told apart from the node's (prefetchd's per-step metrics).
        """
        deltas = {k: v for k, v in deltas.items() if v}
        if not deltas:
            return
        with self.env.begin(write=True) as txn:
            for name, value in deltas.items():
                _add_counter(txn, self._meta, name, value)
                if scope is not None:
                    _add_counter(txn, self._meta, f"{scope}\0{name}", value, prefix=b"s:")

    def scoped_counters(self) -> dict[str, dict[str, int]]:
        """Totals per scope (mount source): {scope: {counter: value}}."""
        out: dict[str, dict[str, int]] = {}
        with self.env.begin(db=self._meta) as txn:
            cur = txn.cursor()
            ok = cur.set_range(b"s:")
            while ok and cur.key().startswith(b"s:"):
                scope, _, name = cur.key()[2:].decode().partition("\0")
                out.setdefault(scope, {})[name] = _U64.unpack(cur.value())[0]
                ok = cur.next()
        return out

    def stats(self) -> CacheStats:
        with self.env.begin() as txn:
            used = self._used_in(txn)
            counters = {}
            for name in COUNTERS:
                raw = txn.get(b"c:" + name.encode(), db=self._meta)
                counters[name] = _U64.unpack(raw)[0] if raw else 0
            blocks = txn.stat(self._bmeta)["entries"]
            objects = txn.stat(self._objects)["entries"]
            pins = txn.stat(self._pins)["entries"]
        file_bytes = 0
        for name in ("data.mdb", slots.FILE_NAME):  # what the cache takes on disk
            try:
                file_bytes += (self.path / name).stat().st_size
            except OSError:
                pass
        return CacheStats(str(self.path), used, self.limit_bytes, blocks, objects, pins,
                          file_bytes, counters)

    def iter_objects(self, bucket: str | None = None, prefix: str = "") -> Iterable[ObjectId]:
        """Objects with at least one cached block, optionally under bucket/prefix.

        Reads in batches of short transactions, so a long walk never holds a
        reader slot (and old pages) for long.
        """
        after: bytes | None = None
        while True:
            batch: list[tuple[bytes, bytes]] = []
            with self.env.begin(db=self._objects) as txn:
                cur = txn.cursor()
                ok = cur.set_range(after + b"\0") if after is not None else cur.first()
                while ok and len(batch) < 1000:
                    batch.append((cur.key(), cur.value()))
                    ok = cur.next()
            if not batch:
                return
            after = batch[-1][0]
            for _, raw in batch:
                d = json.loads(raw)
                if (bucket is None or d["bucket"] == bucket) and d["key"].startswith(prefix):
                    yield ObjectId(d["bucket"], d["key"], d["etag"], d["size"])


class NotInMemory(Exception):
    """get_block(nowait=True): the block's bytes are not all in the page cache."""


class CacheUnavailable(errors.FusecacheError):
    """The cache dir cannot be used (unwritable, disk error): serve from S3 only."""


class IncompatibleCache(errors.FusecacheError):
    """The environment exists but was not written by this format of fusecache."""


# Errors that mean the file itself is damaged or foreign: move it aside.
# (BadTxnError: what a read at open time meets after a damaged page spoiled its
# transaction; blind FUSE round 3 saw the mount refuse to start on it)
_DAMAGE = (lmdb.CorruptedError, lmdb.InvalidError, lmdb.VersionMismatchError,
           lmdb.PageNotFoundError, lmdb.BadChecksumError, lmdb.IncompatibleError,
           lmdb.PanicError, lmdb.BadTxnError, struct.error)


# One LMDB environment per file per process, shared by every NodeCache handle:
# LMDB forbids opening the same environment twice in one process (closing one
# copy drops the other's file locks), and prefetchd's threads each open the cache.
_ENVS: dict[str, list] = {}
_ENVS_LOCK = threading.Lock()


def _acquire_env(path: Path, limit_bytes: int | None) -> lmdb.Environment:
    key = str(path.resolve())
    with _ENVS_LOCK:
        entry = _ENVS.get(key)
        if entry is None:
            entry = _ENVS[key] = [_open_env(path, limit_bytes), 0]
        entry[1] += 1
        return entry[0]


def _release_env(path: Path) -> bool:
    """Drop one reference; close on the last. True if others still hold it."""
    key = str(path.resolve())
    with _ENVS_LOCK:
        entry = _ENVS.get(key)
        if entry is None:
            return False
        entry[1] -= 1
        if entry[1] > 0:
            return True
        del _ENVS[key]
        # closed under the lock: a thread opening the cache meanwhile would otherwise find
        # the environment still open ("already open in this process")
        entry[0].close()
    return False


def _owner_only(path: Path) -> None:
    """The environment's folder 0700 and its files 0600: data.mdb holds every cached byte
    and key name, which a mount's --uid/--gid/--file-mode may refuse a user (a blind test
    of the CSI plugin read them from a 0644 data.mdb). Every process sharing a node cache
    runs as its owner (root in the DaemonSet). A cache made before this is tightened when
    its owner opens it."""
    try:
        path.mkdir(mode=0o700, exist_ok=True)
        for p in (path, path / "data.mdb", path / "lock.mdb"):
            st = p.stat()
            if st.st_mode & 0o077 and st.st_uid == os.geteuid():
                p.chmod(0o700 if p is path else 0o600)
    except FileNotFoundError:
        pass  # (the files come with the first open)
    except OSError as e:  # a read-only or foreign folder: lmdb.open says what is wrong
        log.debug("cannot make %s owner-only: %s", path, e)


def _open_env(path: Path, limit_bytes: int | None) -> lmdb.Environment:
    _owner_only(path)
    map_size = max(_DEFAULT_MAP_SIZE, 2 * (limit_bytes or 0))
    try:
        map_size = max(map_size, (path / "data.mdb").stat().st_size)
    except OSError:
        pass
    return lmdb.open(
        str(path), map_size=map_size, max_dbs=16, max_readers=1024, subdir=True,
        # No read-ahead: B-tree pages fault in 4 KiB at a time. Blocks are read with
        # pread (NodeCache._pread); only a block without a recorded offset is copied
        # out of the map, a page fault at a time.
        readahead=False,
        sync=False, metasync=False, lock=True, max_spare_txns=8, mode=0o600,
    )


def _load_libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        return libc
    except (OSError, AttributeError):
        return None


_LIBC = _load_libc()


def _map_span(data_file: Path) -> tuple[int, int, int] | None:
    """This process's mapping of *data_file* (from /proc/self/maps): start and end
    address, and the file offset mapped at the start."""
    target = str(data_file.resolve())
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                if line.rstrip().endswith(target):
                    span, _perms, offset = line.split(None, 3)[:3]
                    lo, hi = span.split("-")
                    return int(lo, 16), int(hi, 16), int(offset, 16)
    except (OSError, ValueError):
        pass
    return None


class _PyBuffer(ctypes.Structure):
    """CPython's Py_buffer, to learn where in LMDB's map a value lies."""

    _fields_ = [("buf", ctypes.c_void_p), ("obj", ctypes.c_void_p),
                ("len", ctypes.c_ssize_t), ("itemsize", ctypes.c_ssize_t),
                ("readonly", ctypes.c_int), ("ndim", ctypes.c_int),
                ("format", ctypes.c_char_p), ("shape", ctypes.c_void_p),
                ("strides", ctypes.c_void_p), ("suboffsets", ctypes.c_void_p),
                ("internal", ctypes.c_void_p)]


def _unmap(address: int, length: int) -> None:
    """Drop this process's mapping of [address, address + length) of the read-only map
    (MADV_DONTNEED on a shared file mapping only unmaps; the page cache keeps the data).
    The first and last pages may hold a neighbour's bytes: unmapping them is harmless."""
    if _LIBC is None or address <= 0:
        return
    start = address & ~(_PAGE - 1)
    _LIBC.madvise(ctypes.c_void_p(start), ctypes.c_size_t(address + length - start),
                  _MADV_DONTNEED)


def _buffer_address(obj: object) -> int:
    """The address where a buffer-protocol object's memory starts (-1 if unknown)."""
    view = _PyBuffer()
    ctypes.pythonapi.PyObject_GetBuffer(ctypes.py_object(obj), ctypes.byref(view), 0)
    try:
        return int(view.buf or 0) or -1
    finally:
        ctypes.pythonapi.PyBuffer_Release(ctypes.byref(view))


def granule_crcs(data: bytes | bytearray | memoryview) -> bytes:
    """The crc32 of each GRANULE of a block larger than one, packed; b"" for a smaller one."""
    if len(data) <= GRANULE:
        return b""
    view = memoryview(data)
    return b"".join(_U32.pack(_crc32(view[i:i + GRANULE]))
                    for i in range(0, len(view), GRANULE))


def _read_exact(fd: int, off: int, length: int, into: bytearray | None = None
                ) -> bytes | bytearray | None:
    """*length* bytes at *off* of data.mdb or slots.dat (into *into* when it has that
    length); None if they cannot all be read."""
    try:
        if into is not None and len(into) == length:
            return into if os.preadv(fd, [into], off) == length else None
        data = os.pread(fd, length, off)
    except (OSError, OverflowError, ValueError):  # (an offset from a damaged environment)
        return None
    return data if len(data) == length else None


def _read_cached(fd: int, off: int, length: int, what: object) -> bytearray | None:
    """As _read_exact, but only bytes all in the page cache (``preadv2(RWF_NOWAIT)``):
    NotInMemory(*what*) if any of them would wait for the disk."""
    buf = bytearray(length)
    try:
        n = os.preadv(fd, [buf], off, _RWF_NOWAIT)
    except BlockingIOError:
        raise NotInMemory(what) from None
    except (OSError, OverflowError, ValueError):
        return None
    if n != length:  # partly cached: the rest would wait for the disk
        raise NotInMemory(what)
    return buf


def _pin_live(raw: bytes | None, now: int) -> bool:
    if raw is None:
        return False
    owners = json.loads(raw)
    return any(exp == 0 or exp > now for exp in owners.values())


def _add_counter(txn: lmdb.Transaction, db: object, name: str, value: int,
                 prefix: bytes = b"c:") -> None:
    key = prefix + name.encode()
    raw = txn.get(key, db=db)
    txn.put(key, _U64.pack((_U64.unpack(raw)[0] if raw else 0) + value), db=db)
