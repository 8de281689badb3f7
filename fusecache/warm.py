"""Filling the node cache without a mount: the primitive prefetchd builds on.

Who calls it: prefetchd's warmer (``prefetchd/warm.py``; also under the node agent) and
tests. Data flow: blocks come from the cache group's peers when one serves them
(peer_client.py), else from S3 (ranged GETs), and are stored in the node cache.
``fetch_object`` moves one object (its blocks in parallel); ``fetch_small_from_peers``
asks the group for many one-block objects in one call (GetBlocks) and stores them in one
write transaction, so a warm of a small-file dataset from a peer costs a call per batch,
not per file; what the group did not give is then fetched with ``fetch_object``.
"""

from __future__ import annotations

import concurrent.futures as cf
from collections.abc import Callable
from typing import TYPE_CHECKING

from fusecache.nodecache import NodeCache, ObjectId
from fusecache.store import ObjectInfo, ObjectStore

if TYPE_CHECKING:
    from fusecache.peer_client import PeerClient


class CacheFull(Exception):
    """The node cache cannot take more without evicting pinned data."""


def fetch_object(store: ObjectStore, cache: NodeCache, info: ObjectInfo,
                 pin_owner: str | None = None, pin_ttl: float | None = None, *,
                 parallel: int = 1, on_block: Callable[[int], None] | None = None,
                 peers: PeerClient | None = None,
                 want: Callable[[int], bool] | None = None) -> int:
    """Fetch the blocks of *info* not yet cached; return the bytes transferred.

    Blocking (call from a worker thread). Pins first when *pin_owner* is given, so
    the blocks being fetched cannot be evicted by a concurrent fill. With
    *parallel* > 1, up to that many ranged GETs of this object run at once (a
    large object then moves at link speed); at most *parallel* blocks are held in
    memory. *on_block(nbytes)* is called after each stored block (progress,
    throttling). With *peers* (peer_client.py), each block is asked of the cache
    group first and read from S3 only when no peer serves it. *want(index)* False
    skips that block (``prefetchd warm --group-striping`` fetches only the blocks this
    node owns in the cache group). Raises the store's
    errors, or CacheFull when a block does not fit without evicting pinned data.
    """
    oid = ObjectId(store.bucket, info.key, info.etag, info.size)
    if pin_owner is not None:
        cache.pin_object(oid, pin_owner, pin_ttl)
    missing = cache.missing_blocks(oid)
    if want is not None:
        missing = [idx for idx in missing if want(idx)]
    bs = cache.block_size

    def get(idx: int) -> bytes:
        data = _from_peers(peers, oid, idx, bs)
        if data is not None:
            return data
        start, end = oid.block_span(idx, bs)
        return store.get_range(info.key, start, end, info.etag)

    def store_block(idx: int, data: bytes) -> int:
        if not cache.put_block(oid, idx, data):
            raise CacheFull(f"node cache full of pinned data; s3://{store.bucket}/{info.key} "
                            f"block {idx} not cached")
        if on_block is not None:
            on_block(len(data))
        return len(data)

    if parallel <= 1 or len(missing) <= 1:
        return sum(store_block(idx, get(idx)) for idx in missing)

    def fetch_and_store(idx: int) -> int:
        # Each worker stores its own block: while one waits for the cache's write lock
        # (held by another store, or another process), the others' GETs go on. Each
        # holds one block: at most *parallel* in memory.
        return store_block(idx, get(idx))

    moved = 0
    todo = iter(missing)
    with cf.ThreadPoolExecutor(min(parallel, len(missing)),
                               thread_name_prefix="fusecache-fetch") as pool:
        window = {pool.submit(fetch_and_store, idx) for idx in _take(todo, parallel)}
        try:
            while window:
                done, window = cf.wait(window, return_when=cf.FIRST_COMPLETED)
                for fut in done:
                    moved += fut.result()
                window |= {pool.submit(fetch_and_store, idx) for idx in _take(todo, len(done))}
        finally:
            for fut in window:
                fut.cancel()
    return moved


def fetch_small_from_peers(peers: PeerClient, cache: NodeCache, bucket: str,
                           infos: list[ObjectInfo], pin_owner: str | None = None,
                           pin_ttl: float | None = None, *,
                           on_block: Callable[[int], None] | None = None
                           ) -> tuple[list[int | None], bool]:
    """Fill the cache with these one-block objects from the cache group, many per call.

    Blocking (a worker thread). Returns, per object in order, the bytes stored (0: it was
    cached already) or None (not stored: no peer gave it, fetch it with ``fetch_object``
    from S3; or it did not fit), and whether one did not fit without evicting pinned data
    (the cache is full: stop). Pins each object first when *pin_owner* is given, as
    ``fetch_object`` does, and drops that pin again from those it did not store. The
    objects still lacking are asked of the group together
    (``PeerClient.fetch_first_blocks``: one GetBlocks call per peer and round, each block
    verified) and what came is stored in one write transaction. Raises ValueError for an
    object of more than one block.
    """
    bs = cache.block_size
    oids = [ObjectId(bucket, i.key, i.etag, i.size) for i in infos]
    for oid in oids:
        if oid.block_count(bs) != 1:
            raise ValueError(f"s3://{bucket}/{oid.key}: {oid.size} bytes is not one block")
    if pin_owner is not None:
        for oid in oids:
            cache.pin_object(oid, pin_owner, pin_ttl)
    lacking = cache.lacking_first_blocks(oids)
    from fusecache.peer_client import first_blocks_from_peers  # gRPC only with a group

    got = first_blocks_from_peers(peers, lacking, bs) if lacking else {}
    given = list(got.items())
    stored = cache.put_blocks([(oid, 0, data) for oid, data in given]) if given else []
    unfit = {oid for (oid, _), ok in zip(given, stored, strict=True) if not ok}
    for oid, data in given:
        if oid not in unfit and on_block is not None:
            on_block(len(data))
    not_stored = unfit | {o for o in lacking if o not in got}
    if pin_owner is not None:  # fetch_object pins again what is fetched from S3
        for oid in not_stored:
            cache.unpin_object(oid, pin_owner)
    return [None if o in not_stored else len(got[o]) if o in got else 0
            for o in oids], bool(unfit)


def _from_peers(peers: PeerClient | None, oid: ObjectId, idx: int, bs: int) -> bytes | None:
    """The block from the cache group, or None (gRPC is imported only with a group)."""
    if peers is None:
        return None
    from fusecache.peer_client import fetch_from_peers

    return fetch_from_peers(peers, oid, idx, bs)


def _take(it, n: int) -> list[int]:
    out = []
    for _ in range(n):
        try:
            out.append(next(it))
        except StopIteration:
            break
    return out
