"""Node caches serving each other's blocks (fusecache/peer_server.py, peer_client.py, reader.py).

Each "node" is a cache dir of its own with its own group file; node A's cache is served by
a real ``fusecache peer-serve`` process on 127.0.0.1, node B reads through a real
``fusecache mount`` whose read path asks A before S3 (real SeaweedFS). S3 traffic is
counted by the node cache's counters (``fusecache stats --json``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import urllib.request
import zlib
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from fusecache._proto import peer_pb2, peer_pb2_grpc
from fusecache.group import GroupWatcher, Member
from fusecache.metrics import Metrics
from fusecache.nodecache import NodeCache, ObjectId, block_key
from fusecache.peer_client import PeerClient
from fusecache.peer_server import STREAM_CHUNK

from mounting import mounted, run_cli
from peering import (
    FUSECACHE,
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

MiB = 1 << 20
BS = 8 * MiB


def _blocks(files: dict[str, bytes]) -> int:
    return sum((len(v) + BS - 1) // BS for v in files.values())


# -- the user's path ------------------------------------------------------------------------


@pytest.mark.fuse
@pytest.mark.s3
def test_dataset_warmed_on_a_is_read_on_b_over_mtls_with_no_s3_get(
        local_s3, s3_env, bucket, tmp_path):
    files = {"data/big.bin": os.urandom(20 * MiB + 12345), "data/small.bin": os.urandom(70_000),
             "data/sub/mid.bin": os.urandom(5 * MiB)}
    upload(local_s3, bucket, files)
    a, b = tmp_path / "a", tmp_path / "b"
    warm(a, f"s3://{bucket}/data/")
    pki = Pki(tmp_path / "pki")
    ta, tb = pki.node("node-a"), pki.node("node-b")
    members = [Member("node-a", "127.0.0.1:1", buckets=(bucket,)),
               Member("node-b", "127.0.0.1:1", buckets=(bucket,))]
    group_file(a / "group.json", "node-a", members, ta)
    with peer_serve(a) as (_, port):
        b.mkdir()
        group_file(b / "group.json", "node-b", [
            Member("node-a", f"127.0.0.1:{port}", buckets=(bucket,),
                   datasets=(f"s3://{bucket}/data/",)),
            Member("node-b", "127.0.0.1:1", buckets=(bucket,))], tb)
        metrics_port = free_port()
        # a generous --peer-timeout: on a loaded test machine a peer's block must not
        # time out into an S3 GET (the bound itself is the next test's subject)
        with mounted(f"s3://{bucket}/data", tmp_path / "mb", s3_env, "--cache-dir", str(b),
                     "--metrics-port", str(metrics_port), "--peer-timeout", "5") as mp:
            seen = {f"data/{p.relative_to(mp)}": p.read_bytes()
                    for p in sorted(mp.rglob("*")) if p.is_file()}
            prom = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics",
                                          timeout=10).read().decode()
        assert seen == files
        st = wait_for(lambda: (s := node_stats(b))["peer_hits"] >= _blocks(files) and s,
                      "node B's peer hits")
        assert st["s3_gets"] == 0 and st["s3_bytes"] == 0
        assert st["peer_bytes"] == sum(len(v) for v in files.values())
        assert 'fusecache_peer_requests_total{peer="node-a",result="hit"}' in prom
        assert "fusecache_peer_request_seconds_bucket" in prom
        # the blocks from A were stored in B's own cache, byte for byte
        cache = NodeCache.open(b)
        try:
            for k, v in files.items():
                oid = oid_of(local_s3, bucket, k)
                got = b"".join(cache.get_block(oid, i) or b"!"
                               for i in range(oid.block_count(cache.block_size)))
                assert got == v
        finally:
            cache.close()
        served = wait_for(lambda: (s := node_stats(a))["peer_blocks_served"] >= _blocks(files)
                          and s, "node A's served counter")
        assert served["peer_bytes_served"] == st["peer_bytes"]


@pytest.mark.s3
def test_prefetchd_warm_on_c_takes_the_blocks_from_a(local_s3, s3_env, bucket, tmp_path):
    files = {"w/one.bin": os.urandom(9 * MiB), "w/two.bin": os.urandom(300_000)}
    upload(local_s3, bucket, files)
    a, c = tmp_path / "a", tmp_path / "c"
    warm(a, f"s3://{bucket}/w/")
    pki = Pki(tmp_path / "pki")
    ta, tc = pki.node("node-a"), pki.node("node-c")
    group_file(a / "group.json", "node-a", [
        Member("node-a", "127.0.0.1:1", buckets=(bucket,)),
        Member("node-c", "127.0.0.1:1", buckets=(bucket,))], ta)
    with peer_serve(a) as (_, port):
        c.mkdir()
        group_file(c / "group.json", "node-c", [
            Member("node-a", f"127.0.0.1:{port}", buckets=(bucket,)),
            Member("node-c", "127.0.0.1:1", buckets=(bucket,))], tc)
        warm(c, f"s3://{bucket}/w/")
    st = node_stats(c)
    assert st["peer_hits"] == _blocks(files) and st["s3_gets"] == 0, st
    assert st["by_mount"]["prefetchd"].get("s3_bytes", 0) == 0
    assert st["by_mount"]["prefetchd"]["peer_bytes"] == sum(len(v) for v in files.values())
    cache = NodeCache.open(c)
    try:
        for k, v in files.items():
            oid = oid_of(local_s3, bucket, k)
            assert b"".join(cache.get_block(oid, i) or b"!"
                            for i in range(oid.block_count(cache.block_size))) == v
    finally:
        cache.close()


@pytest.mark.fuse
@pytest.mark.s3
def test_peer_stopped_then_killed_mid_read_falls_back_to_s3_byte_exact(
        local_s3, s3_env, bucket, tmp_path):
    data = os.urandom(8 * BS)
    upload(local_s3, bucket, {"d/shard.bin": data})
    a, b = tmp_path / "a", tmp_path / "b"
    warm(a, f"s3://{bucket}/d/")
    with peer_serve(a, "--peer-insecure") as (proc, port):
        b.mkdir()
        group_file(b / "group.json", "node-b", [
            Member("node-a", f"127.0.0.1:{port}", buckets=(bucket,),
                   datasets=(f"s3://{bucket}/d/",)),
            Member("node-b", "127.0.0.1:1", buckets=(bucket,))])
        with mounted(f"s3://{bucket}/d", tmp_path / "mb", s3_env, "--cache-dir", str(b),
                     "--peer-insecure", "--peer-timeout", "2", "--readahead-budget", "8MiB",
                     "--read-timeout", "20") as mp:
            with open(mp / "shard.bin", "rb", buffering=0) as f:
                got = [f.read(2 * BS)]
                assert wait_for(lambda: node_stats(b)["peer_hits"] >= 1, "blocks from A")
                proc.send_signal(signal.SIGSTOP)  # a hung peer: every try times out
                got.append(f.read(2 * BS))
                proc.send_signal(signal.SIGKILL)  # a dead one: refused at once
                proc.wait(timeout=30)
                got.append(f.read())
        assert b"".join(got) == data
        st = wait_for(lambda: (s := node_stats(b))["s3_gets"] >= 1 and s, "S3 fallbacks")
        assert st["peer_hits"] + st["s3_gets"] >= 8
        assert st["peer_fallbacks"] >= 1


@pytest.mark.fuse
@pytest.mark.s3
def test_with_s3_down_blocks_still_come_from_the_group(private_s3, tmp_path):
    data = os.urandom(2 * BS + 999)
    c = private_s3.client()
    c.create_bucket(Bucket="dset")
    c.put_object(Bucket="dset", Key="e/x.bin", Body=data)
    env = dict(os.environ, **private_s3.env())
    env.pop("AWS_CA_BUNDLE", None)
    a, b = tmp_path / "a", tmp_path / "b"
    r = subprocess.run([sys.executable, "-m", "prefetchd.cli", "warm", "s3://dset/e/",
                        "--cache-dir", str(a)], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    with peer_serve(a, "--peer-insecure") as (_, port):
        b.mkdir()
        group_file(b / "group.json", "node-b", [
            Member("node-a", f"127.0.0.1:{port}", buckets=("dset",),
                   datasets=("s3://dset/e/",)),
            Member("node-b", "127.0.0.1:1", buckets=("dset",))])
        with mounted("s3://dset/e", tmp_path / "mb", private_s3.env(), "--cache-dir", str(b),
                     "--peer-insecure", "--peer-timeout", "5", "--read-timeout", "20") as mp:
            assert os.listdir(mp) == ["x.bin"]  # the listing is cached; the bytes are not
            private_s3.stop()
            assert (mp / "x.bin").read_bytes() == data
    st = node_stats(b)
    assert st["peer_hits"] == 3 and st["s3_gets"] == 0


# -- a peer that lies --------------------------------------------------------------------------


class _LyingPeer(peer_pb2_grpc.PeerServicer):
    """A peer (a real gRPC server in this process) that serves wrong blocks: through
    ReadBlock in chunks of 300 KiB (*stream*), or only through GetBlock, as a peer of a
    version before ReadBlock (its ReadBlock answers UNIMPLEMENTED, as gRPC does for a
    method a server lacks)."""

    def __init__(self, truth: dict[tuple[str, int], bytes], mode: str,
                 stream: bool = False) -> None:
        self.truth, self.mode, self.stream = truth, mode, stream
        self.calls = self.read_calls = 0
        self.lock = threading.Lock()

    def _answer(self, req) -> tuple[bytes, int, bytes]:
        data = self.truth[(req.key, req.index)]
        oid = ObjectId(req.bucket, req.key, req.etag, req.size)
        key = block_key(oid, req.index, req.block_size)
        if self.mode == "flipped":  # crc of the true bytes, one byte changed
            crc, data = zlib.crc32(data), bytes([data[0] ^ 1]) + data[1:]
        elif self.mode == "short":
            data = data[:-1]
            crc = zlib.crc32(data)
        elif self.mode == "long":  # more bytes than the block has, summed right
            data += b"x" * 1000
            crc = zlib.crc32(data)
        elif self.mode == "other-version":  # consistent, but another block key
            crc, key = zlib.crc32(data), block_key(
                ObjectId(req.bucket, req.key, "other-etag", req.size), req.index,
                req.block_size)
        else:
            crc = zlib.crc32(data)
        return data, crc, key

    def GetBlock(self, req, context):  # noqa: N802
        with self.lock:
            self.calls += 1
        data, crc, key = self._answer(req)
        return peer_pb2.GetBlockResponse(data=data, crc32=crc, block_key=key)

    def ReadBlock(self, req, context):  # noqa: N802
        with self.lock:
            self.read_calls += 1
        if not self.stream:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not found!")
        data, crc, key = self._answer(req)
        step = 300 * 1024
        yield peer_pb2.GetBlockResponse(data=data[:step], crc32=crc, block_key=key)
        for pos in range(step, len(data), step):
            yield peer_pb2.GetBlockResponse(data=data[pos:pos + step])


def _serve_liar(liar: _LyingPeer) -> tuple[grpc.Server, int]:
    server = grpc.server(futures.ThreadPoolExecutor(4),
                         options=[("grpc.max_send_message_length", 64 * MiB)])
    peer_pb2_grpc.add_PeerServicer_to_server(liar, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, port


@pytest.mark.s3
@pytest.mark.parametrize("stream", [True, False], ids=["ReadBlock", "older-GetBlock-only"])
@pytest.mark.parametrize("mode", ["flipped", "short", "long", "other-version", "honest"])
def test_client_refuses_a_block_that_fails_verification(local_s3, bucket, tmp_path, mode,
                                                         stream):
    data = os.urandom(3 * MiB)
    upload(local_s3, bucket, {"x.bin": data})
    oid = oid_of(local_s3, bucket, "x.bin")
    liar = _LyingPeer({("x.bin", 0): data[:2 * MiB], ("x.bin", 1): data[2 * MiB:]}, mode,
                      stream)
    server, port = _serve_liar(liar)
    try:
        gf = group_file(tmp_path / "group.json", "me", [
            Member("liar", f"127.0.0.1:{port}", buckets=(bucket,)), Member("me", "x:1")])
        metrics = Metrics()
        client = PeerClient(GroupWatcher(gf), insecure=True, metrics=metrics)
        lent = bytearray(MiB)  # a reader's spare buffer of the block's length
        try:
            got = client.fetch(oid, 1, 2 * MiB, budget=5.0, into=lent)
            again = client.fetch(oid, 1, 2 * MiB, budget=5.0)
        finally:
            client.close()
        if mode == "honest":
            assert got == again == data[2 * MiB:]
            assert got is lent
            # one ReadBlock call each; an older peer is asked with GetBlock after
            # refusing it once, and not asked for ReadBlock again
            assert (liar.read_calls, liar.calls) == ((2, 0) if stream else (1, 2))
        else:
            assert got is None and again is None  # the second: the peer's breaker is open
            assert (liar.read_calls, liar.calls) == ((1, 0) if stream else (1, 1))
            assert metrics.peer_requests.labels("liar", "bad")._value.get() == 1
            assert metrics.peer_fallbacks._value.get() == 1
    finally:
        server.stop(0)


@pytest.mark.s3
@pytest.mark.parametrize("mode", ["honest", "flipped"])
def test_a_small_block_is_asked_for_in_one_unary_call(local_s3, bucket, tmp_path, mode):
    """A block that fits one ReadBlock message (a small file) is asked for with GetBlock:
    the caller's cost of a stream is not paid for one message; verified all the same."""
    data = os.urandom(100 * 1024)
    upload(local_s3, bucket, {"s.jpg": data})
    oid = oid_of(local_s3, bucket, "s.jpg")
    liar = _LyingPeer({("s.jpg", 0): data}, mode, stream=True)
    server, port = _serve_liar(liar)
    try:
        gf = group_file(tmp_path / "group.json", "me", [
            Member("liar", f"127.0.0.1:{port}", buckets=(bucket,)), Member("me", "x:1")])
        client = PeerClient(GroupWatcher(gf), insecure=True)
        try:
            got = client.fetch(oid, 0, 2 * MiB, budget=5.0)
        finally:
            client.close()
        assert (liar.read_calls, liar.calls) == (0, 1)
        assert got == (data if mode == "honest" else None)
    finally:
        server.stop(0)


