"""The FUSE adapter's LOOKUP advice against a real NodeCache, Namespace and BlockReader:
a held small file's bytes are asked in at its LOOKUP, and no more than the bound of them
wait unopened (a stat of a whole prefetched tree must not read it from disk)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from fusecache import fs
from fusecache.config import S3Location
from fusecache.fs import FuseOperations
from fusecache.listings import ListingCache
from fusecache.metrics import Metrics
from fusecache.namespace import ROOT_INODE, Namespace
from fusecache.nodecache import NodeCache, ObjectId
from fusecache.ramcache import RamCache
from fusecache.reader import BlockReader

from fakes import FakeStore, ramp

BS = 64 * 1024


def test_lookups_ask_held_files_in_until_the_bound_is_reached(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bound = 10 * 16000  # files of 16,000 bytes: over _PREAD_MIN, so their offsets are kept
    monkeypatch.setattr(fs, "_LOOKUP_PAGE_IN_BYTES", bound)
    store = FakeStore()
    files = {f"d/{i:03d}.jpg": ramp(f"d/{i:03d}.jpg", 16000) for i in range(40)}
    for key, data in files.items():
        store.put(key, data)
    disk = NodeCache.open(tmp_path, limit_bytes=64 << 20, block_size=BS)
    held = sorted(files)[:30]  # the last ten are not in the node cache
    for key in held:
        assert disk.put_block(ObjectId(store.bucket, key, store.etags[key], 16000), 0,
                              files[key])
    ns = Namespace(store, ListingCache(disk.env), S3Location("fake", ""), 60.0)
    reader = BlockReader(store, RamCache(64 * BS), disk, Metrics(), block_size=BS,
                         readahead_budget=8 * BS, readahead_max=8 * BS, max_connections=8,
                         read_timeout=10.0)
    ops = FuseOperations(ns, reader, open_prefill=1 << 20)
    asked: list[int] = []
    advise = disk.advise_first_blocks

    def counted(oids):
        n = advise(oids)
        asked.append(n)
        return n
    disk.advise_first_blocks = counted  # type: ignore[method-assign]

    async def go():
        folder = await ns.lookup(ROOT_INODE, "d")
        await ns.ensure_listing(folder)
        for key in sorted(files)[20:]:  # ten held, ten not: only held ones count
            await ops.lookup(folder.ino, key[2:].encode())
        assert sum(asked) == 10 and ops._page_ins.pending_bytes == bound
        for key in sorted(files)[:20]:  # the bound is full: none asked in
            await ops.lookup(folder.ino, key[2:].encode())
        assert sum(asked) == 10 and ops._page_ins.pending_bytes == bound
    try:
        trio.run(go)
    finally:
        disk.close()
