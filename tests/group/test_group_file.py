"""The group file and block ownership (fusecache/group.py): parsing, atomic rewrite, ranking."""

from __future__ import annotations

import json
import os
import re
from collections import Counter

import pytest

from fusecache.group import (
    Group,
    GroupFileError,
    GroupWatcher,
    Member,
    load_group,
    parse_group,
    write_group,
)


def _group(names: list[str], me: str = "a", weights: dict[str, float] | None = None) -> Group:
    weights = weights or {}
    return Group(me, tuple(Member(n, f"10.0.0.{i}:7471", weights.get(n, 1.0))
                           for i, n in enumerate(names)))


def test_owners_agree_whatever_the_member_order():
    g1 = _group(["a", "b", "c", "d"])
    g2 = Group("a", tuple(reversed(g1.members)))
    for i in range(200):
        k = f"block-{i}".encode()
        assert [m.name for m in g1.owners(k, 2)] == [m.name for m in g2.owners(k, 2)]


def test_a_joining_node_takes_only_its_own_share():
    before = _group(["a", "b", "c"])
    after = _group(["a", "b", "c", "d"])
    moved = 0
    for i in range(3000):
        k = f"k{i}".encode()
        old, new = before.owners(k)[0].name, after.owners(k)[0].name
        if old != new:
            assert new == "d"  # nothing moves between the old members
            moved += 1
    assert 500 < moved < 1000  # about a quarter


def test_share_follows_weight():
    g = _group(["a", "b"], weights={"a": 1.0, "b": 3.0})
    c = Counter(g.owners(f"k{i}".encode())[0].name for i in range(4000))
    assert 2.5 < c["b"] / c["a"] < 3.6


def test_round_trip_and_watcher_picks_up_a_rewrite(tmp_path):
    p = tmp_path / "group.json"
    g = _group(["a", "b"])
    write_group(p, g)
    assert load_group(p) == g
    w = GroupWatcher(p, interval=0)
    assert w.current(0.0) == g
    g2 = _group(["a", "b", "c"])
    write_group(p, g2)
    os.utime(p, ns=(1, 1))  # a different mtime even on coarse clocks
    assert w.current(1.0) == g2
    p.write_text("{not json")
    os.utime(p, ns=(2, 2))
    assert w.current(2.0) == g2 and "not JSON" in (w.error or "")


@pytest.mark.parametrize("doc, names", [
    ([], "top level"),
    ({"members": []}, "'self'"),
    ({"self": "a", "members": [{"name": "b"}]}, "members[0].endpoint"),
    ({"self": "a", "members": [{"name": "b", "endpoint": "h:1", "weight": 0}]},
     "members[0].weight"),
    ({"self": "a", "members": [{"name": "b", "endpoint": "h:1"}, {"name": "b", "endpoint": "h:2"}]},
     "repeat"),
    ({"self": "a", "replicas": 0}, "'replicas'"),
    ({"self": "a", "tls": {"ca": "x"}}, "'tls'"),
    # a misspelled key (blind job round 36: 'membres' was blamed on the member list)
    ({"self": "a", "replicas": 1, "membres": [{"name": "a", "endpoint": "h:1"}]},
     "group file: unknown key 'membres' (keys: self, members, replicas, striping, tls, "
     "version)"),
    ({"self": "a", "members": [{"name": "a", "endpoint": "h:1", "weigth": 2}]},
     "members[0]: unknown key 'weigth' (keys: name, endpoint, weight, buckets, datasets, "
     "lane)"),
])
def test_bad_group_files_name_the_bad_field(doc, names):
    with pytest.raises(GroupFileError, match=re.escape(names)):
        parse_group(json.loads(json.dumps(doc)))