@pytest.mark.s3
def test_read_block_sends_a_block_in_chunks_with_its_sum_and_key_first(
        local_s3, s3_env, bucket, tmp_path):
    """The real server's ReadBlock, read with a stock protobuf stub: chunks of at most
    STREAM_CHUNK bytes that add up to the block, crc32 and block key in the first only;
    the codes of GetBlock before the first chunk."""
    data = os.urandom(STREAM_CHUNK * 2 + 12345)
    upload(local_s3, bucket, {"r/x.bin": data, "r/gone.bin": b"not warmed"})
    a = tmp_path / "a"
    warm(a, f"s3://{bucket}/r/x.bin")
    oid, gone = oid_of(local_s3, bucket, "r/x.bin"), oid_of(local_s3, bucket, "r/gone.bin")
    bs = NodeCache.open(a).block_size
    with peer_serve(a, "--peer-insecure") as (_, port), \
            grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        stub = peer_pb2_grpc.PeerStub(ch)

        def ask(o: ObjectId) -> list:
            return list(stub.ReadBlock(peer_pb2.GetBlockRequest(
                bucket=o.bucket, key=o.key, etag=o.etag, size=o.size, block_size=bs,
                index=0), timeout=20))
        msgs = ask(oid)
        assert [len(m.data) for m in msgs] == [STREAM_CHUNK, STREAM_CHUNK, 12345]
        assert b"".join(m.data for m in msgs) == data
        assert (msgs[0].crc32, msgs[0].block_key) == (zlib.crc32(data), block_key(oid, 0, bs))
        assert all((m.crc32, m.block_key) == (0, b"") for m in msgs[1:])
        with pytest.raises(grpc.RpcError) as e:
            ask(gone)
        assert e.value.code() is grpc.StatusCode.NOT_FOUND


