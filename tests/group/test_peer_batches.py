"""Several blocks in one peer call (GetBlocks): the server (peer_server.get_blocks), the
client (PeerClient.fetch_first_blocks) and folder read-ahead through a real mount.

Node A's cache is filled by the real ``prefetchd warm`` and served by a real ``fusecache
peer-serve``; SeaweedFS is the S3. A lying peer is a real gRPC server in this process.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import zlib
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from fusecache._proto import peer_pb2, peer_pb2_grpc
from fusecache.group import GroupWatcher, Member
from fusecache.metrics import Metrics
from fusecache.nodecache import NodeCache, ObjectId, block_key
from fusecache.peer_client import PeerClient
from fusecache.peer_server import MAX_BATCH
from fusecache.peer_wire import decode_batch, encode_batch

from mounting import mounted
from peering import (
    Pki,
    free_port,
    group_file,
    node_stats,
    oid_of,
    peer_serve,
    upload,
    wait_for,
    warm,
)

KiB = 1 << 10


def test_batch_wire_format_is_protobufs_own() -> None:
    """What encode_batch writes, protobuf reads as a GetBlocksResponse, and back."""
    blocks = [(b"abc" * 1000, zlib.crc32(b"abc" * 1000), b"k1"), None, (b"z", 7, b"k3")]
    msg = peer_pb2.GetBlocksResponse.FromString(encode_batch(blocks))
    assert [(b.data, b.crc32, b.block_key) for b in msg.blocks] == [
        (b"abc" * 1000, blocks[0][1], b"k1"), (b"", 0, b""), (b"z", 7, b"k3")]
    back = decode_batch(msg.SerializeToString())
    assert back[1] is None
    assert [(bytes(d), c, k) for d, c, k in (back[0], back[2])] == [blocks[0], blocks[2]]


@pytest.mark.s3
def test_get_blocks_serves_what_the_cache_holds_and_answers_empty_for_the_rest(
        local_s3, s3_env, bucket, tmp_path):
    files = {f"f/{i:02d}.jpg": os.urandom(60 * KiB + i * 997) for i in range(12)}
    upload(local_s3, bucket, files)
    a = tmp_path / "a"
    warm(a, f"s3://{bucket}/f/")
    upload(local_s3, bucket, {"f/late.jpg": b"not warmed"})  # on S3, not in A's cache
    oids = [oid_of(local_s3, bucket, k) for k in [*files, "f/late.jpg"]]
    pki = Pki(tmp_path / "pki")
    ta, tb, tc = pki.node("node-a"), pki.node("node-b"), pki.node("node-c")
    members = [Member("node-a", "127.0.0.1:1", buckets=(bucket,)),
               Member("node-b", "127.0.0.1:1", buckets=(bucket,)),
               Member("node-c", "127.0.0.1:1", buckets=("another-bucket",))]
    group_file(a / "group.json", "node-a", members, ta)
    bs = NodeCache.open(a).block_size
    with peer_serve(a) as (_, port):
        def client_of(name: str, tls) -> tuple[PeerClient, Metrics]:
            gf = group_file(tmp_path / f"{name}.json", name, [
                Member("node-a", f"127.0.0.1:{port}", buckets=(bucket,),
                       datasets=(f"s3://{bucket}/f/",)), *members[1:]], tls)
            metrics = Metrics()
            return PeerClient(GroupWatcher(gf), metrics=metrics), metrics

        client, metrics = client_of("node-b", tb)
        try:
            got = client.fetch_first_blocks(oids, bs, budget=20)
        finally:
            client.close()
        assert {o.key: v for o, v in got.items()} == files  # every warmed one, exactly
        assert metrics.peer_requests.labels("node-a", "hit")._value.get() == 12
        assert metrics.peer_requests.labels("node-a", "miss")._value.get() == 1
        assert metrics.peer_fallbacks._value.get() == 1  # late.jpg: from S3
        # one call to node-a for the batch: one latency observation (late.jpg may then
        # be asked of its next candidate, node-c, which is not listening)
        assert sum(s.value for m in metrics.peer_latency.collect() for s in m.samples
                   if s.name.endswith("_count") and s.labels["peer"] == "node-a") == 1

        client, metrics = client_of("node-c", tc)  # a member without the bucket
        try:
            assert client.fetch_first_blocks(oids, bs, budget=20) == {}
        finally:
            client.close()
        assert metrics.peer_requests.labels("node-a", "denied")._value.get() == 1

        creds = grpc.ssl_channel_credentials(Path(tb.ca).read_bytes(),
                                             Path(tb.key).read_bytes(),
                                             Path(tb.cert).read_bytes())
        with grpc.secure_channel(f"127.0.0.1:{port}", creds, options=[
                ("grpc.ssl_target_name_override", "node-a")]) as ch:
            stub = peer_pb2_grpc.PeerStub(ch)

            def req(o: ObjectId, index: int = 0) -> peer_pb2.GetBlockRequest:
                return peer_pb2.GetBlockRequest(bucket=o.bucket, key=o.key, etag=o.etag,
                                                size=o.size, block_size=bs, index=index)
            for bad, why in (([req(oids[0])] * (MAX_BATCH + 1), "blocks per call"),
                             ([], "blocks per call"),
                             ([req(oids[0]), req(oids[1], index=1)], "past the end")):
                with pytest.raises(grpc.RpcError) as e:
                    stub.GetBlocks(peer_pb2.GetBlocksRequest(blocks=bad), timeout=10)
                assert e.value.code() is grpc.StatusCode.INVALID_ARGUMENT
                assert why in e.value.details()
            other = ObjectId("another-bucket", "f/00.jpg", oids[0].etag, oids[0].size)
            with pytest.raises(grpc.RpcError) as e:  # one block of a bucket not its own
                stub.GetBlocks(peer_pb2.GetBlocksRequest(blocks=[req(oids[0]), req(other)]),
                               timeout=10)
            assert e.value.code() is grpc.StatusCode.PERMISSION_DENIED
    served = node_stats(a)
    assert served["peer_blocks_served"] == 12
    assert served["peer_bytes_served"] == sum(len(v) for v in files.values())


class _LyingBatchPeer(peer_pb2_grpc.PeerServicer):
    """Answers GetBlocks with the true blocks, except one with a byte flipped."""

    def __init__(self, truth: dict[str, bytes], flip: str) -> None:
        self.truth, self.flip, self.calls = truth, flip, 0

    def GetBlocks(self, request, context):  # noqa: N802
        self.calls += 1
        out = []
        for r in request.blocks:
            data = self.truth[r.key]
            crc = zlib.crc32(data)
            if r.key == self.flip:
                data = bytes([data[0] ^ 1]) + data[1:]
            key = block_key(ObjectId(r.bucket, r.key, r.etag, r.size), r.index, r.block_size)
            out.append(peer_pb2.GetBlockResponse(data=data, crc32=crc, block_key=key))
        return peer_pb2.GetBlocksResponse(blocks=out)


@pytest.mark.s3
def test_a_batch_keeps_only_the_blocks_that_pass_verification(local_s3, bucket, tmp_path):
    files = {f"l/{i}.bin": os.urandom(40 * KiB + i) for i in range(5)}
    upload(local_s3, bucket, files)
    oids = [oid_of(local_s3, bucket, k) for k in files]
    liar = _LyingBatchPeer(files, flip="l/3.bin")
    server = grpc.server(futures.ThreadPoolExecutor(2))
    peer_pb2_grpc.add_PeerServicer_to_server(liar, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        gf = group_file(tmp_path / "group.json", "me", [
            Member("liar", f"127.0.0.1:{port}", buckets=(bucket,)), Member("me", "x:1")])
        metrics = Metrics()
        client = PeerClient(GroupWatcher(gf), insecure=True, metrics=metrics)
        try:
            got = client.fetch_first_blocks(oids, 1 << 20, budget=10)
            assert {o.key: v for o, v in got.items()} == {
                k: v for k, v in files.items() if k != "l/3.bin"}
            assert metrics.peer_requests.labels("liar", "bad")._value.get() == 1
            # the peer that sent a bad block is skipped for a while: no second call
            assert client.fetch_first_blocks(oids[3:4], 1 << 20, budget=10) == {}
            assert liar.calls == 1
        finally:
            client.close()
    finally:
        server.stop(0)


def _b_asks_a(b: Path, port: int, bucket: str, prefix: str) -> None:
    """Node B's group file (plaintext): node A on *port* holds s3://bucket/prefix."""
    b.mkdir()
    group_file(b / "group.json", "node-b", [
        Member("node-a", f"127.0.0.1:{port}", buckets=(bucket,),
               datasets=(f"s3://{bucket}/{prefix}",)),
        Member("node-b", "127.0.0.1:1", buckets=(bucket,))])


