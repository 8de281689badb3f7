"""``prefetchd warm --group-striping`` with a static group file: each node warms only its share.

Real processes (``python -m prefetchd.cli warm``) against real SeaweedFS; each "node" is a
cache dir with its own group file (same members, its own ``self``). Checks: the shares are
disjoint and together hold every block (replicas 1) or each block twice (replicas 2); a node's
cache then holds far less than the dataset; a node joining takes only its own share and the
old members fetch nothing when they warm again; bad group options are one-line usage errors.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

import fusecache
from fusecache.group import Group, Member, write_group
from fusecache.nodecache import block_key

BS = 256 << 10
# Seeded: the same bytes, ETags and block owners every run (the share sizes are then fixed,
# not a draw that could fall outside the bounds below).
FILES = {f"big/part-{i:02d}.bin": random.Random(i).randbytes(BS * 3 + 1000 * i)
         for i in range(8)}


@pytest.fixture()
def bucket(fixed_bucket: str) -> str:
    return fixed_bucket


def make_cache(d: Path) -> None:
    cache = fusecache.NodeCache.open(d, limit_bytes=64 << 20, block_size=BS)
    cache.close()


def group_files(root: Path, names: list[str], replicas: int = 1) -> dict[str, Path]:
    members = tuple(Member(n, f"127.0.0.{i + 1}:7471", 1.0) for i, n in enumerate(names))
    out = {}
    for n in names:
        d = root / n
        if not (d / "cache.lmdb").exists():
            make_cache(d)
        write_group(d / "group.json", Group(n, members, replicas, True))
        out[n] = d
    return out


def warm(cache_dir: Path, endpoint: str, uri: str, *extra: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "prefetchd.cli", "warm", uri, "--cache-dir", str(cache_dir),
         "--endpoint-url", endpoint, "--group-striping", "--json", *extra],
        capture_output=True, text=True, timeout=120, env=os.environ.copy())
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["datasets"][0]


def held_blocks(cache_dir: Path, bucket: str) -> set[tuple[str, int]]:
    cache = fusecache.NodeCache.open(cache_dir)
    try:
        out = set()
        for oid in cache.iter_objects(bucket):
            assert cache.is_pinned(oid)
            for i in range(oid.block_count(BS)):
                if cache.contains_block(oid, i):
                    out.add((oid.key, i))
        return out
    finally:
        cache.close()


def all_blocks() -> set[tuple[str, int]]:
    return {(k, i) for k, v in FILES.items() for i in range((len(v) + BS - 1) // BS)}


@pytest.fixture()
def dataset(local_s3, s3_env, bucket) -> str:
    s3 = local_s3.client()
    for k, v in FILES.items():
        s3.put_object(Bucket=bucket, Key=k, Body=v)
    return f"s3://{bucket}/big/"


def test_three_nodes_hold_disjoint_shares_that_cover_the_dataset(dataset, bucket, local_s3,
                                                                  tmp_path):
    nodes = group_files(tmp_path, ["n1", "n2", "n3"])
    shares = {}
    for n, d in nodes.items():
        res = warm(d, local_s3.endpoint_url, dataset)
        shares[n] = held_blocks(d, bucket)
        assert res["transferred"] + res["others_bytes"] == sum(map(len, FILES.values()))
        assert res["skipped"] == 0 and not res["failed"]
    assert set.union(*shares.values()) == all_blocks()
    assert sum(len(s) for s in shares.values()) == len(all_blocks())  # disjoint
    for s in shares.values():
        assert 0 < len(s) < len(all_blocks()) * 0.6
    # every block sits exactly where the group says it belongs
    g = Group("n1", tuple(Member(n, "x:1") for n in nodes))
    for n in shares:
        cache = fusecache.NodeCache.open(nodes[n])
        try:
            for oid in cache.iter_objects(bucket):
                for i in range(oid.block_count(BS)):
                    owner = g.owners(block_key(oid, i, BS))[0].name
                    assert cache.contains_block(oid, i) == (owner == n)
        finally:
            cache.close()


def test_replicas_two_puts_each_block_on_two_nodes(dataset, bucket, local_s3, tmp_path):
    nodes = group_files(tmp_path, ["n1", "n2", "n3"], replicas=1)
    shares = [held_blocks(d, bucket) if warm(d, local_s3.endpoint_url, dataset,
                                             "--replicas", "2") else set()
              for d in nodes.values()]
    for b in all_blocks():
        assert sum(b in s for s in shares) == 2


def test_a_joining_node_takes_only_its_share(dataset, bucket, local_s3, tmp_path):
    nodes = group_files(tmp_path, ["n1", "n2", "n3"])
    before = {n: held_blocks(d, bucket) if warm(d, local_s3.endpoint_url, dataset) else None
              for n, d in nodes.items()}
    nodes = group_files(tmp_path, ["n1", "n2", "n3", "n4"])
    res4 = warm(nodes["n4"], local_s3.endpoint_url, dataset)
    new = held_blocks(nodes["n4"], bucket)
    # the newcomer's share came only from the others' shares and is about a quarter
    assert new and new <= all_blocks()
    assert 0.1 < len(new) / len(all_blocks()) < 0.45
    assert res4["transferred"] == sum(
        min(BS, len(FILES[k]) - i * BS) for k, i in new)
    for n in ("n1", "n2", "n3"):
        again = warm(nodes[n], local_s3.endpoint_url, dataset)
        assert again["transferred"] == 0  # the old members fetch nothing
        assert held_blocks(nodes[n], bucket) == before[n]
    # what the newcomer took was the old members' (each block once)
    assert sum(len(new & s) for s in before.values()) == len(new)


def test_bad_group_options_are_usage_errors(tmp_path, local_s3, s3_env):
    base = [sys.executable, "-m", "prefetchd.cli", "warm", "s3://bkt/x/", "--cache-dir",
            str(tmp_path), "--endpoint-url", local_s3.endpoint_url]
    cases = [
        (["--group-striping"], "no group file"),
        (["--replicas", "2"], "need --group-striping"),
        (["--group-striping", "--group", str(tmp_path / "g.json")], "no group file"),
    ]
    (tmp_path / "bad.json").write_text('{"self": "a", "members": [{"name": "b"}]}')
    cases.append((["--group-striping", "--group", str(tmp_path / "bad.json")], "endpoint"))
    write_group(tmp_path / "other.json", Group("a", (Member("b", "h:1"),)))
    cases.append((["--group-striping", "--group", str(tmp_path / "other.json")],
                  "not among its members"))
    for extra, words in cases:
        out = subprocess.run(base + extra, capture_output=True, text=True, timeout=60)
        assert out.returncode == 2, (extra, out.stderr)
        assert words in out.stderr and "Traceback" not in out.stderr
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr
