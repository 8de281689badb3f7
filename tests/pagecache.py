"""Test helper: push a node cache's bytes out of the kernel's page cache, so that the
next read of them has to wait for the disk (the remount-after-drop_caches case)."""

from __future__ import annotations

import os
from pathlib import Path

from fusecache.nodecache import NodeCache


def evict_node_cache(cache: NodeCache, cache_dir: Path) -> None:
    """Write the cache out and drop its data file's pages (pages this process has mapped
    are released first: mapped pages cannot be evicted)."""
    cache.env.sync(True)
    cache._release_mapped_pages()
    fd = os.open(cache_dir / "cache.lmdb" / "data.mdb", os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