@pytest.mark.fuse
@pytest.mark.s3
def test_folder_read_ahead_takes_a_warmed_folder_from_the_peer_in_batches(
        local_s3, s3_env, bucket, tmp_path):
    """The user's path: a mount on node B reads a folder of small files that node A
    warmed; folder read-ahead asks A for them several at a time, no S3 GET."""
    files = {f"img/cls/{i:03d}.jpg": os.urandom(30 * KiB + 17 * i) for i in range(40)}
    upload(local_s3, bucket, files)
    a, b = tmp_path / "a", tmp_path / "b"
    warm(a, f"s3://{bucket}/img/")
    with peer_serve(a, "--peer-insecure") as (_, port):
        _b_asks_a(b, port, bucket, "img/")
        metrics_port = free_port()
        with mounted(f"s3://{bucket}/img", tmp_path / "mb", s3_env, "--cache-dir", str(b),
                     "--peer-insecure", "--metrics-port", str(metrics_port),
                     "--peer-timeout", "5") as mp:
            seen = {f"img/cls/{p.name}": p.read_bytes() for p in sorted((mp / "cls").iterdir())}
            prom = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics",
                                          timeout=10).read().decode()
        assert seen == files
        st = wait_for(lambda: (s := node_stats(b))["peer_hits"] >= len(files) and s,
                      "node B's peer hits")
        assert st["s3_gets"] == 0
    calls = sum(float(line.rsplit(" ", 1)[1]) for line in prom.splitlines()
                if line.startswith('fusecache_peer_request_seconds_count{peer="node-a"}'))
    # 40 files: the first ones read on demand, the rest fetched ahead 16 at a time
    assert 1 <= calls <= len(files) // 2, prom