@pytest.mark.fuse
@pytest.mark.s3
def test_mount_serves_s3_bytes_when_the_peer_lies(local_s3, s3_env, bucket, tmp_path):
    files = {"d/a.bin": os.urandom(3 * MiB), "d/b.bin": os.urandom(100_000)}
    upload(local_s3, bucket, files)
    liar = _LyingPeer({(k, 0): v for k, v in files.items()}, "flipped")
    server, port = _serve_liar(liar)
    b = tmp_path / "b"
    b.mkdir()
    group_file(b / "group.json", "node-b", [
        Member("liar", f"127.0.0.1:{port}", buckets=(bucket,), datasets=(f"s3://{bucket}/",)),
        Member("node-b", "127.0.0.1:1", buckets=(bucket,))])
    try:
        with mounted(f"s3://{bucket}/d", tmp_path / "mb", s3_env, "--cache-dir", str(b),
                     "--peer-insecure") as mp:
            seen = {f"d/{n}": (mp / n).read_bytes() for n in ("a.bin", "b.bin")}
        assert seen == files
        assert liar.calls >= 1
        st = wait_for(lambda: (s := node_stats(b))["s3_gets"] >= 2 and s, "S3 GETs")
        assert st["peer_hits"] == 0
        cache = NodeCache.open(b)  # what B stored is S3's bytes, not the liar's
        try:
            for k, v in files.items():
                assert cache.get_block(oid_of(local_s3, bucket, k), 0) == v
        finally:
            cache.close()
    finally:
        server.stop(0)


