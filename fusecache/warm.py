"""Filling the node cache without a mount: the primitive prefetchd builds on.

Blocks come from the cache group's peers when one serves them (peer_client.py), else
from S3 (ranged GETs), and are stored in the node cache.
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
