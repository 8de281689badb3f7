"""Listings in the node cache: lookups, paging, generations, recursive store."""

from __future__ import annotations

from pathlib import Path

from fusecache.listings import DirEntry, ListingCache, valid_name
from fusecache.nodecache import NodeCache
from fusecache.store import ObjectInfo


def make(tmp_path: Path) -> tuple[NodeCache, ListingCache]:
    c = NodeCache.open(tmp_path, limit_bytes=1 << 20)
    return c, ListingCache(c.env)


def test_write_lookup_and_page(tmp_path: Path) -> None:
    c, lc = make(tmp_path)
    w = lc.writer("b", "p/")
    names = [f"f{i:05d}" for i in range(2500)]
    for n in names:
        w.add(DirEntry(n, False, 10, "e", 1.0))
    w.add(DirEntry("sub", True))
    w.add(DirEntry("sub", False, 1, "x"))  # a file named like a directory: the dir wins
    assert lc.get_dir("b", "p/") is None, "listing visible before commit"
    assert w.commit()
    rec = lc.get_dir("b", "p/")
    assert rec is not None and rec.count == 2501
    assert lc.lookup("b", "p/", rec, "f00042") == DirEntry("f00042", False, 10, "e", 1.0)
    assert lc.lookup("b", "p/", rec, "sub").is_dir
    assert lc.lookup("b", "p/", rec, "nope") is None
    assert lc.find("b", "p/", "f00042") == (rec, DirEntry("f00042", False, 10, "e", 1.0))
    assert lc.find("b", "p/", "nope") == (rec, None)
    assert lc.find("b", "q/", "f00042") == (None, None)
    got: list[str] = []
    after = None
    while batch := lc.entries("b", "p/", rec, after, 777):
        got += [e.name for e in batch]
        after = batch[-1].name
    assert got == sorted(names + ["sub"])
    c.close()


def test_newer_generation_wins_and_old_is_swept(tmp_path: Path) -> None:
    c, lc = make(tmp_path)
    old = lc.writer("b", "")
    new = lc.writer("b", "")
    new.add(DirEntry("new", False))
    assert new.commit()
    old.add(DirEntry("old", False))
    assert not old.commit(), "an older listing replaced a newer one"
    rec = lc.get_dir("b", "")
    assert [e.name for e in lc.entries("b", "", rec)] == ["new"]
    third = lc.writer("b", "")
    third.add(DirEntry("third", False))
    third.commit()
    with c.env.begin(db=lc._ents) as txn:
        assert txn.stat(lc._ents)["entries"] == 1, "old generations not swept"
    c.close()


def test_store_recursive_builds_every_directory(tmp_path: Path) -> None:
    c, lc = make(tmp_path)
    objs = [ObjectInfo(k, 5, "e") for k in (
        "ds/a/1.jpg", "ds/a/2.jpg", "ds/b/c/3.jpg", "ds/top.txt", "ds/bad//x", "ds/a/",
        "ds/" + "n" * 300)]
    objs += [ObjectInfo("ds/empty/", 0, "m"), ObjectInfo("ds/", 0, "m"),
             ObjectInfo("ds/a/./x", 1, "e"), ObjectInfo("ds/a/..", 1, "e")]
    skipped: list[str] = []
    assert lc.store_recursive("b", "ds/", objs, skipped.append) == 6
    # each key left out is told (the mount warns of each: a whole-tree listing said nothing
    # of keys deeper than the mounted folder, blind FUSE test), folder markers are none
    assert skipped == ["ds/bad//x", "ds/" + "n" * 300, "ds/a/./x", "ds/a/.."]
    names = {p: [e.name for e in lc.entries("b", p, lc.get_dir("b", p))]
             for p in ("ds/", "ds/a/", "ds/b/", "ds/b/c/", "ds/bad/", "ds/empty/")}
    # as listings with a delimiter show them: "ds/bad//x" makes the folder bad (its
    # empty-named subfolder left out), the marker "ds/empty/" an empty folder
    assert names == {"ds/": ["a", "b", "bad", "empty", "top.txt"],
                     "ds/a/": ["1.jpg", "2.jpg"], "ds/b/": ["c"], "ds/b/c/": ["3.jpg"],
                     "ds/bad/": [], "ds/empty/": []}
    c.close()


def test_store_recursive_remembers_the_ancestors_of_a_non_empty_prefix(tmp_path: Path) -> None:
    c, lc = make(tmp_path)
    lc.store_recursive("b", "data/sets/ds/", [ObjectInfo("data/sets/ds/x", 1, "e")])
    for key, name in (("data/", "data"), ("data/sets/", "sets"), ("data/sets/ds/", "ds")):
        entry, _ = lc.get_name("b", key, name)
        assert entry.is_dir and entry.name == name
    lc.store_recursive("b", "empty/sub/", [])
    assert lc.get_name("b", "empty/", "empty") is None  # nothing proves it exists
    c.close()


def test_valid_name() -> None:
    assert valid_name("a.jpg")
    assert not any(valid_name(n) for n in ("", ".", "..", "x" * 256, "a\0b"))
    assert valid_name("é" * 127) and not valid_name("é" * 128)


def test_positive_lookups_table_is_bounded(tmp_path: Path, monkeypatch) -> None:
    from fusecache import listings

    monkeypatch.setattr(listings, "_MAX_NAMES", 50)
    monkeypatch.setattr(listings, "_NAMES_CHECK", 10)
    c, lc = make(tmp_path)
    for i in range(200):
        lc.put_name("b", f"k{i}", DirEntry(f"k{i}", False, 1, "e"))
        with c.env.begin() as txn:
            assert txn.stat(lc._names)["entries"] <= 60
    assert lc.get_name("b", "k199", "k199") is not None
    c.close()


def test_positive_lookups_table_at_its_real_bound(tmp_path: Path) -> None:
    """The default _MAX_NAMES (1,000,000 names), not a shrunk one: a table one name short of it
    is kept, a table at it is emptied at the next check (every _NAMES_CHECK puts)."""
    from fusecache import listings

    assert listings._MAX_NAMES == 1_000_000 and listings._NAMES_CHECK == 1024
    c, lc = make(tmp_path)
    value = listings._CHECKED.pack(0.0) + listings._pack(DirEntry("f", False, 1, "e"))
    bulk = listings._MAX_NAMES - listings._NAMES_CHECK
    with c.env.begin(write=True, db=lc._names) as txn:  # one transaction, not a million
        txn.cursor().putmulti(
            ((listings._name_key("b", f"bulk/{i:07d}"), value) for i in range(bulk)),
            append=False)

    def entries() -> int:
        with c.env.begin() as txn:
            return txn.stat(lc._names)["entries"]

    assert entries() == bulk
    for i in range(listings._NAMES_CHECK):  # the last put checks at _MAX_NAMES - 1: kept
        lc.put_name("b", f"new/{i}", DirEntry(f"{i}", False, 1, "e"))
    assert entries() == listings._MAX_NAMES
    for _ in range(listings._NAMES_CHECK - 1):  # the same name again: the count stays
        lc.put_name("b", "new/0", DirEntry("0", False, 1, "e"))
    assert entries() == listings._MAX_NAMES
    lc.put_name("b", "new/last", DirEntry("last", False, 1, "e"))  # checks at _MAX_NAMES
    assert entries() == 1 and lc.get_name("b", "new/last", "last") is not None
    c.close()
