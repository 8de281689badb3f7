"""The cache group end to end on emulated nodes (tests/group/netns.py): network namespaces on a
bridge, S3 behind a 1 Gbit/s tbf link with 20 ms first-byte latency, peers on 10 Gbit/s.

Every node is real processes in its own network: ``fusecache peer-serve`` (mutual TLS with a
certificate named after the node), ``prefetchd warm`` and ``fusecache mount`` (FUSE, in the
shared mount namespace so the test reads the files). S3 GETs are the node caches' own
counters (``fusecache stats --json``), which count every ranged GET a mount or warm makes.

Select with ``-m netns``. Scenarios: a dataset warmed on n1 is read on n2 byte-exact with no S3
GET; a dataset twice one node's cache, striped over n1..n3, is read whole on n4 with no S3 GET
(and a node's share fits its cache); a peer killed mid-read makes the rest come from S3,
byte-exact, never an error; a joining node fetches only its share, from peers, and the old
members fetch nothing; a caller without a group certificate is refused across the network.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import signal
import sys
from pathlib import Path

import pytest

netns = pytest.importorskip("netns")
peering = pytest.importorskip("peering")  # the peer branch's helpers (certificates)

import fusecache  # noqa: E402
from fusecache.group import Group, Member, write_group  # noqa: E402

pytestmark = [pytest.mark.netns, pytest.mark.fuse, pytest.mark.s3, pytest.mark.slow]

BS = 1 << 20
CACHE = 32 << 20  # each node's cache; the striped dataset is twice that
PORT = 7471
NAMES = ["n1", "n2", "n3", "n4"]


def _data(seed: int, n: int) -> bytes:
    # Seeded: the same bytes (so the same ETags and block owners) every run.
    return random.Random(seed).randbytes(n)


SMALL = {f"small/f{i}.bin": _data(i, 4 * BS + 4321 * i) for i in range(4)}  # ~16 MiB
BIG = {f"big/part-{i:02d}.bin": _data(100 + i, 4 * BS) for i in range(16)}  # 64 MiB


@pytest.fixture(scope="module")
def group_cluster(tmp_path_factory):
    why = netns.available()
    if why:
        pytest.skip(why)
    work = tmp_path_factory.mktemp("group-e2e")
    with netns.cluster(work, NAMES) as c:
        pki = peering.Pki(work / "pki")
        s3 = c.s3.client()
        bucket = "group-e2e"
        s3.create_bucket(Bucket=bucket)
        for k, v in {**SMALL, **BIG}.items():
            s3.put_object(Bucket=bucket, Key=k, Body=v)
        for n in NAMES:
            node = c.nodes[n]
            fusecache.NodeCache.open(node.cache_dir, limit_bytes=CACHE, block_size=BS).close()
            node.tls = pki.node(n)  # type: ignore[attr-defined]
        c.bucket = bucket  # type: ignore[attr-defined]
        c.pki = pki  # type: ignore[attr-defined]
        yield c


def write_groups(c, names: list[str], datasets: dict[str, list[str]] | None = None,
                 striping: bool = False) -> None:
    """Every node's group file: the same members (each publishing *datasets*), its own self."""
    datasets = datasets or {}
    members = tuple(Member(n, f"{c.nodes[n].ip}:{PORT}", 1.0, (c.bucket,),
                           tuple(datasets.get(n, ()))) for n in names)
    for n in NAMES:
        node = c.nodes[n]
        write_group(node.cache_dir / "group.json",
                    Group(n, members, 1, striping, node.tls, version=len(names)))


def stats(c, n: str) -> dict:
    r = c.run(c.nodes[n], [sys.executable, "-m", "fusecache.cli", "stats", "--cache-dir",
                           str(c.nodes[n].cache_dir), "--json"])
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def warm(c, n: str, uri: str, *extra: str) -> dict:
    r = c.run(c.nodes[n], [sys.executable, "-m", "prefetchd.cli", "warm", uri, "--cache-dir",
                           str(c.nodes[n].cache_dir), "--json", *extra], timeout=180)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["datasets"][0]


def unpin(c, n: str, uri: str) -> None:
    """Drop prefetchd's pins on *uri* on node *n* (the next test needs the room)."""
    r = c.run(c.nodes[n], [sys.executable, "-m", "prefetchd.cli", "unpin", uri, "--cache-dir",
                           str(c.nodes[n].cache_dir)])
    assert r.returncode == 0, r.stderr