@contextlib.contextmanager
def _a_serves_c(tmp_path: Path, bucket: str, a: Path, c: Path,
                *serve_args: str) -> Iterator[subprocess.Popen]:
    """Node A's cache served with mutual TLS (``fusecache peer-serve``), node C's group
    file naming A: C's warms ask A first. Yields A's server process."""
    pki = Pki(tmp_path / "pki")
    ta, tc = pki.node("node-a"), pki.node("node-c")
    members = [Member("node-a", "127.0.0.1:1", buckets=(bucket,)),
               Member("node-c", "127.0.0.1:1", buckets=(bucket,))]
    group_file(a / "group.json", "node-a", members, ta)
    with peer_serve(a, *serve_args) as (proc, port):
        c.mkdir(exist_ok=True)
        group_file(c / "group.json", "node-c", [
            Member("node-a", f"127.0.0.1:{port}", buckets=(bucket,)), members[1]], tc)
        yield proc


def _served_calls(metrics_port: int) -> float:
    prom = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics",
                                  timeout=10).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in prom.splitlines()
               if line.startswith('fusecache_peer_requests_served_total{result="ok"}'))


@pytest.mark.s3
def test_prefetchd_warm_takes_small_files_from_a_peer_in_batches(
        local_s3, s3_env, bucket, tmp_path):
    """``prefetchd warm`` on node C of a dataset of small files node A holds: a GetBlocks
    call per batch of files, not a call per file; a file A lacks comes from S3; the large
    object's blocks are asked one by one as before; every byte lands in C's cache."""
    small = {f"ds/c{i % 3}/{i:03d}.jpg": os.urandom(20 * KiB + 31 * i) for i in range(150)}
    big = {"ds/big.bin": os.urandom(9 * 1024 * KiB)}  # two blocks
    upload(local_s3, bucket, {**small, **big})
    a, c = tmp_path / "a", tmp_path / "c"
    warm(a, f"s3://{bucket}/ds/")
    late = {"ds/c0/late.jpg": os.urandom(40 * KiB)}  # uploaded after A's warm
    upload(local_s3, bucket, late)
    metrics_port = free_port()
    with _a_serves_c(tmp_path, bucket, a, c, "--metrics-port", str(metrics_port)):
        assert _served_calls(metrics_port) == 0
        warm(c, f"s3://{bucket}/ds/")
        calls = _served_calls(metrics_port)
    # 151 small files in three batches of at most 64 (the late one asked, not given),
    # the big object's two blocks one call each
    assert 3 <= calls <= 5, calls
    st = node_stats(c)
    assert st["s3_gets"] == 1, st  # the late file only
    assert st["by_mount"]["prefetchd"]["peer_bytes"] == sum(
        len(v) for v in (*small.values(), *big.values()))
    cache = NodeCache.open(c)
    try:
        for k, v in {**small, **big, **late}.items():
            oid = oid_of(local_s3, bucket, k)
            assert b"".join(cache.get_block(oid, i) or b"!"
                            for i in range(oid.block_count(cache.block_size))) == v, k
            assert cache.is_pinned(oid), k
    finally:
        cache.close()