# -- who may connect -------------------------------------------------------------------------


@pytest.mark.s3
def test_mtls_refuses_callers_without_a_group_certificate_or_the_bucket(
        local_s3, s3_env, bucket, tmp_path):
    data = os.urandom(1 * MiB)
    upload(local_s3, bucket, {"p/x.bin": data})
    oid = oid_of(local_s3, bucket, "p/x.bin")
    a = tmp_path / "a"
    warm(a, f"s3://{bucket}/p/")
    pki, rogue = Pki(tmp_path / "pki"), Pki(tmp_path / "rogue", "rogue")
    ta = pki.node("node-a")
    tb, tc, tz = pki.node("node-b"), pki.node("node-c"), pki.node("node-z")
    rb = rogue.node("node-b")  # the right name, the wrong CA
    group_file(a / "group.json", "node-a", [
        Member("node-a", "127.0.0.1:1", buckets=(bucket,)),
        Member("node-b", "127.0.0.1:1", buckets=(bucket,)),
        Member("node-c", "127.0.0.1:1", buckets=("some-other-bucket",))], ta)
    req = peer_pb2.GetBlockRequest(bucket=bucket, key=oid.key, etag=oid.etag, size=oid.size,
                                   block_size=NodeCache.open(a).block_size, index=0)

    def call(creds: grpc.ChannelCredentials | None, port: int, server: str = "node-a") -> bytes:
        opts = [("grpc.ssl_target_name_override", server)]
        ch = (grpc.secure_channel(f"127.0.0.1:{port}", creds, options=opts) if creds
              else grpc.insecure_channel(f"127.0.0.1:{port}"))
        with ch:
            return peer_pb2_grpc.PeerStub(ch).GetBlock(req, timeout=10).data

    def creds(t, ca: str | None = None) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=Path(ca or t.ca).read_bytes(),
            private_key=Path(t.key).read_bytes() if t else None,
            certificate_chain=Path(t.cert).read_bytes() if t else None)

    with peer_serve(a) as (_, port):
        assert call(creds(tb), port) == data  # a member asking for its bucket
        no_cert = grpc.ssl_channel_credentials(root_certificates=Path(pki.ca).read_bytes())
        for bad in (no_cert, creds(rb, str(pki.ca)), None):
            with pytest.raises(grpc.RpcError) as e:
                call(bad, port)
            assert e.value.code() is grpc.StatusCode.UNAVAILABLE
        with pytest.raises(grpc.RpcError) as e:  # the server is not the member we meant
            call(creds(tb), port, server="node-c")
        assert e.value.code() is grpc.StatusCode.UNAVAILABLE
        for who in (tc, tz):  # a member without the bucket; a CA-signed non-member
            with pytest.raises(grpc.RpcError) as e:
                call(creds(who), port)
            assert e.value.code() is grpc.StatusCode.PERMISSION_DENIED
        # the mount's own client, with B's group file, gets the block
        gf = group_file(tmp_path / "b-group.json", "node-b", [
            Member("node-a", f"127.0.0.1:{port}", buckets=(bucket,)),
            Member("node-b", "127.0.0.1:1", buckets=(bucket,))], tb)
        client = PeerClient(GroupWatcher(gf))
        try:
            assert client.fetch(oid, 0, req.block_size, budget=10) == data
        finally:
            client.close()
        # node C's client is refused (not its bucket): None, so its reader goes to S3
        gf = group_file(tmp_path / "c-group.json", "node-c", [
            Member("node-a", f"127.0.0.1:{port}", buckets=(bucket,)),
            Member("node-c", "127.0.0.1:1", buckets=("some-other-bucket",))], tc)
        metrics = Metrics()
        client = PeerClient(GroupWatcher(gf), metrics=metrics)
        try:
            assert client.fetch(oid, 0, req.block_size, budget=10) is None
        finally:
            client.close()
        assert metrics.peer_requests.labels("node-a", "denied")._value.get() == 1
        assert metrics.peer_fallbacks._value.get() == 1
    st = node_stats(a)
    assert st["peer_blocks_served"] == 2


