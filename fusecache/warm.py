"""Filling the node cache without a mount: the primitive prefetchd builds on."""

from __future__ import annotations

from fusecache.nodecache import NodeCache, ObjectId
from fusecache.store import ObjectInfo, ObjectStore


def fetch_object(store: ObjectStore, cache: NodeCache, info: ObjectInfo,
                 pin_owner: str | None = None, pin_ttl: float | None = None) -> int:
    """Fetch the blocks of *info* not yet cached; return the bytes transferred.

    Blocking (call from a worker thread). Pins first when *pin_owner* is given, so
    the blocks being fetched cannot be evicted by a concurrent fill. Raises the
    store's errors; a block that does not fit (cache full of pinned data) raises
    ``CacheFull``.
    """
    oid = ObjectId(store.bucket, info.key, info.etag, info.size)
    if pin_owner is not None:
        cache.pin_object(oid, pin_owner, pin_ttl)
    moved = 0
    for idx in cache.missing_blocks(oid):
        start, end = oid.block_span(idx, cache.block_size)
        data = store.get_range(info.key, start, end, info.etag)
        if not cache.put_block(oid, idx, data):
            raise CacheFull(f"node cache full of pinned data; s3://{store.bucket}/{info.key} "
                            f"block {idx} not cached")
        moved += len(data)
    return moved


class CacheFull(Exception):
    """The node cache cannot take more without evicting pinned data."""
