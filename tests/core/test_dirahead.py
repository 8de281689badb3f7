"""Folder read-ahead's policy against a counting fake store, a real NodeCache and real
listings: no file fetched twice, the per-open bound, once round the folder, skips."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio

from fusecache import dirahead
from fusecache.config import S3Location
from fusecache.dirahead import _HELD_SHARE, FolderReadAhead
from fusecache.listings import ListingCache
from fusecache.metrics import Metrics
from fusecache.namespace import ROOT_INODE, Namespace
from fusecache.nodecache import NodeCache, ObjectId
from fusecache.ramcache import RamCache
from fusecache.reader import BlockReader

from fakes import FakeStore, ramp

BS = 64 * 1024


def fill(store: FakeStore, n: int) -> dict[str, bytes]:
    files = {f"d/{i:03d}.jpg": ramp(f"d/{i:03d}.jpg", 1000 + 37 * i) for i in range(n)}
    files["d/big.bin"] = ramp("d/big.bin", 3 * BS)  # over max_file
    files["d/sub/x.jpg"] = ramp("d/sub/x.jpg", 100)
    for k, v in files.items():
        store.put(k, v)
    return files


@dataclass
class Parts:
    """A real NodeCache, Namespace and BlockReader over *store*, with folder read-ahead."""

    disk: NodeCache
    metrics: Metrics
    ns: Namespace
    reader: BlockReader
    ahead: FolderReadAhead


def make_parts(tmp_path: Path, store: FakeStore, per_open: int = 4) -> Parts:
    disk = NodeCache.open(tmp_path, limit_bytes=64 << 20, block_size=BS)
    metrics = Metrics()
    ns = Namespace(store, ListingCache(disk.env), S3Location("fake", ""), 60.0)
    reader = BlockReader(store, RamCache(64 * BS), disk, metrics, block_size=BS,
                         readahead_budget=8 * BS, readahead_max=8 * BS, max_connections=8,
                         read_timeout=10.0)
    ahead = FolderReadAhead(ns, reader, metrics, per_open=per_open, max_file=BS, in_flight=4)
    return Parts(disk, metrics, ns, reader, ahead)


def run_with(parts: Parts, body) -> None:
    """Run *body* with the reader and the read-ahead running; close the cache after."""
    async def go():
        async with trio.open_nursery() as n:
            await n.start(parts.reader.run)
            await n.start(parts.ahead.run)
            await body()
            n.cancel_scope.cancel()
    try:
        trio.run(go)
    finally:
        parts.disk.close()


def run(tmp_path: Path, store: FakeStore, per_open: int, body, *,
        held: dict[str, bytes] | None = None, batches: list[int] | None = None) -> Metrics:
    """*body(read)* against the parts; *held*: files put in the node cache first (a warm);
    *batches*: gets the size of each batch checked against the node cache."""
    p = make_parts(tmp_path, store, per_open)
    for key, data in (held or {}).items():
        assert p.disk.put_block(ObjectId(store.bucket, key, store.etags[key], len(data)), 0,
                                data)
    if batches is not None:
        check = p.reader.not_in_node_cache

        def counted(oids, advise_bytes=0):
            batches.append(len(oids))
            return check(oids, advise_bytes)
        p.reader.not_in_node_cache = counted  # type: ignore[method-assign]

    async def go():
        folder = await p.ns.lookup(ROOT_INODE, "d")
        await p.ns.ensure_listing(folder)

        async def read(name: str) -> bytes:
            node = await p.ns.lookup(folder.ino, name)
            p.ahead.opened(node)
            return bytes(await p.reader.read(p.ns.object_id(node), 0, node.size))
        await body(read)
        await trio.sleep(0.2)  # let fetches still in flight land
    run_with(p, go)
    return p.metrics


def count(metrics: Metrics, result: str) -> float:
    return metrics.folder_readahead.labels(result)._value.get()


def test_a_folder_read_whole_in_any_order_is_fetched_once(tmp_path: Path) -> None:
    store = FakeStore()
    files = fill(store, 100)
    names = [k[2:] for k in files if k.endswith(".jpg") and k.count("/") == 1]
    random.Random(1).shuffle(names)

    async def body(read):
        for name in names:
            assert await read(name) == files["d/" + name]
    m = run(tmp_path, store, 4, body)
    assert store.calls["get"] == 100  # each file once, ahead or by its reader
    assert count(m, "fetched") >= 50
    assert count(m, "used") == count(m, "fetched")  # all of them opened in the end


def test_each_open_fetches_at_most_per_open_more(tmp_path: Path) -> None:
    store = FakeStore()
    files = fill(store, 200)

    async def body(read):
        for i in range(0, 200, 20):  # 10 files of 200
            assert await read(f"{i:03d}.jpg") == files[f"d/{i:03d}.jpg"]
            await trio.sleep(0.05)  # the fetches granted so far all finish
    m = run(tmp_path, store, 3, body)
    assert store.calls["get"] == 10 + 3 * 9  # 3 per open from the second open on
    assert count(m, "fetched") == 27
    assert store.calls["get"] <= 10 + 3 * 9


def test_held_files_cost_a_share_of_a_credit_each(tmp_path: Path) -> None:
    """A warmed folder: a file the node cache holds costs a _HELD_SHARE-th of a credit
    (it is not fetched; at most asked into the page cache: a local disk read, no GET), so
    an open checks at most _HELD_SHARE * per_open of them, and after the first batch shows
    the folder held, each worker-thread call checks that many more files."""
    store = FakeStore()
    files = fill(store, 200)
    small = {k: v for k, v in files.items() if k.endswith(".jpg") and k.count("/") == 1}
    batches: list[int] = []

    async def body(read):
        for i in range(0, 200, 20):  # 10 files of 200
            assert await read(f"{i:03d}.jpg") == files[f"d/{i:03d}.jpg"]
            await trio.sleep(0.05)  # the batches granted so far all done
    m = run(tmp_path, store, 3, body, held=small, batches=batches)
    assert store.calls["get"] == 0
    held = count(m, "held")
    assert sum(batches) == held  # every file checked was held
    assert 9 * 3 < held <= 9 * 3 * _HELD_SHARE  # 3 credits per open from the second on
    # the second open's 3 credits: one file checked for each (not yet known held), then
    # the 2 left buy _HELD_SHARE each; every later open's 3 buy 3 * _HELD_SHARE
    assert batches == [3, 2 * _HELD_SHARE] + [3 * _HELD_SHARE] * 8


def test_held_files_asked_in_and_not_opened_stay_under_a_byte_bound(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A warmed folder read in shuffled order: held files are asked into the page cache
    only while those asked in and not opened yet stay under _PAGE_IN_BYTES (else one
    epoch's first opens ask for the whole dataset); opening them makes room again."""
    bound = 30_000
    monkeypatch.setattr(dirahead, "_PAGE_IN_BYTES", bound)
    store = FakeStore()
    files = fill(store, 200)
    p = make_parts(tmp_path, store, per_open=3)
    for key, data in files.items():
        if key.endswith(".jpg") and key.count("/") == 1:
            assert p.disk.put_block(ObjectId(store.bucket, key, store.etags[key], len(data)),
                                    0, data)
    seen: list[int] = []

    async def go():
        folder = await p.ns.lookup(ROOT_INODE, "d")
        await p.ns.ensure_listing(folder)

        async def open_(name: str) -> None:
            p.ahead.opened(await p.ns.lookup(folder.ino, name))
            await trio.sleep(0.05)  # the batches it granted all done
            seen.append(p.ahead._page_ins.pending_bytes)
        for i in range(0, 200, 20):  # far apart: none of them one asked in before
            await open_(f"{i:03d}.jpg")
        assert 0 < max(seen) <= bound
        assert bound - max(seen) < 8000  # filled up to the bound (files < 8 KB)
        paged, held = count(p.metrics, "paged_in"), count(p.metrics, "held")
        assert paged < held  # checked past the bound: skipped, not asked in
        for i in range(21, 26):  # the ones asked in after the second open
            await open_(f"{i:03d}.jpg")
        assert seen[-1] < max(seen)
        await open_("190.jpg")
        assert count(p.metrics, "paged_in") > paged  # the room went to new page-ins
    run_with(p, go)