@pytest.mark.s3
def test_server_refuses_past_its_concurrency_and_bandwidth_share(
        local_s3, s3_env, bucket, tmp_path):
    data = os.urandom(BS)
    upload(local_s3, bucket, {"q/x.bin": data})
    oid = oid_of(local_s3, bucket, "q/x.bin")
    a = tmp_path / "a"
    warm(a, f"s3://{bucket}/q/")
    # 80 Mbit/s = 10 MB/s: one 8 MiB block takes ~0.7 s of the share beyond its burst
    with peer_serve(a, "--peer-insecure", "--peer-max-mbps", "80",
                    "--peer-max-concurrency", "1") as (_, port):
        req = peer_pb2.GetBlockRequest(bucket=bucket, key=oid.key, etag=oid.etag,
                                       size=oid.size, block_size=BS, index=0)
        with grpc.insecure_channel(f"127.0.0.1:{port}", options=[
                ("grpc.max_receive_message_length", 64 * MiB)]) as ch:
            stub = peer_pb2_grpc.PeerStub(ch)
            with pytest.raises(grpc.RpcError) as e:  # cannot go out before its deadline
                stub.GetBlock(req, timeout=0.3)
            assert e.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED

            def one(_: int) -> str:
                try:
                    return "ok" if stub.GetBlock(req, timeout=30).data == data else "bad"
                except grpc.RpcError as err:
                    return err.code().name
            with futures.ThreadPoolExecutor(4) as pool:
                results = list(pool.map(one, range(4)))
            # one at a time is served, the others are refused at once, never wrong bytes
            assert "ok" in results and "RESOURCE_EXHAUSTED" in results, results
            assert set(results) <= {"ok", "RESOURCE_EXHAUSTED"}, results
            missing = peer_pb2.GetBlockRequest(bucket=bucket, key="q/none", etag="e",
                                               size=5, block_size=BS, index=0)
            with pytest.raises(grpc.RpcError) as e:
                stub.GetBlock(missing, timeout=5)
            assert e.value.code() is grpc.StatusCode.NOT_FOUND


