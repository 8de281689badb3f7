"""The agent's worker with --group-striping: each warm fetches and pins this node's share, the
record is marked striped (not published as held), and a group change rebalances.

Real parts: SeaweedFS, the node cache, prefetchd.warm.Warmer; the group file is written as the
agent's membership writes it (fusecache.group.write_group); the Node publisher is a recorder.
"""

from __future__ import annotations

import json
import random
import threading
import time

import pytest

import fusecache
from fusecache.group import Group, Member, write_group
from fusecache.nodecache import block_key
from prefetchd.k8s import agent as ag
from prefetchd.k8s import group_watch as gw
from prefetchd.k8s import worker as wk

pytestmark = pytest.mark.k8s

BS = 256 << 10
# Seeded, so the shares (and what a member leaving moves) are the same every run.
FILES = {f"ds/f{i}.bin": random.Random(i).randbytes(4 * BS + 17 * i) for i in range(6)}


@pytest.fixture()
def bucket(fixed_bucket: str) -> str:
    return fixed_bucket


class Publisher:
    def __init__(self) -> None:
        self.calls: list[tuple[list[str], str | None]] = []
        self.lock = threading.Lock()

    def publish(self, free: int, limit: int, held: list[str], peer: str | None = None) -> bool:
        with self.lock:
            self.calls.append((held, peer))
        return True


def owned(cache_dir, bucket: str) -> set[tuple[str, int]]:
    cache = fusecache.NodeCache.open(cache_dir)
    try:
        return {(o.key, i) for o in cache.iter_objects(bucket) for i in range(o.block_count(BS))
                if cache.contains_block(o, i)}
    finally:
        cache.close()


def expected(cache_dir, bucket: str, group: Group) -> set[tuple[str, int]]:
    cache = fusecache.NodeCache.open(cache_dir)
    try:
        return {(o.key, i) for o in cache.iter_objects(bucket) for i in range(o.block_count(BS))
                if group.owns(block_key(o, i, BS))}
    finally:
        cache.close()


def wait_for(fn, what: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while not (v := fn()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
    return v


def test_striped_warm_takes_the_share_and_rebalances_on_a_group_change(
        local_s3, s3_env, bucket, tmp_path):
    s3 = local_s3.client()
    for k, v in FILES.items():
        s3.put_object(Bucket=bucket, Key=k, Body=v)
    fusecache.NodeCache.open(tmp_path, limit_bytes=64 << 20, block_size=BS).close()
    three = Group("me", (Member("me", "10.0.0.1:7471"), Member("b", "10.0.0.2:7471"),
                         Member("c", "10.0.0.3:7471")), 1, True)
    write_group(tmp_path / "group.json", three)
    pub = Publisher()
    worker = wk.WarmWorker(
        wk.WorkerConfig(cache_dir=str(tmp_path), node_name="me", endpoint_url=local_s3.endpoint_url,
                        publish_interval=0.2, striping=True), pub).start()
    try:
        worker.set_peer_endpoint("10.0.0.1:7471")
        dataset = f"s3://{bucket}/ds/"
        worker.warm(ag.WarmRequest(dataset, "workflow ml/w", "train", 0))
        wait_for(lambda: worker.records.find("workflow ml/w", dataset), "the warm's record")
        share = owned(tmp_path, bucket)
        assert share == expected(tmp_path, bucket, three)
        total = sum((len(v) + BS - 1) // BS for v in FILES.values())
        assert 0 < len(share) < total * 0.6
        (rec,) = worker.records.live().values()
        assert rec["striped"] is True and rec["bytes"] < sum(map(len, FILES.values()))
        # published as a member, not as holding the dataset (no holds label, no hint); the
        # publisher runs every 0.2 s, so one made before the warm's record may not name the
        # bucket yet (CI took such a one for the last): wait for one that does
        def naming_the_bucket() -> bool:
            with pub.lock:
                last = pub.calls[-1][1] if pub.calls else None
            return last is not None and bucket in json.loads(last)["buckets"]
        wait_for(naming_the_bucket, "a publication of the annotation naming the bucket")
        held, peer = pub.calls[-1]
        assert held == [] and json.loads(peer)["datasets"] == []
        # b leaves: this node now owns more; the rebalance fetches exactly the difference
        two = Group("me", (three.members[0], three.members[2]), 1, True)
        write_group(tmp_path / "group.json", two)
        worker.rebalance()
        # (an object none of whose blocks this node owned was never cached: compare with
        # what the cache knows when the rebalance is done)
        wait_for(lambda: (now := owned(tmp_path, bucket)) > share
                 and now == expected(tmp_path, bucket, two), "the rebalanced share")
    finally:
        worker.stop()


def test_membership_change_hook_rebalances_only_when_members_change(tmp_path):
    calls = []

    class W:
        def rebalance(self) -> None:
            calls.append(1)

    m = gw.GroupMembership("me", str(tmp_path), striping=True)
    m.on_change.append(ag._rebalance_on_change(W()))
    node = {"metadata": {"name": "b", "annotations": {
        gw.PEER_ANNOTATION: gw.peer_annotation("10.0.0.2:7471", 10.0)}}}
    m.on_node("ADDED", node)
    assert calls == [1]
    node["metadata"]["annotations"][gw.PEER_ANNOTATION] = gw.peer_annotation(
        "10.0.0.2:7471", 10.0, datasets=["s3://x/y/"])
    m.on_node("MODIFIED", node)  # a new hint, same members and weights: no rebalance
    assert calls == [1]
    m.on_node("DELETED", node)
    assert calls == [1, 1]