def test_a_cold_folder_is_not_checked_in_held_sized_batches(tmp_path: Path) -> None:
    """Files the node cache lacks cost a whole credit: with the folder not held, each
    worker-thread call checks no more files than the credits can fetch."""
    store = FakeStore()
    files = fill(store, 200)
    batches: list[int] = []

    async def body(read):
        for i in range(0, 200, 20):
            assert await read(f"{i:03d}.jpg") == files[f"d/{i:03d}.jpg"]
            await trio.sleep(0.05)
    m = run(tmp_path, store, 3, body, batches=batches)
    assert count(m, "fetched") == 27 and count(m, "held") == 0
    assert batches == [3] * 9


def test_once_round_the_folder_skipping_folders_large_and_cached_files(tmp_path: Path) -> None:
    store = FakeStore()
    files = fill(store, 30)

    async def body(read):
        for name in ("020.jpg", "025.jpg", "029.jpg", "003.jpg", "011.jpg", "017.jpg",
                     "001.jpg", "008.jpg", "014.jpg", "022.jpg"):
            assert await read(name) == files["d/" + name]
            await trio.sleep(0.05)
    m = run(tmp_path, store, 8, body)
    # Started after 025, round past the end (big.bin and sub/ skipped) to 024: the 28
    # small files not opened by then were all fetched ahead, once each.
    assert store.calls["get"] == 10 + 20  # the 10 opened (2 by their readers) + 20 more
    assert count(m, "fetched") == 28


