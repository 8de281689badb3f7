"""The node cache's index paged back in after the kernel dropped it (fusecache/indexwarm.py).

Watched with mincore on a disk-backed cache: after a walk the index databases' pages are
in memory again and the blocks' are not; a fast lookup starts nothing, a slow one a walk,
and walks keep a distance; close() waits for a walk to end.
"""

from __future__ import annotations

import time
from pathlib import Path

from fusecache.indexwarm import IndexWarmer
from fusecache.listings import DirEntry, ListingCache
from fusecache.nodecache import NodeCache, ObjectId

from pagecache import evict_node_cache, resident_pages

BS = 64 * 1024


def _cache(path: Path, n: int) -> tuple[NodeCache, ListingCache]:
    """*n* one-block objects, listed in one folder (its entries share a key prefix)."""
    cache = NodeCache.open(path, limit_bytes=4 * n * BS, block_size=BS)
    listings = ListingCache(cache.env)
    writer = listings.writer("b", "d/")
    for i in range(n):
        o = ObjectId("b", f"d/f{i:05d}", f"e{i}", BS)
        assert cache.put_block(o, 0, bytes([i % 251]) * BS)
        writer.add(DirEntry(f"f{i:05d}", False, BS, f"e{i}", 1.0))
    writer.commit()
    return cache, listings


def _wait_for_a_walk(warmer: IndexWarmer) -> None:
    deadline = time.monotonic() + 10
    while warmer.walks == 0:
        assert time.monotonic() < deadline, "no walk"
        time.sleep(0.01)
    warmer._thread.join(10)


def test_a_walk_pages_the_index_in_and_not_the_blocks(disk_tmp_path: Path) -> None:
    cache, listings = _cache(disk_tmp_path, 600)
    data = disk_tmp_path / "cache.lmdb" / "data.mdb"
    dbs = cache.index_dbs() + listings.index_dbs()
    with cache.env.begin() as txn:
        leaves = sum(txn.stat(db)["leaf_pages"] for db in dbs)
    evict_node_cache(cache, disk_tmp_path)
    warmer = IndexWarmer(cache.env, dbs)
    assert warmer.start()
    _wait_for_a_walk(warmer)
    cache._release_mapped_pages()
    resident = resident_pages(data)
    block_pages = 600 * BS // 4096
    assert leaves <= resident < block_pages // 4, (leaves, resident, block_pages)
    cache.close()


def test_only_a_lookup_that_read_the_disk_starts_a_walk_and_walks_keep_a_distance(
        disk_tmp_path: Path) -> None:
    cache, listings = _cache(disk_tmp_path, 200)
    warmer = IndexWarmer(cache.env, cache.index_dbs() + listings.index_dbs())
    o = ObjectId("b", "d/f00007", "e7", BS)
    cache.get_block(o, 0)  # whatever faults opening and first reads take
    warmer.noticed(0.0001)  # a page cache hit
    warmer.noticed(0.01)  # slow, but no page fault since: waiting for the GIL, say
    time.sleep(0.1)
    assert warmer.walks == 0
    evict_node_cache(cache, disk_tmp_path)
    cache.get_block(o, 0)  # the index read back from disk through the map, on this thread
    warmer.noticed(0.01)
    _wait_for_a_walk(warmer)
    assert not warmer.start()  # within the distance after the last walk
    warmer.close()
    assert not warmer.start()  # closed: never again
    cache.close()
