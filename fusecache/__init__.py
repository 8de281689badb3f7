"""fusecache: a read-only caching FUSE filesystem over S3, and its node cache API.

The public Python API (used by prefetchd and the CSI plugin):

- ``NodeCache.open(cache_dir, limit_bytes=None, block_size=None)``: the node's
  LMDB block cache; ``put_block/get_block/contains_block/missing_blocks/
  contains_object``, ``pin_object/unpin_object/pin_block/unpin_block/is_pinned``,
  ``stats()``, ``flush_touches()``, ``close()``. Methods block: call them from a
  thread when on an event loop.
- ``ObjectId(bucket, key, etag, size)``: identity of an object's bytes.
- ``ListingCache(node_cache.env)``: directory listings shared with mounts;
  ``store_recursive(bucket, prefix, objects)`` stores a warmed prefix's listing.
- ``S3Store(bucket, endpoint_url=..., ...)``: S3 access with one retry policy (``head``,
  ``has_under``, ``list_dir`` and ``get_range`` through obstore, which returns a
  ``memoryview``; boto3 for ``list_page`` and for what obstore cannot name); raises the
  ``errors`` family.
- ``fetch_object(store, cache, info)``: fill the cache with one object's missing blocks;
  ``fetch_small_from_peers(peers, cache, bucket, infos)``: many one-block objects from the
  cache group, a call per batch.
- ``offline_auth.record_authorised(cache, store, bucket, prefix)``: after a warm, let
  mounts with the same credential serve that prefix while S3 is unreachable.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fusecache import errors as errors
    from fusecache.config import CacheConfig as CacheConfig
    from fusecache.config import MountConfig as MountConfig
    from fusecache.config import S3Location as S3Location
    from fusecache.config import parse_size as parse_size
    from fusecache.config import parse_ttl as parse_ttl
    from fusecache.listings import ListingCache as ListingCache
    from fusecache.nodecache import CacheStats as CacheStats
    from fusecache.nodecache import NodeCache as NodeCache
    from fusecache.nodecache import ObjectId as ObjectId
    from fusecache.s3store import S3Store as S3Store
    from fusecache.store import ObjectInfo as ObjectInfo
    from fusecache.warm import CacheFull as CacheFull
    from fusecache.warm import fetch_object as fetch_object
    from fusecache.warm import fetch_small_from_peers as fetch_small_from_peers

# The names are imported when first used (PEP 562), so that a command line that only
# needs a submodule (fusecache.cliargs for `prefetchd plan`) does not pay for boto3 and LMDB.
_EXPORTS = {
    "errors": "fusecache", "CacheConfig": "fusecache.config", "MountConfig": "fusecache.config",
    "S3Location": "fusecache.config", "parse_size": "fusecache.config",
    "parse_ttl": "fusecache.config", "ListingCache": "fusecache.listings",
    "CacheStats": "fusecache.nodecache", "NodeCache": "fusecache.nodecache",
    "ObjectId": "fusecache.nodecache", "S3Store": "fusecache.s3store",
    "ObjectInfo": "fusecache.store", "CacheFull": "fusecache.warm",
    "fetch_object": "fusecache.warm", "fetch_small_from_peers": "fusecache.warm",
}


def __getattr__(name: str) -> object:
    import importlib

    where = _EXPORTS.get(name)
    if where is None:
        raise AttributeError(f"module 'fusecache' has no attribute {name!r}")
    if name == "errors":
        return importlib.import_module("fusecache.errors")
    return getattr(importlib.import_module(where), name)


__version__ = "0.1.0"
__all__ = [
    "CacheConfig", "CacheFull", "CacheStats", "ListingCache", "MountConfig", "NodeCache",
    "ObjectId", "ObjectInfo", "S3Location", "S3Store", "errors", "fetch_object",
    "fetch_small_from_peers", "parse_size", "parse_ttl",
]
