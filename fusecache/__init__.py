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
- ``S3Store(bucket, endpoint_url=..., ...)``: boto3 access with one retry policy;
  ``head``, ``get_range``, ``list_page``; raises the ``errors`` family.
- ``fetch_object(store, cache, info)``: fill the cache with one object's missing blocks.
- ``offline_auth.record_authorised(cache, store, bucket, prefix)``: after a warm, let
  mounts with the same credential serve that prefix while S3 is unreachable.
"""

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

__version__ = "0.1.0"
__all__ = [
    "CacheConfig", "CacheFull", "CacheStats", "ListingCache", "MountConfig", "NodeCache",
    "ObjectId", "ObjectInfo", "S3Location", "S3Store", "errors", "fetch_object", "parse_size",
    "parse_ttl",
]