def test_off_fetches_nothing_ahead(tmp_path: Path) -> None:
    store = FakeStore()
    files = fill(store, 20)

    async def body(read):
        for i in range(10):
            assert await read(f"{i:03d}.jpg") == files[f"d/{i:03d}.jpg"]
    m = run(tmp_path, store, 0, body)
    assert store.calls["get"] == 10
    assert count(m, "fetched") == 0


def test_class_folders_opened_by_path_are_listed_and_start_at_their_first_open(
        tmp_path: Path) -> None:
    """A loader with its own index: no readdir; 10 class folders of 12 files under d/."""
    store = FakeStore()
    files = {f"d/c{c}/{i:02d}.jpg": ramp(f"d/c{c}/{i:02d}.jpg", 500 + 11 * i + c)
             for c in range(10) for i in range(12)}
    for k, v in files.items():
        store.put(k, v)
    order = sorted(files)
    random.Random(4).shuffle(order)
    p = make_parts(tmp_path, store)

    async def go():
        for key in order:
            node = await p.ns.lookup(ROOT_INODE, "d")
            for part in key.split("/")[1:]:
                node = await p.ns.lookup(node.ino, part)
            p.ahead.opened(node)
            got = await p.reader.read(p.ns.object_id(node), 0, node.size)
            assert bytes(got) == files[key]
            await trio.sleep(0.01)
    run_with(p, go)
    assert store.calls["get"] == len(files)  # each file once
    # Half of the 120 came ahead of their reader; the folders were listed for it.
    assert count(p.metrics, "fetched") >= 60
    assert store.calls["list"] >= 10


def test_a_sibling_of_two_folders_being_read_starts_at_its_first_open(tmp_path: Path) -> None:
    store = FakeStore()
    files = {f"d/c{c}/{i:02d}.jpg": ramp(f"d/c{c}/{i:02d}.jpg", 700 + i) for c in range(3)
             for i in range(20)}
    for k, v in files.items():
        store.put(k, v)
    p = make_parts(tmp_path, store)
    fetched = []

    async def go():
        d = await p.ns.lookup(ROOT_INODE, "d")
        for c, names in ((0, ["00", "01"]), (1, ["00", "01"]), (2, ["05"])):
            folder = await p.ns.lookup(d.ino, f"c{c}")
            for name in names:
                node = await p.ns.lookup(folder.ino, f"{name}.jpg")
                p.ahead.opened(node)
                await p.reader.read(p.ns.object_id(node), 0, node.size)
                await trio.sleep(0.1)  # a listing, then the fetches it lets start
            fetched.append(count(p.metrics, "fetched"))
    run_with(p, go)
    # c0 and c1 each start at their second open (4 fetched each); c2, a sibling of two
    # folders being read, at its first: listed in the background, then 4 more fetched.
    assert fetched == [4, 8, 12]


def test_a_folder_whose_listing_is_refused_waits_for_a_listing_to_end(
        tmp_path: Path) -> None:
    """When no background listing may start (two are running, S3 unreachable, no TTL), a
    folder without a listing asks again when a running listing ends, or at its next
    open; never again and again on the loop meanwhile (seen in a cold pass of 16
    readers: 21,490 listing-record reads on the loop for 2,000 files)."""
    store = FakeStore()
    files = {f"d/c/{i:02d}.jpg": ramp(f"d/c/{i:02d}.jpg", 600 + i) for i in range(20)}
    files.update({f"d/other/{i}.jpg": ramp(f"d/other/{i}.jpg", 300) for i in range(3)})
    for k, v in files.items():
        store.put(k, v)
    p = make_parts(tmp_path, store)
    real_list_soon, real_listed_after = p.ns.list_soon, p.ns.listed_after
    refuse, asked, looked = [True], [0], [0]

    def list_soon(prefix: str):
        asked[0] += 1
        return None if refuse[0] else real_list_soon(prefix)

    def listed_after(prefix: str, after, limit: int):
        looked[0] += 1
        return real_listed_after(prefix, after, limit)
    p.ns.list_soon = list_soon  # type: ignore[method-assign]
    p.ns.listed_after = listed_after  # type: ignore[method-assign]

    async def go():
        d = await p.ns.lookup(ROOT_INODE, "d")
        folder = await p.ns.lookup(d.ino, "c")
        for name in ("00.jpg", "01.jpg", "02.jpg"):
            node = await p.ns.lookup(folder.ino, name)
            p.ahead.opened(node)
            await trio.sleep(0.2)
        assert (asked[0], looked[0]) == (2, 2)  # the 2nd and 3rd opens, once each
        assert count(p.metrics, "fetched") == 0
        refuse[0] = False
        listed = real_list_soon("d/other/")  # another folder's listing; as it ends ...
        assert listed is not None
        await listed.wait()
        await trio.sleep(0.3)
        assert asked[0] == 3  # ... c asks again, with no open of it
        assert count(p.metrics, "fetched") > 0
    run_with(p, go)
