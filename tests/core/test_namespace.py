"""Names over a counting fake store: lazy lookups, skipped keys, TTLs, shared listings."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import trio
import trio.testing

from fusecache import errors
from fusecache.config import S3Location
from fusecache.listings import ListingCache
from fusecache.namespace import ROOT_INODE, Namespace
from fusecache.nodecache import NodeCache

from fakes import FakeStore


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(tmp_path: Path, store: FakeStore, ttl: float = 60.0, prefix: str = ""):
    cache = NodeCache.open(tmp_path, limit_bytes=1 << 20)
    clock = Clock()
    ns = Namespace(store, ListingCache(cache.env, clock), S3Location("fake", prefix), ttl,
                   clock)
    return ns, clock, cache


def test_lookup_in_a_huge_prefix_does_not_list_it(tmp_path: Path) -> None:
    store = FakeStore()
    for i in range(3000):
        store.put(f"big/{i:05d}", b"x")
    ns, _, cache = make(tmp_path, store)

    async def go():
        d = await ns.lookup(ROOT_INODE, "big")
        f = await ns.lookup(d.ino, "01234")
        assert f.size == 1 and not f.is_dir
        with pytest.raises(errors.ObjectNotFound):
            await ns.lookup(d.ino, "nope")
        with pytest.raises(errors.ObjectNotFound):  # negative answer cached
            await ns.lookup(d.ino, "nope")
    trio.run(go)
    # one HEAD + one LIST(max 1) per remote lookup, never a paginated listing
    assert store.calls["list"] == 3 and store.calls["head"] == 3
    cache.close()


def test_bad_keys_are_skipped_with_one_warning_each(tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    store = FakeStore()
    store.put("d/ok.txt", b"1")
    store.put("d/..", b"2")
    store.put("d/" + "n" * 300, b"3")
    store.put("d/.", b"4")
    ns, _, cache = make(tmp_path, store, ttl=0)

    async def go():
        d = await ns.lookup(ROOT_INODE, "d")
        for _ in range(2):  # ttl 0: listed twice, still one warning per key
            rec = await ns.ensure_listing(d)
            assert [e.name for e in await ns.dir_entries(d, rec, None)] == ["ok.txt"]
    with caplog.at_level(logging.WARNING):
        trio.run(go)
    warnings = [r for r in caplog.records if "not a valid POSIX name" in r.message]
    assert len(warnings) == 3
    cache.close()


def test_listing_is_shared_and_expires_with_the_ttl(tmp_path: Path) -> None:
    store = FakeStore()
    for i in range(5):
        store.put(f"p/f{i}", b"x" * i)
    ns, clock, cache = make(tmp_path, store, ttl=30)
    other = Namespace(store, ListingCache(cache.env, clock), S3Location("fake", ""), 30, clock)

    async def go():
        d = await ns.lookup(ROOT_INODE, "p")
        await ns.ensure_listing(d)
        lists = store.calls["list"]
        d2 = await other.lookup(ROOT_INODE, "p")
        await other.ensure_listing(d2)  # another mount on the node: no LIST
        assert (await other.lookup(d2.ino, "f3")).size == 3
        assert store.calls["list"] == lists
        store.put("p/new", b"n")
        with pytest.raises(errors.ObjectNotFound):
            await other.lookup(d2.ino, "new")  # the fresh listing is authoritative
        clock.now += 31
        await other.ensure_listing(d2)
        assert (await other.lookup(d2.ino, "new")).size == 1
    trio.run(go)
    cache.close()


def test_changed_etag_after_ttl_gives_a_new_object_id(tmp_path: Path) -> None:
    store = FakeStore()
    store.put("a", b"one")
    ns, clock, cache = make(tmp_path, store, ttl=10)

    async def go():
        n = await ns.lookup(ROOT_INODE, "a")
        before = ns.object_id(n)
        store.put("a", b"two!")
        assert ns.object_id(await ns.revalidate(n)) == before  # still fresh
        clock.now += 11
        after = ns.object_id(await ns.revalidate(n))
        assert after != before and after.size == 4
    trio.run(go)
    cache.close()


def test_inode_numbers_are_stable_and_forgotten(tmp_path: Path) -> None:
    store = FakeStore()
    store.put("x/y", b"1")
    ns, _, cache = make(tmp_path, store)

    async def go():
        d = await ns.lookup(ROOT_INODE, "x")
        y = await ns.lookup(d.ino, "y")
        again = await ns.lookup(d.ino, "y")
        assert again.ino == y.ino and y.lookups == 2
        ns.forget(y.ino, 2)
        with pytest.raises(errors.ObjectNotFound):
            ns.get(y.ino)
        assert (await ns.lookup(d.ino, "y")).ino == y.ino  # same number after forget
    trio.run(go)
    cache.close()


def test_a_folder_opened_file_by_file_is_listed_once_in_the_background(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fusecache import namespace

    store = FakeStore()
    for i in range(2500):  # three LIST pages
        store.put(f"cls/img{i:04d}.jpg", b"x" * (i % 7))
    ns, _, cache = make(tmp_path, store)

    async def go():
        d = await ns.lookup(ROOT_INODE, "cls")
        heads0 = store.calls["head"]
        for i in range(4):  # the 4th remote lookup starts the listing
            await ns.lookup(d.ino, f"img{i:04d}.jpg")
        assert store.calls["head"] == heads0 + 4
        await trio.testing.wait_all_tasks_blocked()
        while "cls/" in ns._listing_flights:
            await trio.sleep(0.01)
        heads = store.calls["head"]
        for i in range(4, 2500, 97):
            assert (await ns.lookup(d.ino, f"img{i:04d}.jpg")).size == i % 7
        with pytest.raises(errors.ObjectNotFound):
            await ns.lookup(d.ino, "missing.jpg")
        assert store.calls["head"] == heads  # answered by the listing
    trio.run(go)
    cache.close()

    # a folder bigger than the background limit is never stored partially
    monkeypatch.setattr(namespace, "_BACKGROUND_LIST_MAX_PAGES", 2)
    store.calls.clear()
    ns, _, cache = make(tmp_path / "b", store)

    async def go_big():
        d = await ns.lookup(ROOT_INODE, "cls")
        for i in range(12):
            await ns.lookup(d.ino, f"img{i:04d}.jpg")
            await trio.testing.wait_all_tasks_blocked()
        assert ns.listings.get_dir("fake", "cls/") is None
        assert store.calls["head"] == 13  # every lookup asked S3
        assert store.calls["list"] == 13 + 3  # LIST(1) per lookup + one aborted listing
    trio.run(go_big)
    cache.close()


def test_background_listing_at_its_real_page_bound(tmp_path: Path) -> None:
    """The default _BACKGROUND_LIST_MAX_PAGES (20 pages of 1000), not a shrunk one: a folder
    of exactly 20 pages is listed and stored whole, one name more and it is never stored."""
    from fusecache import namespace

    assert namespace._BACKGROUND_LIST_MAX_PAGES == 20
    fit, over = 20 * 1000, 20 * 1000 + 1
    store = FakeStore()
    for i in range(fit):
        store.put(f"fit/{i:05d}", b"x")
    for i in range(over):
        store.put(f"over/{i:05d}", b"x")
    ns, _, cache = make(tmp_path, store)

    async def go():
        dirs = {}
        for folder in ("fit", "over"):
            d = dirs[folder] = await ns.lookup(ROOT_INODE, folder)
            for i in range(4):  # the 4th remote lookup starts the listing
                await ns.lookup(d.ino, f"{i:05d}")
            with trio.fail_after(120):
                while f"{folder}/" in ns._listing_flights:
                    await trio.sleep(0.01)
        stored = ns.listings.get_dir("fake", "fit/")
        assert stored is not None
        heads = store.calls["head"]
        assert (await ns.lookup(dirs["fit"].ino, "19999")).size == 1
        assert store.calls["head"] == heads  # answered by the stored listing
        assert ns.listings.get_dir("fake", "over/") is None
    trio.run(go)
    cache.close()


def test_a_stale_listing_is_listed_again_once_for_all_its_names(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The next epoch with a TTL shorter than an epoch: the first lookup in a directory
    whose listing expired lists it again (one LIST), and every name in it, changed,
    removed or new, is answered from that listing without a HEAD. A directory of more
    names than _RELIST_AT_LOOKUP_MAX is asked name by name, as before."""
    from fusecache import namespace

    store = FakeStore()
    for i in range(10):
        store.put(f"cls/f{i}", b"x" * i)
    ns, clock, cache = make(tmp_path, store, ttl=30)

    async def go():
        d = await ns.lookup(ROOT_INODE, "cls")
        await ns.ensure_listing(d)
        assert (await ns.lookup(d.ino, "f3")).size == 3
        store.put("cls/f3", b"changed!")
        del store.objects["cls/f4"]
        clock.now += 31
        store.calls.clear()
        assert (await ns.lookup(d.ino, "f3")).size == 8
        for i in (0, 1, 2, 5, 6, 7, 8, 9):
            node = await ns.revalidate(await ns.lookup(d.ino, f"f{i}"))
            assert node.size == i
        with pytest.raises(errors.ObjectNotFound):
            await ns.lookup(d.ino, "f4")
        assert store.calls["list"] == 1 and store.calls["head"] == 0, dict(store.calls)

        clock.now += 31  # S3 unreachable at the relisting: the last known entries
        store.fail_next["list"] = [errors.StoreUnavailable("S3 is down")]
        assert (await ns.lookup(d.ino, "f5")).size == 5

        monkeypatch.setattr(namespace, "_RELIST_AT_LOOKUP_MAX", 5)
        clock.now += 31
        store.calls.clear()
        assert (await ns.lookup(d.ino, "f9")).size == 9
        assert store.calls["head"] == 1  # a bigger directory: the name is asked for
    trio.run(go)
    cache.close()