@pytest.mark.s3
def test_connect_opens_the_channels_to_peers_ahead(local_s3, s3_env, bucket, tmp_path):
    """A mount connects to the group at start: the handshakes are done before the first
    block is asked; a member that does not answer costs at most the timeout."""
    a = tmp_path / "a"
    upload(local_s3, bucket, {"c/x.bin": b"x"})
    warm(a, f"s3://{bucket}/c/")
    with peer_serve(a, "--peer-insecure") as (_, port):
        gf = group_file(tmp_path / "group.json", "me", [
            Member("holder", f"127.0.0.1:{port}", buckets=(bucket,),
                   datasets=(f"s3://{bucket}/c/",)),
            Member("gone", "127.0.0.1:1", buckets=(bucket,)), Member("me", "x:1")])
        client = PeerClient(GroupWatcher(gf), insecure=True)
        try:
            assert client.connect(timeout=2.0) == 1  # the holder; "gone" timed out
            assert ("holder", f"127.0.0.1:{port}") in client._channels
        finally:
            client.close()
        no_group = PeerClient(GroupWatcher(tmp_path / "missing.json"), insecure=True)
        assert no_group.connect(timeout=0.5) == 0


# -- bad input -------------------------------------------------------------------------------


def _one_line_exit_2(r: subprocess.CompletedProcess, *needles: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def test_peer_serve_bad_flags_and_group_files_are_one_line_exit_2(tmp_path):
    cache = tmp_path / "c"
    cache.mkdir()

    def serve(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*FUSECACHE, "peer-serve", "--cache-dir", str(cache), *args,
                               "--log-level", "error"], capture_output=True, text=True,
                              timeout=60)

    _one_line_exit_2(serve(), "--listen")
    _one_line_exit_2(serve("--listen", "nowhere", "--peer-insecure"), "--listen")
    _one_line_exit_2(serve("--listen", "127.0.0.1:0", "--peer-max-mbps", "-3"),
                     "--peer-max-mbps")
    _one_line_exit_2(serve("--listen", "127.0.0.1:0"), "group", "--peer-insecure")
    (cache / "group.json").write_text("{not json")
    _one_line_exit_2(serve("--listen", "127.0.0.1:0"), "not JSON")
    (cache / "group.json").write_text('{"self": "a", "members": [{"name": "a"}]}')
    _one_line_exit_2(serve("--listen", "127.0.0.1:0"), "endpoint")
    group_file(cache / "group.json", "a", [Member("a", "127.0.0.1:1")])
    _one_line_exit_2(serve("--listen", "127.0.0.1:0"), "tls")
    from fusecache.group import TlsFiles
    group_file(cache / "group.json", "a", [Member("a", "127.0.0.1:1")],
               TlsFiles("ca.crt", "a.crt", "a.key"))
    _one_line_exit_2(serve("--listen", "127.0.0.1:0"), "tls.ca", "ca.crt")
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        _one_line_exit_2(serve("--listen", f"127.0.0.1:{s.getsockname()[1]}",
                               "--peer-insecure"), "--listen")