def serve(c, n: str):
    return c.peer_serve(c.nodes[n], PORT)


def digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_warmed_on_one_node_read_on_another_with_no_s3_get(group_cluster, tmp_path):
    c = group_cluster
    ds = f"s3://{c.bucket}/small/"
    write_groups(c, ["n1", "n2"], {"n1": [ds]})
    servers = [serve(c, "n1")]
    try:
        res = warm(c, "n1", ds)
        assert res["transferred"] == sum(map(len, SMALL.values()))
        before = stats(c, "n2")
        mnt = c.mount(c.nodes["n2"], ds, tmp_path / "n2-small")
        for k, v in SMALL.items():
            assert digest(mnt / Path(k).name) == sha(v)
        after = stats(c, "n2")
        assert after["s3_gets"] == before["s3_gets"]  # not one GET of a block from S3
        assert after["peer_hits"] - before["peer_hits"] == sum(
            (len(v) + BS - 1) // BS for v in SMALL.values())
        c.umount(mnt)
    finally:
        for s in servers:
            s.send_signal(signal.SIGTERM)
            s.wait(timeout=15)
        unpin(c, "n1", ds)


def test_a_peer_killed_mid_read_falls_back_to_s3_byte_exact(group_cluster, tmp_path):
    c = group_cluster
    ds = f"s3://{c.bucket}/small/"
    write_groups(c, ["n1", "n3"], {"n1": [ds]})
    server = serve(c, "n1")
    warm(c, "n1", ds)
    # little read-ahead, so that most of the file is still to be read when the peer dies
    mnt = c.mount(c.nodes["n3"], ds, tmp_path / "n3-small", "--read-timeout", "20",
                  "--readahead-budget", "1MiB")
    try:
        key = "small/f3.bin"
        want = SMALL[key]
        with open(mnt / Path(key).name, "rb", buffering=0) as f:
            head = f.read(2 * BS)
            assert head == want[:2 * BS]
            s1 = stats(c, "n3")
            assert s1["peer_hits"] >= 1
            server.send_signal(signal.SIGKILL)  # dead between two reads of one file
            server.wait(timeout=10)
            rest = b""
            while chunk := f.read(BS):
                rest += chunk
        assert head + rest == want  # never a wrong byte, never an error
        s2 = stats(c, "n3")
        assert s2["s3_gets"] > s1["s3_gets"]  # the rest came from S3
    finally:
        c.umount(mnt)
        unpin(c, "n1", ds)


def test_a_caller_without_a_group_certificate_is_refused(group_cluster, tmp_path):
    c = group_cluster
    ds = f"s3://{c.bucket}/small/"
    write_groups(c, ["n1", "n2"], {"n1": [ds]})
    server = serve(c, "n1")
    try:
        warm(c, "n1", ds)
        probe = tmp_path / "probe.py"
        probe.write_text(PROBE)
        oid = next(o for o in _objects(c.nodes["n1"].cache_dir, c.bucket) if o.key in SMALL)
        args = [sys.executable, str(probe), f"{c.nodes['n1'].ip}:{PORT}", c.bucket, oid.key,
                oid.etag, str(oid.size), str(BS)]
        other = peering.Pki(tmp_path / "other", name="other").node("n2")
        n2 = c.nodes["n2"]
        for mode, tls in (("plaintext", None), ("no-client-cert", n2.tls),
                          ("other-ca", other)):
            extra = [mode] + ([tls.ca, tls.cert, tls.key] if tls else [])
            if mode == "other-ca":  # trusts n1's CA but presents a foreign certificate
                extra = [mode, n2.tls.ca, other.cert, other.key]
            r = c.run(n2, args + extra, timeout=60)
            assert r.returncode == 0, r.stderr
            assert r.stdout.strip().startswith("refused"), (mode, r.stdout)
        r = c.run(n2, args + ["member", n2.tls.ca, n2.tls.cert, n2.tls.key], timeout=60)
        assert r.stdout.strip() == "ok", r.stdout + r.stderr  # the control: a member is served
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=15)
        unpin(c, "n1", ds)


