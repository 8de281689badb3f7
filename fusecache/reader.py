"""The read path: RAM tier, then the node cache (LMDB), then the cache group's peers,
then ranged GETs to S3.

Who calls it: the FUSE adapter (``fs.py``) for every read, with a per-open-file
``ReadState``, and at a small file's first open for its whole block if it is cached
(``cached_small_object``: fs.py hands it to the kernel's page cache); folder
read-ahead (``dirahead.py``) loads a folder's next small files through ``get_block``.
Data flow for one block:

    RamCache.get ──hit──> bytes
        │miss
    NodeCache.get_block ──hit──> RamCache.put ──> bytes
        │miss
    single flight: the first task for a block loads it; later tasks for the same
    block wait for that result.
    PeerClient.fetch (a worker thread; peer_client.py) ──hit──┐
        │miss, or no group                                   │
    ranged GET (a worker thread, under the connection limiter)│
        └─> RamCache.put, queue write-behind to the node cache <┘ ──> bytes

Both worker threads come from one ``workers.WorkerPool``: at a cold small file a call
each, cheaper there than ``trio.to_thread`` (see workers.py).

A cold block that a read wants part of is read before it has all come: it is loaded
beside the read, the GET streams the body into the block's buffer and says how far it
got, and the read is answered as soon as its bytes are there (``_while_arriving``). The
first bytes of a cold file, or a random read, then wait for their own bytes, not for the
last of an 8 MiB block.

Folder read-ahead loads a folder's small files from peers several at a time
(``load_first_blocks``: one call per batch, each block then lands as above); a reader of
one of them waits for that batch, and loads it itself if the batch did not get it.

Peers are asked only with the time left of the read's deadline (each try also
bounded by the client's ``--peer-timeout``), so a slow or dead peer costs at most
that before S3 is asked; a block from a peer is verified by the client and stored
in the node cache like one from S3 (unless ``peer_store`` is off).

Read-ahead: a reader whose reads follow each other gets the next blocks fetched
in the background, in parallel, with a window that doubles per sequential read up
to ``readahead_max``. Every read-ahead block first reserves its size from one
per-mount byte budget (``readahead_budget``) and gives it back when a read reaches it
(or the RAM tier lets it go unread, or it has waited unread for _UNREAD_MAX_AGE);
when the budget is spent, read-ahead simply does not start more. That bounds memory
regardless of the number of open files: RSS stays within RAM tier + budget +
write-behind queue (64 MiB) + spare block buffers (32 MiB), and blocks fetched ahead
stay in RAM until read (the budget, 96 MiB, is under the stream segment, 128 MiB, by
default). Until 2026-12-05 the budget came back when a block landed: four shards read
side by side (the training experiment's shard epoch) then had 4 x 8 blocks fetched ahead
for a stream segment of 16, and half the blocks of the epoch were pushed out of RAM
before their reader came, to be read back from the node cache (88 of 176 blocks,
``fusecache stats``).
No thread keeps a block once it has handed it over (workers.py, ``_WriteBehind``): a
block the RAM tier lets go is freed or reused, not held until the thread's next job.
Blocks of objects larger than an eighth of the RAM tier go to its stream segment (at
most half of it), so a pass over a big shard cannot evict the small hot files. A large
cold object read from the start therefore turns into up to budget/block_size parallel
ranged GETs, which is what lets one reader use the whole link.

Buffers: a full block read back from the node cache is read into the buffer of a block
the RAM tier let go (``_recycle``: only one nothing else refers to), so a stream from
the node cache does not map and zero a fresh 8 MiB buffer per block.

Write-behind: fetched blocks go to the node cache from one thread of its own
(``_WriteBehind``), handed over without a trio task switch, and stored whatever is queued
at once (up to _WRITE_BATCH blocks and _WRITE_BATCH_BYTES) in one write transaction; the
queue is bounded in bytes (64 MiB) and a fetch waits for room, up to _WRITE_STALL, when
the disk is slower.

Failures: each S3 call retries with backoff inside the store; a read that cannot
finish within ``read_timeout`` (the bound of the whole read, however many blocks)
raises DeadlineExceeded (EIO for the caller) and trips the S3 circuit breaker
(``circuit.py``), so that later fetches fail at once (EIO) instead of each waiting
its own bound, until the breaker's probe finds S3 answering again. Blocks already
in RAM or in the node cache are served as usual while S3 is unreachable, if the
mount's ``OfflineGate`` allows it (else AccessDenied: EACCES). A failed fetch is
not cached and wakes its waiters with the error. Bytes are checked for length
before they are served or cached.
"""

from __future__ import annotations

import copy
import logging
import math
import sys
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import lmdb
import trio

from fusecache import errors
from fusecache.blockmem import block_buffer
from fusecache.circuit import CircuitBreaker
from fusecache.metrics import Metrics
from fusecache.nodecache import NodeCache, NotInMemory, ObjectId, block_key
from fusecache.offline_auth import OfflineGate
from fusecache.peer_client import PeerClient, fetch_from_peers, first_blocks_from_peers
from fusecache.ramcache import RamCache
from fusecache.store import ObjectStore
from fusecache.workers import WorkerPool, name_os_thread

log = logging.getLogger(__name__)