def test_a_folder_of_folders_is_listed_whole_once_for_every_folder_in_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The class folders of a dataset: once the dataset's folder is listed (here in the
    background, after lookups in it asked S3), the tree under it is listed without a
    delimiter, and every class folder's lookups are answered from that."""
    store = FakeStore()
    for c in range(30):
        for i in range(40):  # 1,200 objects: two pages without a delimiter
            store.put(f"ds/class{c:02d}/img{i:02d}.jpg", b"x" * (1 + i % 5))
    store.put("ds/readme.txt", b"r")
    store.put("ds/empty/", b"")  # a folder marker
    ns, clock, cache = make(tmp_path, store)

    async def settle() -> None:
        await trio.testing.wait_all_tasks_blocked()
        with trio.fail_after(30):
            while ns._listing_flights or ns._tree_listing:
                await trio.sleep(0.01)

    async def go():
        ds = await ns.lookup(ROOT_INODE, "ds")
        for c in range(4):  # the 4th remote lookup in ds/ starts its listing
            await ns.lookup(ds.ino, f"class{c:02d}")
        await settle()
        calls = dict(store.calls)
        for c in range(4, 30):
            d = await ns.lookup(ds.ino, f"class{c:02d}")
            assert (await ns.lookup(d.ino, "img07.jpg")).size == 3
            with pytest.raises(errors.ObjectNotFound):
                await ns.lookup(d.ino, "img99.jpg")
        assert dict(store.calls) == calls  # no HEAD, no LIST: all from the tree's listing
        listed = ns.listings.get_dir("fake", "ds/class29/")
        assert listed is not None and listed.count == 40
        empty = await ns.lookup(ds.ino, "empty")
        assert empty.is_dir and ns.listings.get_dir("fake", "ds/empty/").count == 0
    trio.run(go)
    # folders whose listings are fresh (prefetchd warmed them, or another mount listed
    # them) are not listed again; once they are past the TTL, they are
    store.calls.clear()
    assert ns._list_tree_into_cache("ds/") == 0 and store.calls["list"] == 0
    clock.now += 61
    assert ns._list_tree_into_cache("ds/") == 32  # ds/, 30 classes, empty/
    assert store.calls["list"] == 2
    cache.close()

    # a tree past the bound stores nothing of it, and is not listed whole again
    from fusecache import namespace
    monkeypatch.setattr(namespace, "_TREE_MAX_OBJECTS", 1000)
    ns, _, cache = make(tmp_path / "b", store)

    async def go_big():
        ds = await ns.lookup(ROOT_INODE, "ds")
        for c in range(4):
            await ns.lookup(ds.ino, f"class{c:02d}")
        await settle()
        assert ns.listings.get_dir("fake", "ds/") is not None
        assert ns.listings.get_dir("fake", "ds/class10/") is None
        lists = store.calls["list"]
        await ns.ensure_listing(ds)  # fresh: nothing listed again
        ns._list_tree_soon("ds/", 30)  # tried once by this mount: not again
        assert not ns._tree_listing and store.calls["list"] == lists
    trio.run(go_big)
    cache.close()