def test_mount_bad_group_flags_are_one_line_exit_2(tmp_path):
    mp = tmp_path / "m"
    mp.mkdir()
    r = run_cli(["mount", "s3://bkt/x", str(mp), "--group", str(tmp_path / "nope.json")])
    _one_line_exit_2(r, "--group", "nope.json")
    (tmp_path / "bad.json").write_text('{"self": "a", "replicas": 0}')
    r = run_cli(["mount", "s3://bkt/x", str(mp), "--group", str(tmp_path / "bad.json")])
    _one_line_exit_2(r, "replicas")
    r = run_cli(["mount", "s3://bkt/x", str(mp), "--peer-timeout", "0"])
    _one_line_exit_2(r, "--peer-timeout")


def test_breaker_states_stay_bounded_as_members_come_and_go(tmp_path: Path) -> None:
    """One breaker state per member that failed; over a node's life members come and go,
    so the states are bounded (the oldest forgotten) and the newest still count."""
    from fusecache import peer_client

    client = PeerClient(GroupWatcher(tmp_path / "group.json"))
    try:
        for i in range(peer_client._MAX_STATES + 500):
            client._failed(f"node-{i}", 5.0)
        assert len(client._states) == peer_client._MAX_STATES
        assert not client._may_ask(f"node-{peer_client._MAX_STATES + 499}")  # still skipped
        assert client._may_ask("node-0")  # forgotten: asked again
    finally:
        client.close()