@pytest.mark.s3
def test_warm_of_small_files_from_a_peer_into_a_cache_too_small_stops_and_says_so(
        local_s3, s3_env, bucket, tmp_path):
    """A warm whose own pins fill node C's cache half way: what fits is stored whole and
    pinned, the rest is reported skipped ("cache full of pinned data"), none of it half
    cached or left pinned, and nothing is asked of S3 for it."""
    small = {f"full/{i:03d}.bin": os.urandom(50 * KiB + i) for i in range(40)}
    upload(local_s3, bucket, small)
    a, c = tmp_path / "a", tmp_path / "c"
    warm(a, f"s3://{bucket}/full/")
    NodeCache.open(c, limit_bytes=1024 * KiB).close()  # room for about half
    with _a_serves_c(tmp_path, bucket, a, c):
        r = subprocess.run([sys.executable, "-m", "prefetchd.cli", "warm",
                            f"s3://{bucket}/full/", "--cache-dir", str(c), "--json"],
                           capture_output=True, text=True, timeout=300)
    # (exit 1 and a line saying so: a warm the cache could not take is partial)
    assert r.returncode == 1 and "not warmed: the node cache is full of pinned data" in r.stderr
    assert "could not update the node cache's counters" not in r.stderr, r.stderr
    res = json.loads(r.stdout)["datasets"][0]
    assert 0 < res["skipped"] < len(small), res
    assert res["fetched_objects"] + res["skipped"] == len(small), res
    st = node_stats(c)
    assert st["s3_gets"] == 0, st
    cache = NodeCache.open(c)
    try:
        held = 0
        for k, v in small.items():
            oid = oid_of(local_s3, bucket, k)
            got = cache.get_block(oid, 0)
            assert got is None or got == v, k
            assert cache.is_pinned(oid) == (got is not None), k
            held += got is not None
        assert held == res["fetched_objects"]
    finally:
        cache.close()


@pytest.mark.s3
def test_warm_of_small_files_from_a_hung_peer_falls_back_to_s3_byte_exact(
        local_s3, s3_env, bucket, tmp_path):
    """The peer that holds the dataset hangs (SIGSTOP) while node C warms its small files:
    each batch call ends at its bound, the peer's breaker opens, and every file comes from
    S3 whole; the warm is not held up past a few bounds."""
    small = {f"hung/{i:03d}.bin": os.urandom(30 * KiB + i) for i in range(200)}
    upload(local_s3, bucket, small)
    a, c = tmp_path / "a", tmp_path / "c"
    warm(a, f"s3://{bucket}/hung/")
    with _a_serves_c(tmp_path, bucket, a, c) as proc:
        proc.send_signal(signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            warm(c, f"s3://{bucket}/hung/")
            took = time.monotonic() - t0
        finally:
            proc.send_signal(signal.SIGCONT)
    # four batches of 64 files or fewer, three at once: two rounds of the 5 s bound at most
    # before the breaker sends the rest straight to S3 (generous for a loaded machine)
    assert took < 60, took
    st = node_stats(c)
    assert st["s3_gets"] == len(small), st
    cache = NodeCache.open(c)
    try:
        for k, v in small.items():
            assert cache.get_block(oid_of(local_s3, bucket, k), 0) == v, k
    finally:
        cache.close()


@pytest.mark.fuse
@pytest.mark.s3
def test_folder_read_ahead_from_a_peer_that_hangs_falls_back_to_s3_within_the_bound(
        local_s3, s3_env, bucket, tmp_path):
    """A mount on node B reads a folder of small files that node A holds; A hangs
    (SIGSTOP) after the first files: every file still reads whole and right, none waits
    much past the peer bound (a batch under way ends at it, then the peer is skipped and
    S3 serves), and S3 served the rest."""
    files = {f"img/hang/{i:03d}.jpg": os.urandom(40 * KiB + 13 * i) for i in range(120)}
    upload(local_s3, bucket, files)
    a, b = tmp_path / "a", tmp_path / "b"
    warm(a, f"s3://{bucket}/img/")
    with peer_serve(a, "--peer-insecure") as (proc, port):
        _b_asks_a(b, port, bucket, "img/")
        with mounted(f"s3://{bucket}/img", tmp_path / "mb", s3_env, "--cache-dir", str(b),
                     "--peer-insecure", "--peer-timeout", "1", "--read-timeout", "20") as mp:
            names = sorted((mp / "hang").iterdir())
            seen, slowest = {}, 0.0
            for i, p in enumerate(names):
                if i == 3:
                    proc.send_signal(signal.SIGSTOP)  # a hung peer: batches in flight stall
                t0 = time.monotonic()
                seen[f"img/hang/{p.name}"] = p.read_bytes()
                slowest = max(slowest, time.monotonic() - t0)
            proc.send_signal(signal.SIGCONT)
    assert seen == files
    # the bound of one try is --peer-timeout plus the batch's size at 50 MB/s (about
    # 1.1 s here); a read may wait for one such try, then S3 (a loaded machine: margin)
    assert slowest < 8, slowest
    st = node_stats(b)
    assert st["s3_gets"] >= 1 and st["peer_hits"] >= 1, st
    assert st["s3_gets"] + st["peer_hits"] >= len(files), st