# Node-cache blocks up to _INLINE_DISK_READ are read on the trio thread when their
# bytes are already in the page cache (NodeCache.get_block(nowait=True): a thread hop
# per file costs more than such a read). One that would wait for the disk goes to a
# worker thread (up to _SMALL_DISK_READ_THREADS), so the loop serves other requests
# meanwhile and several files' disk reads overlap: read inline, a cold ~110 KiB
# block held the whole mount for one disk read (~0.9 ms here), capping a remount's
# small-file reads at about one file per disk latency. Larger blocks may fault in
# megabytes from disk and go to up to _DISK_READ_THREADS worker threads.
_DISK_READ_THREADS = 4
_SMALL_DISK_READ_THREADS = 16
_INLINE_DISK_READ = 256 * 1024
# A read not following the one before (a random read) of at most this many bytes, of a block
# in the node cache but not in RAM, reads only its granules (NodeCache.get_range): the
# whole 8 MiB block is read and kept only for reads that go on in order.
_RANGE_READ_MAX = 1 << 20
_SEQUENTIAL_SLACK = 8 * 1024 * 1024
# A block fetched ahead that no read has reached for this long gives its budget back (a
# reader that stopped, a file closed half read): the next reader is not starved of it.
_UNREAD_MAX_AGE = 10.0
_START_WINDOW = 4
# Write-behind holds blocks that are mostly also in the RAM tier; it is bounded
# in bytes so a slow disk cannot grow RSS past the bound; when it is full,
# fetches wait for the disk (see _queue_write).
_WRITE_QUEUE_BYTES = 64 * 1024 * 1024
_WRITE_STALL = 10.0
# Blocks the write-behind thread stores in one write transaction at most (whatever is
# queued, up to this many and these bytes, at least one block): a commit per block cost
# more than the block's copy; the bytes bound how long other writers wait for the lock.
_WRITE_BATCH = 16
_WRITE_BATCH_BYTES = 16 * 1024 * 1024
# How long a block whose fetch failed for good fails again at once.
_FAILURE_MEMORY = 5.0
_DISK_RETRY_AFTER = 30.0
_PEER_THREADS = 16
_PEER_BATCH_THREADS = 4
# Buffers of blocks the RAM tier let go, kept for the next read of a full block from the
# node cache or S3 (see _recycle). A fresh 8 MiB buffer costs 2,048 page faults and zeroed
# pages: measured on 2 cores (512 MiB from the node cache, page cache dropped),
# NodeCache.get_block took 0.71-0.85 CPU-s with a fresh buffer per block, 0.18-0.27 s with
# reused ones. Read-ahead starts several GETs before the blocks they evict arrive, so a
# stream from S3 needs more than two: 1.5 GiB read cold (page cache dropped, 2 cores,
# alternating), the mount's CPU was 4.47 s with a fresh buffer per GET (obstore's),
# 4.25-4.46 s keeping 2, 3.36-3.74 s keeping 8 (of 8 MiB). What is kept beyond the RAM
# tier: at most _SPARE_BYTES, and never fewer than 2 blocks. 32 MiB, not 64, for the peak-RSS
# bound (RAM tier + 200 MiB): bench/run_bench.py's mount peaked at 447-462 MiB keeping 8,
# 446-449 keeping 4, 436-441 keeping 2 (three runs each, alternated), cold sequential
# 488-566, 525-557 and 472-526 MB/s.
_SPARE_BYTES = 32 * 1024 * 1024


def _unshared_refs() -> int:
    """What sys.getrefcount says in BlockReader._recycle of a block nothing else refers
    to (the eviction's own references), measured once on this interpreter through the
    same path: a RamCache eviction calling a bound method."""
    seen: list[int] = []

    class Probe:
        def on_evict(self, key: bytes, block: bytes | bytearray) -> None:
            seen.append(sys.getrefcount(block))

    ram = RamCache(2)
    ram.on_evict = Probe().on_evict
    ram.put(b"a", bytearray(2))
    ram.put(b"b", bytearray(2))  # evicts the first, referred to by nothing else
    return seen[0]


def _detached(e: Exception) -> Exception:
    """A copy of *e* with no traceback, cause or context: what a failed load keeps (its
    waiters' error, the failure remembered for ``failure_memory`` seconds) and what each
    waiter raises. The original's traceback holds the frames of the load, and with them
    the block's 8 MiB buffer; raising one shared object from many tasks would also chain
    all their frames onto it. An exception that cannot be copied is kept as it is."""
    try:
        return copy.copy(e)
    except Exception:  # noqa: BLE001 - a class whose __init__ does not take its args
        return e


def _disk_range_read(disk: NodeCache, oid: ObjectId, idx: int, lo: int, hi: int
                     ) -> bytes | None:
    """NodeCache.get_range in a worker thread; None on a miss or a failure (as _disk_read)."""
    try:
        return disk.get_range(oid, idx, lo, hi)
    except lmdb.Error as e:
        log.warning("node cache read failed (%s); reading the whole block", e)
        return None


def _disk_read(disk: NodeCache, oid: ObjectId, idx: int, into: bytearray | None
               ) -> bytes | None:
    """NodeCache.get_block in a worker thread; None on a miss or a failure, said here: an
    error raised through trio.to_thread is a reference cycle (trio's frame holds it),
    which kept the call's frames and the lent buffer until the cyclic collector ran."""
    try:
        return disk.get_block(oid, idx, into=into)
    except lmdb.Error as e:
        log.warning("node cache read failed (%s); reading from S3", e)
        return None


class _OnDisk:
    """The type of _ON_DISK: in the node cache, not in the page cache."""


_ON_DISK = _OnDisk()


@dataclass
class ReadState:
    """Per open file: where the last read ended and the current read-ahead window."""

    next_offset: int = 0
    window: int = 0          # blocks of read-ahead
    ahead_until: int = 0     # first block index not yet scheduled for read-ahead
    last_block: int = -1     # the last block a sequential read reached


def _slice(block: bytes, start: int, end: int) -> bytes | memoryview:
    if start == 0 and end == len(block):
        return block
    return memoryview(block)[start:end]  # no copy; pyfuse3 takes any buffer


class _Flight:
    """One block being loaded; later readers of the block wait for it.

    A block coming from S3 into a lent buffer (``buf``) is readable in part before it
    has all come: the GET's worker thread records in ``filled`` how many of its first
    bytes are final, and wakes the loop (``moved``) once that reaches ``need``, the
    least a waiting reader wants (0: nobody waits)."""

    __slots__ = ("done", "data", "error", "buf", "filled", "need", "moved", "viewed",
                 "for_reader")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.data: bytes | None = None
        self.error: BaseException | None = None
        self.buf: bytearray | None = None
        self.filled = 0
        self.need = 0
        self.moved = trio.Event()
        self.viewed = False  # a reader was given a view of buf
        self.for_reader = False  # started by a read that takes bytes as they come