def test_striped_dataset_twice_a_cache_is_read_whole_by_a_fourth_node(group_cluster, tmp_path):
    c = group_cluster
    ds = f"s3://{c.bucket}/big/"
    total = sum(map(len, BIG.values()))
    assert total == 2 * CACHE
    holders = ["n1", "n2", "n3"]
    write_groups(c, holders, striping=True)
    shares = {}
    for n in holders:
        res = warm(c, n, ds, "--group-striping")
        assert res["skipped"] == 0 and not res["failed"], res  # its share fits its cache
        shares[n] = res["transferred"]
        assert res["transferred"] + res["others_bytes"] == total
    assert sum(shares.values()) == total  # each block fetched once in the group
    # n4 joins the group as a reader that holds none of the data (it has not rebalanced)
    write_groups(c, NAMES, striping=True)
    servers = [serve(c, n) for n in holders]
    try:
        before = stats(c, "n4")
        mnt = c.mount(c.nodes["n4"], ds, tmp_path / "n4-big")
        for k, v in BIG.items():
            assert digest(mnt / Path(k).name) == sha(v)
        after = stats(c, "n4")
        assert after["s3_gets"] == before["s3_gets"]
        assert after["peer_hits"] - before["peer_hits"] == total // BS
        c.umount(mnt)
    finally:
        for s in servers:
            s.send_signal(signal.SIGTERM)
            s.wait(timeout=15)


def test_a_joining_node_fetches_only_its_share_from_peers(group_cluster):
    c = group_cluster
    ds = f"s3://{c.bucket}/big/"
    # after the previous test n1..n3 hold the dataset striped over three; n4 now warms too
    write_groups(c, ["n1", "n2", "n3"], striping=True)
    for n in ("n1", "n2", "n3"):
        warm(c, n, ds, "--group-striping")  # idempotent: completes a share if the test ran alone
    # n4 starts empty (the previous test's reads left blocks in its cache)
    shutil.rmtree(c.nodes["n4"].cache_dir / "cache.lmdb")
    fusecache.NodeCache.open(c.nodes["n4"].cache_dir, limit_bytes=CACHE, block_size=BS).close()
    write_groups(c, NAMES, striping=True)
    servers = [serve(c, n) for n in ("n1", "n2", "n3")]
    try:
        before = stats(c, "n4")
        res = warm(c, "n4", ds, "--group-striping")
        after = stats(c, "n4")
        blocks = res["transferred"] // BS
        assert 0.1 * 64 < blocks < 0.45 * 64  # about a quarter moves, to the newcomer
        cache = fusecache.NodeCache.open(c.nodes["n4"].cache_dir)
        try:
            pinned = sum(1 for oid in cache.iter_objects(c.bucket, "big/")
                         for i in range(oid.block_count(BS))
                         if cache.contains_block(oid, i) and cache.is_pinned(oid))
        finally:
            cache.close()
        assert pinned == blocks
        # its share came from the old holders, not from S3
        assert after["s3_gets"] == before["s3_gets"], (before, after, res)
        for n in ("n1", "n2", "n3"):
            assert warm(c, n, ds, "--group-striping")["transferred"] == 0
    finally:
        for s in servers:
            s.send_signal(signal.SIGTERM)
            s.wait(timeout=15)


def _objects(cache_dir: Path, bucket: str) -> list:
    cache = fusecache.NodeCache.open(cache_dir)
    try:
        return list(cache.iter_objects(bucket))
    finally:
        cache.close()


# A raw gRPC caller of the peer service (run inside a node's network namespace).
PROBE = r'''
import sys
import grpc
from fusecache._proto import peer_pb2, peer_pb2_grpc

target, bucket, key, etag, size, bs, mode, *tls = sys.argv[1:]
if mode == "plaintext":
    channel = grpc.insecure_channel(target)
else:
    ca = open(tls[0], "rb").read()
    if mode == "no-client-cert":
        creds = grpc.ssl_channel_credentials(root_certificates=ca)
    else:
        creds = grpc.ssl_channel_credentials(ca, open(tls[2], "rb").read(),
                                             open(tls[1], "rb").read())
    channel = grpc.secure_channel(target, creds,
                                  options=[("grpc.ssl_target_name_override", "n1")])
stub = peer_pb2_grpc.PeerStub(channel)
try:
    stub.GetBlock(peer_pb2.GetBlockRequest(bucket=bucket, key=key, etag=etag, size=int(size),
                                           block_size=int(bs), index=0), timeout=10)
    print("ok")
except grpc.RpcError as e:
    print("refused", e.code().name)
'''