class BlockReader:
    """Serves byte ranges of objects through the tiers. Lives on the trio thread."""

    def __init__(self, store: ObjectStore, ram: RamCache, disk: NodeCache | None,
                 metrics: Metrics, *, block_size: int, readahead_budget: int,
                 readahead_max: int, max_connections: int, read_timeout: float,
                 failure_memory: float = _FAILURE_MEMORY,
                 breaker: CircuitBreaker | None = None,
                 offline: OfflineGate | None = None,
                 peers: PeerClient | None = None, peer_store: bool = True) -> None:
        self.store = store
        self.peers = peers
        self.peer_store = peer_store
        # Blocks asked of peers at once (each a worker thread while it waits); batches
        # of folder read-ahead apart, so that they never hold up a reader's block.
        self._peer_slots = trio.CapacityLimiter(_PEER_THREADS)
        self._peer_batch_slots = trio.CapacityLimiter(_PEER_BATCH_THREADS)
        self.breaker = breaker
        self._slow_said_at = -math.inf
        self.offline = offline
        self.ram = ram
        self.disk = disk
        # told how long each block lookup in the node cache took on the loop (the mount's
        # indexwarm.IndexWarmer: a slow one read the index from disk)
        self.index_noticed: Callable[[float], None] = lambda seconds: None
        self.metrics = metrics
        self.block_size = block_size
        self.read_timeout = read_timeout
        # Read-ahead never asks for more than half the stream segment, so blocks
        # fetched ahead are still there when the reader arrives.
        self.readahead_max_blocks = max(0, min(readahead_max, ram.stream_limit // 2)
                                        // block_size)
        self._budget = trio.Semaphore(max(0, readahead_budget // block_size))
        # blocks read ahead that landed and no read has reached yet: key -> landing time
        # (time.monotonic); each holds one block of the budget
        self._unread: OrderedDict[bytes, float] = OrderedDict()
        self._connections = trio.CapacityLimiter(max_connections)
        # the GETs' and the peer calls' threads (abandoned when their caller is cancelled)
        self._calls = WorkerPool("fusecache-io", keep=min(max_connections, 16))
        self._disk_threads = trio.CapacityLimiter(_DISK_READ_THREADS)
        self._small_disk_threads = trio.CapacityLimiter(_SMALL_DISK_READ_THREADS)
        self._inflight: dict[bytes, _Flight] = {}
        self._nursery: trio.Nursery | None = None
        self._writer = _WriteBehind(disk, max(_WRITE_QUEUE_BYTES, 2 * block_size))
        self._recent_failures: OrderedDict[bytes, tuple[float, Exception]] = OrderedDict()
        self._failure_memory = failure_memory
        self._stream_threshold = ram.limit_bytes // 8
        self._spare: list[bytearray] = []
        self._spare_max = max(2, _SPARE_BYTES // block_size)
        self._unshared_refs = _unshared_refs()
        self._token: trio.lowlevel.TrioToken | None = None
        ram.on_evict = self._recycle
        self._ram_hits = metrics.tier_counter("ram", hit=True)
        self._ram_misses = metrics.tier_counter("ram", hit=False)
        self._disk_hits = metrics.tier_counter("disk", hit=True)
        self._disk_misses = metrics.tier_counter("disk", hit=False)

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Own the background work (read-ahead, write-behind) until cancelled."""
        self._writer.start()
        self._token = trio.lowlevel.current_trio_token()
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                await trio.sleep_forever()  # read-ahead tasks start here until cancelled
        finally:
            self._writer.close()
            self._calls.close()

    # -- public --------------------------------------------------------------------

    async def read(self, oid: ObjectId, offset: int, size: int,
                   state: ReadState | None = None) -> bytes | memoryview:
        """Exactly the bytes [offset, offset+size) of *oid* (short only at EOF).

        The hot path (every block already in RAM, or a small block in the node
        cache) completes without yielding to trio: no cancel scope, no task
        switch. Only a read that must wait gets the deadline.
        """
        end = min(oid.size, offset + size)
        if offset >= end:
            return b""
        if self.breaker is not None and self.breaker.is_open and self.offline is not None:
            self.offline.check()  # S3 unreachable: only what this credential may read
        bs = self.block_size
        first, last = offset // bs, (end - 1) // bs
        if self._unread:  # reached: what was read ahead for this read frees its budget
            for idx in range(first, last + 1):
                self._unread_gone(block_key(oid, idx, bs))
        if state is not None:
            self._plan_readahead(oid, state, offset, end, first, last)
        on_disk = False
        if first == last:
            block = self._block_nowait(oid, first)
            if block is _ON_DISK:
                on_disk = True
            elif block is not None:
                return _slice(block, offset - first * bs, end - first * bs)
        with trio.move_on_after(self.read_timeout) as scope:
            if first == last:
                lo, hi = offset - first * bs, end - first * bs
                if state is not None and state.window == 0 and hi - lo <= _RANGE_READ_MAX:
                    # a random read: its granules from the node cache, not the whole block
                    part = await self._disk_range(oid, first, lo, hi)
                    if part is not None:
                        return part
                if not on_disk:
                    part = await self._while_arriving(oid, first, lo, hi)
                    if part is not None:
                        return part
                block = await self.get_block(oid, first, on_disk=on_disk)
                return _slice(block, lo, hi)
            parts = []
            for idx in range(first, last + 1):
                block = await self.get_block(oid, idx)
                start = idx * bs
                parts.append(memoryview(block)[max(0, offset - start):min(bs, end - start)])
            return b"".join(parts)
        assert scope.cancelled_caught
        self._no_answer()
        raise errors.DeadlineExceeded(
            f"read of s3://{oid.bucket}/{oid.key} at {offset} timed out after "
            f"{self.read_timeout:g}s")

    async def cached_small_object(self, oid: ObjectId, limit: int) -> bytes | None:
        """The whole of a one-block object of at most *limit* bytes if the RAM tier or the
        node cache holds it (read from disk in a thread when the page cache does not) or a
        fetch of it is under way (folder read-ahead); else None: this starts no fetch,
        so an open that reads nothing costs no GET. Bounded by the read deadline."""
        if not 0 < oid.size <= min(limit, self.block_size):
            return None
        block = self._block_nowait(oid, 0)
        if block is None and block_key(oid, 0, self.block_size) not in self._inflight:
            return None
        if block is None or block is _ON_DISK:
            with trio.move_on_after(self.read_timeout):
                return await self.get_block(oid, 0, on_disk=block is _ON_DISK)
            return None
        return block

    def advise_small_object(self, oid: ObjectId, limit: int, room: int) -> bytes | None:
        """A one-block object of at most *limit* bytes is about to be opened (its LOOKUP):
        if only the node cache holds it, ask its bytes into the page cache now, so that
        the disk reads it during the LOOKUP's reply and the OPEN's trip instead of after
        the OPEN arrives (``cached_small_object`` then reads it on the loop). In a
        shuffled pass over a prefetched folder this is the one read-ahead that is always
        right: the file looked up is the one opened next. Not when it is larger than
        *room* (the caller's PageInBudget). Returns the block's key if it was asked for
        (held, with a recorded offset), else None."""
        if self.disk is None or not 0 < oid.size <= min(limit, self.block_size, room):
            return None
        key = block_key(oid, 0, self.block_size)
        if key in self.ram or key in self._inflight:
            return None
        t = time.perf_counter()
        try:
            return key if self.disk.advise_first_blocks([oid]) == 1 else None
        except lmdb.Error:
            return None  # only a hint; the open reads it or fetches it
        finally:
            self.index_noticed(time.perf_counter() - t)

    def in_memory(self, oid: ObjectId, idx: int) -> bool:
        """Whether the block is in the RAM tier or being loaded (no disk access)."""
        key = block_key(oid, idx, self.block_size)
        return key in self.ram or key in self._inflight

    def not_in_node_cache(self, oids: list[ObjectId], advise_bytes: int = 0
                          ) -> tuple[set[ObjectId], list[ObjectId]]:
        """Of these objects, those whose first block the node cache lacks, and those of
        the held ones asked into the page cache (NodeCache.advise_first_blocks): the first
        ones, in order, up to *advise_bytes* together. Blocking: a worker thread (the lookup
        may page the index in from disk)."""
        if self.disk is None:
            return set(oids), []
        try:
            lacking = set(self.disk.lacking_first_blocks(oids))
            advised = []
            for o in oids:
                if o not in lacking and 0 < o.size <= advise_bytes:
                    advised.append(o)
                    advise_bytes -= o.size
            self.disk.advise_first_blocks(advised)
            return lacking, advised
        except lmdb.Error:
            return set(), []

    def _block_nowait(self, oid: ObjectId, idx: int) -> bytes | _OnDisk | None:
        """A block from RAM, or a small one straight from the node cache; _ON_DISK
        when the node cache holds it but the page cache does not; else None.

        Small node-cache values are read on the loop: a thread hop per file costs
        more than the read itself (see the measurement in the bench notes). Large
        blocks may fault in megabytes from disk, so they take the threaded path.
        A small block read from the node cache is not put in the RAM tier: the page
        cache holds its bytes already, and a fresh RAM-tier buffer per file cost the
        loop more than the read (page faults on new memory; measured in-process on
        1,500 files of 60-160 KiB: 250 -> 90-130 us of loop CPU per file).
        """
        key = block_key(oid, idx, self.block_size)
        data = self.ram.get(key)
        if data is not None:
            self._ram_hits.inc()
            return data
        if self.disk is None or key in self._inflight:
            return None
        start, end = oid.block_span(idx, self.block_size)
        if end - start > _INLINE_DISK_READ:
            return None
        try:
            data = self._disk_get_inline(oid, idx)
        except NotInMemory:
            return _ON_DISK  # get_block reads it in a thread
        if data is None:
            return None  # get_block will count the misses and fetch
        self._ram_misses.inc()
        self._disk_hits.inc()
        return data

    async def get_block(self, oid: ObjectId, idx: int, *, on_disk: bool = False,
                        ask_peers: bool = True) -> bytes:
        """The block, from RAM, the node cache, a peer or S3. *on_disk*: the caller
        found it in the node cache but not in the page cache (read it in a thread).
        *ask_peers* False: the group was just asked for it (load_first_blocks)."""
        key = block_key(oid, idx, self.block_size)
        data = self.ram.get(key)
        if data is not None:
            self._ram_hits.inc()
            return data
        self._ram_misses.inc()
        flight = self._inflight.get(key)
        while flight is not None:
            await flight.done.wait()
            if flight.error is not None:
                raise _detached(flight.error)
            if flight.data is not None:
                return flight.data
            # a batch from peers that did not get it (load_first_blocks): load it here,
            # unless another task did meanwhile
            data = self.ram.get(key)
            if data is not None:
                return data
            flight = self._inflight.get(key)
        return await self._fly(oid, idx, key, self._take_off(key), on_disk, ask_peers)

    def _take_off(self, key: bytes) -> _Flight:
        """Register the load of a block nobody is loading (raising at once what it failed
        with a moment ago, see _remember_failure)."""
        failed = self._recent_failures.get(key)
        if failed is not None:
            if trio.current_time() < failed[0]:
                raise _detached(failed[1])
            del self._recent_failures[key]
        flight = self._inflight[key] = _Flight()
        return flight

    async def _fly(self, oid: ObjectId, idx: int, key: bytes, flight: _Flight,
                   on_disk: bool = False, ask_peers: bool = True) -> bytes:
        """Load the block of *flight* (registered by _take_off), answer its waiters."""
        try:
            data, keep = await self._load(oid, idx, on_disk, ask_peers, flight)
            flight.data = data
            if keep:
                self.ram.put(key, data, self._streamed(oid))
            return data
        except BaseException as e:
            flight.error = _detached(e) if isinstance(e, Exception) \
                else errors.StoreError("cancelled")
            # A block S3 answered for but would not serve (5xx, resets, short bodies until
            # the deadline) fails again at once for a while, so the kernel's re-sent read
            # does not wait a second bound. An unreachable S3 is the circuit breaker's:
            # it fails fast there and recovers as soon as its probe gets an answer.
            if isinstance(e, errors.StoreUnavailable | errors.DeadlineExceeded) and (
                    self.breaker is None or not self.breaker.is_open):
                self._remember_failure(key, flight.error)
            raise
        finally:
            del self._inflight[key]
            flight.done.set()
            flight.moved.set()

    async def _while_arriving(self, oid: ObjectId, idx: int, lo: int, hi: int
                              ) -> bytes | memoryview | None:
        """Bytes [lo, hi) of block *idx* as soon as they have come, while the rest of the
        block is still arriving from S3; None: read the block whole (``get_block``).

        What the first read of a cold block waits for is then its own bytes, not the last
        of an 8 MiB block (the first bytes of a file, a random read, the first batch of a
        cold shard). Such a block is loaded in a task of its own for this, when the read
        wants less than all of it. Only those: blocks that read-ahead loads are waited for
        whole (a reader that caught up with its stream, woken as the bytes came, gained
        nothing measurable for a wake-up of the loop per read). The bytes come from the
        buffer the GET writes into (``_Flight``), sliced without a yield, so the buffer
        cannot be handed to another GET in between. The caller (``read``) has just found
        the block not in RAM (``_block_nowait``), with no yield since."""
        key = block_key(oid, idx, self.block_size)
        flight = self._inflight.get(key)
        if flight is None:
            start, end = oid.block_span(idx, self.block_size)
            if (self._nursery is None or not oid.etag or hi >= end - start
                    or end - start != self.block_size or self._in_node_cache(oid, idx)):
                return None
            # The block's buffer is the read-ahead budget's while it arrives: a reader
            # answered early reads on, and would otherwise have as many blocks in flight
            # beside it as there are connections (a random reader).
            try:
                self._budget.acquire_nowait()
            except trio.WouldBlock:
                return None
            try:
                flight = self._take_off(key)
            except BaseException:
                self._budget.release()
                raise
            flight.for_reader = True
            try:
                self._nursery.start_soon(self._fly_for_reader, oid, idx, key, flight)
            except RuntimeError:  # the mount is stopping: load it in this task
                self._budget.release()
                del self._inflight[key]
                flight.done.set()
                return None
        elif not flight.for_reader:
            return None
        while not flight.done.is_set():
            buf = flight.buf
            if buf is not None and flight.filled >= hi:
                self.metrics.streamed_reads.inc()
                flight.viewed = True
                return memoryview(buf)[lo:hi]
            if not flight.need or hi < flight.need:
                flight.need = hi
            if buf is not None and flight.filled >= hi:  # came while need was set
                continue
            moved = flight.moved
            await moved.wait()
            if flight.moved is moved and not flight.done.is_set():
                flight.moved = trio.Event()
        if flight.error is not None:
            raise _detached(flight.error)
        return None if flight.data is None else _slice(flight.data, lo, hi)

    def _in_node_cache(self, oid: ObjectId, idx: int) -> bool:
        """Whether the node cache holds the block (an index lookup on the loop, timed for
        the index warmer): such a block is read whole from disk, as before, not loaded
        beside its reader. Its bytes do not come in parts, and random reads from a
        remounted node cache measured 1.3-2x slower that way in three pairs of runs (a
        noise that wide left the cause unfound)."""
        if self.disk is None:
            return False
        t = time.perf_counter()
        try:
            return self.disk.contains_block(oid, idx)
        except lmdb.Error:
            return False
        finally:
            self.index_noticed(time.perf_counter() - t)

    async def _fly_for_reader(self, oid: ObjectId, idx: int, key: bytes,
                              flight: _Flight) -> None:
        """A reader's block, loaded beside it (``_while_arriving``): what fails is the
        reader's to raise (``flight.error``), within the same bound. Holds a block of the
        read-ahead budget (taken by _while_arriving) until the block has landed."""
        try:
            with trio.move_on_after(self.read_timeout) as scope:
                await self._fly(oid, idx, key, flight)
            if scope.cancelled_caught:
                self._no_answer()
        except Exception as e:  # noqa: BLE001 - the waiting reader raises it
            log.debug("block %d of %s failed: %s", idx, oid.key, e)
        finally:
            self._budget.release()

    def _arrived(self, flight: _Flight) -> Callable[[int], None]:
        """The GET's progress callback for *flight* (called in its worker thread)."""
        token = self._token

        def progress(n: int) -> None:
            flight.filled = max(flight.filled, n)  # a retry rewrites the same bytes
            need = flight.need
            if need and flight.filled >= need and token is not None:
                flight.need = 0
                try:
                    token.run_sync_soon(flight.moved.set)
                except trio.RunFinishedError:
                    pass
        return progress

    def _streamed(self, oid: ObjectId) -> bool:
        """Objects too big to keep whole in RAM go to the stream segment."""
        return oid.size > self._stream_threshold

    def _no_answer(self) -> None:
        """A read or read-ahead timed out: an outage (the breaker opens, later requests
        fail fast) unless S3 sent body bytes within the bound, which is a slow link, not
        an outage: a blind test of the mount saw the breaker open on an 8 Mbit/s link
        that delivered all along, and every operation then fail fast."""
        if self.breaker is None:
            return
        now = time.monotonic()
        if now - self.store.body_seen_at < self.read_timeout:
            if now - self._slow_said_at > 60:  # (at most a line a minute)
                self._slow_said_at = now
                log.warning("a read of S3 timed out after %gs while S3 was sending (a link "
                            "too slow for the blocks in flight? fewer --max-connections, "
                            "a longer --read-timeout): not counted as an outage",
                            self.read_timeout)
            return
        self.breaker.trip(f"a read got no answer within {self.read_timeout:g}s")

    def _fail_fast(self, oid: ObjectId) -> None:
        if self.breaker is not None:
            self.breaker.check(f"GET s3://{oid.bucket}/{oid.key}")

    def _remember_failure(self, key: bytes, e: Exception) -> None:
        """The kernel re-sends a failed read page by page (read-ahead, then a
        synchronous retry); failing those fast keeps a dead S3 from turning one
        read() into minutes of waiting."""
        self._recent_failures[key] = (trio.current_time() + self._failure_memory, e)
        if len(self._recent_failures) > 1024:
            self._recent_failures.popitem(last=False)

    # -- loading -------------------------------------------------------------------

    async def _load(self, oid: ObjectId, idx: int, on_disk: bool = False,
                    ask_peers: bool = True, flight: _Flight | None = None
                    ) -> tuple[bytes, bool]:
        """(the block, whether the RAM tier should keep it): not a small one from the
        node cache (see _block_nowait)."""
        start, end = oid.block_span(idx, self.block_size)
        small = end - start <= _INLINE_DISK_READ
        if self.disk is not None:
            # A small block is looked up on the loop, as in _block_nowait: a cold small
            # file then costs one thread hand-off (the GET), not two. One the node cache
            # holds but the page cache does not is read in a worker thread, without a
            # second try on the loop when the caller has just made it (*on_disk*).
            data = None
            if small and not on_disk:
                try:
                    data = self._disk_get_inline(oid, idx)
                except NotInMemory:
                    on_disk = True
            if data is None and (on_disk or not small):
                data = await self._disk_get(oid, idx, end - start)
            if data is not None:
                self._disk_hits.inc()
                return data, not small
            self._disk_misses.inc()
        if self.peers is not None and ask_peers:
            data = await self._peer_get(oid, idx)
            if data is not None:
                if self.peer_store:
                    await self._store_later(oid, idx, data)
                return data, True
        self._fail_fast(oid)  # before queueing for a connection held by a stuck request
        async with self._connections:
            self._fail_fast(oid)
            into = self._get_buffer(end - start)  # the worker thread's until it returns
            progress = None
            if flight is not None and flight.for_reader:  # a full block: a lent buffer
                flight.buf, progress = into, self._arrived(flight)
            try:
                data = await self._calls.run(partial(
                    self.store.get_range, oid.key, start, end, oid.etag, into=into,
                    progress=progress))
            finally:
                if flight is not None:
                    flight.buf = None  # readers now take the block, or its error
            if flight is None or not flight.viewed:  # else a reply may still refer to it
                self._unused(into, data)  # a store that ignores it, a body that did not fit
        if len(data) != end - start:  # the store checks too; never cache a short block
            raise errors.StoreError(f"short block {idx} of {oid.key}")
        self.metrics.add_pending("s3_bytes", len(data))
        self.metrics.add_pending("s3_gets", 1)
        await self._store_later(oid, idx, data)
        return data, True

    def peers_active(self) -> bool:
        """Whether a cache group may be asked for blocks (cheap: for the trio thread)."""
        return self.peers is not None and self.peers.active()

    async def load_first_blocks(self, oids: list[ObjectId]) -> list[ObjectId]:
        """Load the first blocks of these one-block objects from the group in one go
        (folder read-ahead): a reader of one of them meanwhile waits for this, as for
        any load. Returns those the group did not give (not in RAM or being loaded
        elsewhere): load them with ``get_block(ask_peers=False)``.

        Each block from a peer lands like one from ``get_block``: RAM tier, then the
        node cache through write-behind (unless ``peer_store`` is off).
        """
        assert self.peers is not None
        mine: dict[ObjectId, tuple[bytes, _Flight]] = {}
        for oid in oids:
            key = block_key(oid, 0, self.block_size)
            if oid.block_count(self.block_size) == 1 and key not in self.ram \
                    and key not in self._inflight:
                mine[oid] = (key, _Flight())
                self._inflight[key] = mine[oid][1]
        got: dict[ObjectId, bytes] = {}
        try:
            if mine:
                budget = min(self.read_timeout,
                             trio.current_effective_deadline() - trio.current_time())
                async with self._peer_batch_slots:
                    got = await self._calls.run(
                        first_blocks_from_peers, self.peers, list(mine), self.block_size,
                        budget)
            for oid, data in got.items():
                key, flight = mine[oid]
                flight.data = data
                self.ram.put(key, data, self._streamed(oid))
        finally:
            # blocks the group did not give: their waiters load them themselves
            for key, flight in mine.values():
                del self._inflight[key]
                flight.done.set()
        if self.peer_store:  # after the waiters are served; a full queue holds up the caller
            for oid, data in got.items():
                await self._store_later(oid, 0, data)
        return [o for o in oids if o not in got and not self.in_memory(o, 0)]

    async def _peer_get(self, oid: ObjectId, idx: int) -> bytes | None:
        """The block from the group within what is left of this read's deadline."""
        assert self.peers is not None
        if not self.peers.active():
            return None
        budget = trio.current_effective_deadline() - trio.current_time()
        start, end = oid.block_span(idx, self.block_size)
        async with self._peer_slots:
            # a full block: a spare, as a GET's; taken once a slot is, so that a task
            # waiting for one holds no buffer
            into = self._lend_buffer(end - start)
            data = await self._calls.run(
                fetch_from_peers, self.peers, oid, idx, self.block_size,
                min(budget, self.read_timeout), into)
        self._unused(into, data)  # a miss: kept for the next read
        return data

    async def _store_later(self, oid: ObjectId, idx: int, data: bytes) -> None:
        """Hand a fetched block to the write-behind thread for the node cache."""
        if self.disk is not None and not self._writer.off() \
                and not self._writer.offer(oid, idx, data):
            await self._queue_write(oid, idx, data)

    async def _queue_write(self, oid: ObjectId, idx: int, data: bytes) -> None:
        """Back-pressure: a fill may not outrun the disk, or the cache stays empty.

        Only a disk that cannot take a block for _WRITE_STALL seconds makes us drop it.
        """
        deadline = time.monotonic() + _WRITE_STALL
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not await trio.to_thread.run_sync(
                    self._writer.wait_room, len(data), left, abandon_on_cancel=True):
                break
            if self._writer.offer(oid, idx, data):
                return
        self.metrics.add_pending("write_dropped", 1)
        log.warning("node cache writes stalled for %.0fs; block %d of %s not cached",
                    _WRITE_STALL, idx, oid.key)

    async def _disk_get(self, oid: ObjectId, idx: int, length: int) -> bytes | None:
        assert self.disk is not None
        limiter = self._small_disk_threads if length <= _INLINE_DISK_READ else self._disk_threads
        into = self._lend_buffer(length)
        async with limiter:  # the worker thread owns *into* until it returns
            data = await trio.to_thread.run_sync(
                partial(_disk_read, self.disk, oid, idx, into))
        self._unused(into, data)  # a miss, a failure, or read through the map
        return data

    async def _disk_range(self, oid: ObjectId, idx: int, lo: int, hi: int) -> bytes | None:
        """Bytes [lo, hi) of a block the RAM tier does not hold, read and checked granule
        by granule from the node cache (``NodeCache.get_range``) in a worker thread; None
        when it has no such block (the caller loads the whole block, as for any read)."""
        start, end = oid.block_span(idx, self.block_size)
        key = block_key(oid, idx, self.block_size)
        if self.disk is None or end - start <= _INLINE_DISK_READ or key in self._inflight \
                or key in self.ram:
            return None
        async with self._small_disk_threads:
            data = await trio.to_thread.run_sync(
                partial(_disk_range_read, self.disk, oid, idx, lo, hi))
        if data is not None:
            self._ram_misses.inc()
            self._disk_hits.inc()
        return data

    def _lend_buffer(self, length: int) -> bytearray | None:
        """A buffer to read a full block into (one the RAM tier let go, else a new one);
        None for a shorter read."""
        if length != self.block_size:
            return None
        return self._spare.pop() if self._spare else block_buffer(length)

    def _get_buffer(self, length: int) -> bytearray:
        """The buffer a GET of *length* bytes streams its body into: a full block's as
        ``_lend_buffer``, else one of exactly that size. Not the client's own body
        buffer: obstore's held 21-24 KiB more per 60-160 KiB body (measured with
        mallinfo2 over 400 bodies), memory the RAM tier's bound does not see."""
        return self._lend_buffer(length) or block_buffer(length)

    def _unused(self, into: bytearray | None, data: object) -> None:
        """Keep a lent buffer the read returned without using, for the next one. Only
        after the call returned: an abandoned call's thread may still write into it."""
        if into is not None and data is not into and len(into) == self.block_size \
                and len(self._spare) < self._spare_max:
            self._spare.append(into)

    def _recycle(self, key: bytes, block: bytes | bytearray) -> None:
        """RamCache.on_evict: keep the buffer of a full block read from disk for the next
        read, unless anything else still refers to it (a reply's or a waiter's view, a
        task about to slice it): such a buffer is left to the garbage collector. A block
        read ahead and let go unread gives its budget back."""
        if self._unread:
            self._unread_gone(key)
        if (type(block) is bytearray and len(block) == self.block_size
                and len(self._spare) < self._spare_max
                and sys.getrefcount(block) <= self._unshared_refs):
            self._spare.append(block)

    def _disk_get_inline(self, oid: ObjectId, idx: int) -> bytes | None:
        """The block if the node cache has it in the page cache; None on a miss;
        NotInMemory when it is on disk only (the caller reads it in a thread)."""
        assert self.disk is not None
        t = time.perf_counter()
        try:
            return self.disk.get_block(oid, idx, nowait=True)
        except lmdb.Error as e:
            log.warning("node cache read failed (%s); reading from S3", e)
            return None
        finally:
            self.index_noticed(time.perf_counter() - t)

    # -- read-ahead -----------------------------------------------------------------

    def _plan_readahead(self, oid: ObjectId, state: ReadState, offset: int, end: int,
                        first: int, last: int) -> None:
        # The kernel's own read-ahead sends several requests at once and they can
        # arrive out of order, so "sequential" means "near where the last ended".
        sequential = abs(offset - state.next_offset) <= _SEQUENTIAL_SLACK
        state.next_offset = max(end, state.next_offset) if sequential else end
        if not sequential or self.readahead_max_blocks == 0 or self._nursery is None:
            state.window = 0
            state.ahead_until = last + 1
            return
        # A read from the very start of an object is the usual start of a whole-file
        # pass (a shard, a checkpoint): open with a 4-block window, not 1.
        start = _START_WINDOW if offset == 0 and state.window == 0 else 1
        state.window = min(self.readahead_max_blocks, max(start, state.window * 2))
        if 0 <= state.last_block < first:  # read past: first to go from the RAM tier
            for idx in range(max(state.last_block, first - 2), first):
                self.ram.demote(block_key(oid, idx, self.block_size))
        state.last_block = last
        total = math.ceil(oid.size / self.block_size)
        target = min(total, last + 1 + state.window)
        idx = max(state.ahead_until, last + 1)
        while idx < target:
            key = block_key(oid, idx, self.block_size)
            if key not in self.ram and key not in self._inflight:
                if not self._take_budget():
                    break  # budget spent: do not queue more, the reader catches up
                self.metrics.readahead_bytes.inc(self.block_size)
                self._nursery.start_soon(self._prefetch, oid, idx)
            idx += 1
        state.ahead_until = idx

    async def _prefetch(self, oid: ObjectId, idx: int) -> None:
        held = False  # landed in RAM: the budget stays taken until a read reaches it
        try:
            with trio.move_on_after(self.read_timeout) as scope:
                await self.get_block(oid, idx)
            if scope.cancelled_caught:
                self._no_answer()
            else:
                key = block_key(oid, idx, self.block_size)
                if key in self.ram and key not in self._unread:
                    self._unread[key] = time.monotonic()
                    held = True
        except Exception as e:  # noqa: BLE001 - read-ahead is best effort; the reader retries
            log.debug("read-ahead of block %d of %s failed: %s", idx, oid.key, e)
        finally:
            if not held:
                self._give_back()

    def _take_budget(self) -> bool:
        """One block of the read-ahead budget, if there is one; blocks read ahead and
        left unread for _UNREAD_MAX_AGE give theirs back first."""
        try:
            self._budget.acquire_nowait()
            return True
        except trio.WouldBlock:
            pass
        old = time.monotonic() - _UNREAD_MAX_AGE
        while self._unread and next(iter(self._unread.values())) < old:
            self._unread.popitem(last=False)
            self._give_back()
        try:
            self._budget.acquire_nowait()
            return True
        except trio.WouldBlock:
            return False

    def _unread_gone(self, key: bytes) -> None:
        """A block read ahead was reached by a read, or left the RAM tier unread."""
        if self._unread.pop(key, None) is not None:
            self._give_back()

    def _give_back(self) -> None:
        self._budget.release()
        self.metrics.readahead_bytes.dec(self.block_size)


class _WriteBehind:
    """Stores fetched blocks in the node cache from one thread of its own.

    The trio thread hands a block over with ``offer``: a deque append under a lock, no
    task switch and no thread hand-off per block (measured: the per-block trio task
    and ``to_thread`` of the former write-behind were a visible share of the trio
    thread's time in a cold small-file pass). Bounded in bytes: ``offer`` refuses a
    block that would pass ``max_bytes`` (unless the queue is empty), and the caller
    waits for room in a worker thread (``wait_room``) or drops the block. On a disk
    error the thread drops what it holds and refuses blocks for _DISK_RETRY_AFTER
    seconds (``off``), serving from S3 only meanwhile. ``close`` lets the thread store
    what is queued (bounded by the same wait) and stops it.
    """

    def __init__(self, disk: NodeCache | None, max_bytes: int) -> None:
        self._disk = disk
        self._max = max_bytes
        self._cond = threading.Condition()
        self._items: deque[tuple[ObjectId, int, bytes]] = deque()
        self._bytes = 0
        self._closed = False
        self._off_until = 0.0  # time.monotonic()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._disk is None or self._thread is not None:
            return
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="fusecache-write-behind",
                                        daemon=True)
        self._thread.start()

    def off(self) -> bool:
        return time.monotonic() < self._off_until

    def offer(self, oid: ObjectId, idx: int, data: bytes) -> bool:
        with self._cond:
            if self._items and self._bytes + len(data) > self._max:
                return False
            self._items.append((oid, idx, data))
            self._bytes += len(data)
            self._cond.notify()
            return True

    def wait_room(self, nbytes: int, timeout: float) -> bool:
        """Blocking (a worker thread): True once a block of *nbytes* would be taken."""
        with self._cond:
            return self._cond.wait_for(
                lambda: not self._items or self._bytes + nbytes <= self._max, timeout)

    def close(self, timeout: float = _WRITE_STALL) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        name_os_thread()
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._items or self._closed)
                if not self._items:
                    return  # closed and drained
                batch = _next_write_batch(self._items, _WRITE_BATCH, _WRITE_BATCH_BYTES)
            n = self._store(batch)
            del batch  # not held while the thread waits for more
            with self._cond:
                for _ in range(n):
                    self._bytes -= len(self._items.popleft()[2])
                self._cond.notify_all()

    def _store(self, batch: list[tuple[ObjectId, int, bytes]]) -> int:
        """Write *batch* to the node cache; how many blocks it had. A function of its
        own so that nothing of the batch outlives it (no loop variable): the thread must
        not hold blocks the RAM tier has let go while it waits for more."""
        assert self._disk is not None
        try:
            if not self.off():
                for (oid, idx, _), ok in zip(batch, self._disk.put_blocks(batch),
                                             strict=True):
                    if not ok:
                        log.debug("node cache full of pinned data; block %d of %s not "
                                  "cached", idx, oid.key)
        except (lmdb.Error, OSError) as e:
            self._off_until = time.monotonic() + _DISK_RETRY_AFTER
            log.warning("cannot write to the node cache (%s); serving from S3 only, "
                        "retrying in %.0fs", e, _DISK_RETRY_AFTER)
        except Exception:  # noqa: BLE001 - the thread must outlive one bad block
            log.exception("node cache write of %d block(s) failed", len(batch))
        return len(batch)


def _next_write_batch(items: deque[tuple[ObjectId, int, bytes]], most: int,
                      most_bytes: int) -> list[tuple[ObjectId, int, bytes]]:
    """The queue's first blocks, at most *most* of them and *most_bytes* (at least one)."""
    out: list[tuple[ObjectId, int, bytes]] = []
    nbytes = 0
    for item in items:
        if out and (len(out) >= most or nbytes + len(item[2]) > most_bytes):
            break
        out.append(item)
        nbytes += len(item[2])
    return out
