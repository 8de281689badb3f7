"""The block lane (fusecache/peer_lane.py): single blocks over HTTP/1.1 with the group's
mutual TLS, beside the peer server's gRPC.

Node A's cache is served by a real ``fusecache peer-serve --lane-listen`` process; node B
reads through a real ``fusecache mount`` (or its PeerClient) whose group file names A's lane.
"""

from __future__ import annotations

import http.client
import os
import socket
import ssl
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from fusecache.blockmem import block_buffer
from fusecache.group import GroupFileError, GroupWatcher, Member, parse_group
from fusecache.metrics import Metrics
from fusecache.nodecache import NodeCache
from fusecache.peer_client import PeerClient
from fusecache.peer_lane import LaneConnection, LaneDown, LaneStatus, client_context

from mounting import mounted
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
LANE = ("--lane-listen", "127.0.0.1:0")


def _metric(port: int, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
    for line in text.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


@pytest.mark.fuse
@pytest.mark.s3
def test_a_mount_reads_a_peers_blocks_over_the_lane_with_no_s3_get(
        local_s3, s3_env, bucket, tmp_path):
    """The user's path: a dataset warmed on A, read on B through a mount whose group file
    names A's lane; every large block comes over the lane, byte-exact, no S3 GET."""
    files = {"d/big.bin": os.urandom(3 * BS + 4321), "d/mid.bin": os.urandom(5 * MiB)}
    upload(local_s3, bucket, files)
    a, b = tmp_path / "a", tmp_path / "b"
    warm(a, f"s3://{bucket}/d/")
    pki = Pki(tmp_path / "pki")
    ta, tb = pki.node("node-a"), pki.node("node-b")
    group_file(a / "group.json", "node-a", [Member("node-a", "127.0.0.1:1", buckets=(bucket,)),
                                            Member("node-b", "127.0.0.1:1", buckets=(bucket,))],
               ta)
    server_metrics = free_port()
    with peer_serve(a, *LANE, "--metrics-port", str(server_metrics)) as (proc, port):
        b.mkdir()
        group_file(b / "group.json", "node-b", [
            Member("node-a", f"127.0.0.1:{port}", buckets=(bucket,),
                   datasets=(f"s3://{bucket}/d/",), lane=f"127.0.0.1:{proc.lane_port}"),
            Member("node-b", "127.0.0.1:1", buckets=(bucket,))], tb)
        with mounted(f"s3://{bucket}/d", tmp_path / "mb", s3_env, "--cache-dir", str(b),
                     "--peer-timeout", "5") as mp:
            seen = {f"d/{p.name}": p.read_bytes() for p in sorted(mp.iterdir())}
        assert seen == files
        blocks = sum((len(v) + BS - 1) // BS for v in files.values())
        st = wait_for(lambda: (s := node_stats(b))["peer_hits"] >= blocks and s,
                      "node B's peer hits")
        assert st["s3_gets"] == 0 and st["peer_bytes"] == sum(map(len, files.values()))
        assert _metric(server_metrics, "fusecache_peer_lane_requests_served_total") >= 4


@pytest.mark.s3
def test_the_lane_refuses_what_grpc_refuses_and_a_client_checks_the_server(
        local_s3, s3_env, bucket, tmp_path):
    """No certificate, another CA's, a CA-signed non-member, a member without the bucket:
    refused; a client asking a server that is not the member it meant refuses it."""
    data = os.urandom(MiB)
    upload(local_s3, bucket, {"p/x.bin": data})
    oid = oid_of(local_s3, bucket, "p/x.bin")
    a = tmp_path / "a"
    warm(a, f"s3://{bucket}/p/")
    pki, rogue = Pki(tmp_path / "pki"), Pki(tmp_path / "rogue", "rogue")
    ta, tb, tc, tz = (pki.node(n) for n in ("node-a", "node-b", "node-c", "node-z"))
    rb = rogue.node("node-b")  # the right name, the wrong CA
    group_file(a / "group.json", "node-a", [
        Member("node-a", "127.0.0.1:1", buckets=(bucket,)),
        Member("node-b", "127.0.0.1:1", buckets=(bucket,)),
        Member("node-c", "127.0.0.1:1", buckets=("some-other-bucket",))], ta)
    bs = NodeCache.open(a).block_size
    fields = {"bucket": bucket, "key": oid.key, "etag": oid.etag, "size": oid.size,
              "block_size": bs, "index": 0}

    def ctx(t, ca=None) -> ssl.SSLContext:
        return client_context(Path(ca or t.ca).read_bytes(), t.cert, t.key)

    def ask(port: int, context: ssl.SSLContext | None, server: str = "node-a") -> bytes:
        conn = LaneConnection(f"127.0.0.1:{port}", server, context)
        try:
            got, crc, key = conn.get(fields, len(data), 10.0, None, block_buffer)
            return bytes(got)
        finally:
            conn.close()

    with peer_serve(a, *LANE) as (proc, _):
        lane = proc.lane_port
        assert ask(lane, ctx(tb)) == data
        no_cert = ssl.create_default_context(cadata=Path(pki.ca).read_text())
        for bad in (no_cert, ctx(rb, pki.ca), None):  # None: plaintext to a TLS port
            with pytest.raises((LaneDown, OSError, http.client.HTTPException)):
                ask(lane, bad)
        with pytest.raises(LaneDown):  # the server's certificate is not node-c's
            ask(lane, ctx(tb), server="node-c")
        for who in (tc, tz):  # a member without the bucket; a CA-signed non-member
            with pytest.raises(LaneStatus) as e:
                ask(lane, ctx(who))
            assert e.value.status == 403
        missing = dict(fields, key="p/none", etag="e", size=5)
        conn = LaneConnection(f"127.0.0.1:{lane}", "node-a", ctx(tb))
        try:
            with pytest.raises(LaneStatus) as e:
                conn.get(missing, 5, 10.0, None, block_buffer)
            assert e.value.status == 404
            with pytest.raises(LaneStatus) as e:
                conn.get(dict(fields, index="x"), 5, 10.0, None, block_buffer)
            assert e.value.status == 400
            # the same connection still serves after refusals (kept alive)
            assert bytes(conn.get(fields, len(data), 10.0, None, block_buffer)[0]) == data
        finally:
            conn.close()
        # node C's PeerClient is refused over the lane: None (its reader goes to S3)
        gf = group_file(tmp_path / "c-group.json", "node-c", [
            Member("node-a", "127.0.0.1:1", buckets=(bucket,), lane=f"127.0.0.1:{lane}"),
            Member("node-c", "127.0.0.1:1", buckets=("some-other-bucket",))], tc)
        metrics = Metrics()
        client = PeerClient(GroupWatcher(gf), metrics=metrics)
        try:
            assert client.fetch(oid, 0, bs, budget=10) is None
        finally:
            client.close()
        assert metrics.peer_requests.labels("node-a", "denied")._value.get() == 1


@pytest.mark.s3
def test_an_unreachable_lane_falls_back_to_grpc_and_a_silent_one_costs_the_budget(
        local_s3, s3_env, bucket, tmp_path):
    """A lane that refuses connections: the same try asks over gRPC (the block comes);
    a lane that accepts and never answers: the fetch ends within its budget."""
    data = os.urandom(2 * MiB)
    upload(local_s3, bucket, {"f/x.bin": data})
    oid = oid_of(local_s3, bucket, "f/x.bin")
    a = tmp_path / "a"
    warm(a, f"s3://{bucket}/f/")
    bs = NodeCache.open(a).block_size
    with peer_serve(a, "--peer-insecure") as (_, port):
        closed = free_port()
        gf = group_file(tmp_path / "g1.json", "me", [
            Member("a", f"127.0.0.1:{port}", buckets=(bucket,), lane=f"127.0.0.1:{closed}"),
            Member("me", "x:1")])
        client = PeerClient(GroupWatcher(gf), insecure=True)
        try:
            assert bytes(client.fetch(oid, 0, bs, budget=10)) == data
            assert "a" in client._lane_off  # asked over gRPC for a while now
        finally:
            client.close()
    with socket.socket() as silent:  # accepts, reads nothing, answers nothing
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        gf = group_file(tmp_path / "g2.json", "me", [
            Member("a", "127.0.0.1:1", buckets=(bucket,),
                   lane=f"127.0.0.1:{silent.getsockname()[1]}"),
            Member("me", "x:1")])
        client = PeerClient(GroupWatcher(gf), insecure=True)
        try:
            t0 = time.monotonic()
            assert client.fetch(oid, 0, bs, budget=1.0) is None
            assert time.monotonic() - t0 < 4.0
        finally:
            client.close()


def test_a_lane_that_sends_too_few_bytes_is_an_error_not_a_short_block(tmp_path):
    """A server that promises a block and closes early: no partial block is returned."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def serve() -> None:
        c, _ = srv.accept()
        with c:
            c.recv(65536)
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nX-Fusecache-Crc32: 1\r\n"
                      b"X-Fusecache-Block-Key: 00\r\n\r\n" + b"x" * 40)
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    conn = LaneConnection(f"127.0.0.1:{srv.getsockname()[1]}", "a", None)
    try:
        with pytest.raises((http.client.HTTPException, OSError)):
            conn.get({"bucket": "b"}, 100, 5.0, None, block_buffer)
    finally:
        conn.close()
        srv.close()
        t.join(5)


def test_a_bad_lane_in_the_group_file_and_lane_listen_are_named(tmp_path):
    with pytest.raises(GroupFileError, match=r"members\[0\].lane must be host:port"):
        parse_group({"self": "a", "members": [{"name": "a", "endpoint": "h:1",
                                                "lane": "nowhere"}]})
    cache = tmp_path / "c"
    cache.mkdir()
    r = subprocess.run([*FUSECACHE, "peer-serve", "--cache-dir", str(cache), "--listen",
                        "127.0.0.1:0", "--peer-insecure", "--lane-listen", "nowhere",
                        "--log-level", "error"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "invalid --lane-listen 'nowhere'" in lines[0], r.stderr


def test_a_lane_past_its_connections_closes_at_once_and_the_client_counts_it_busy(tmp_path):
    """Connections past the server's bound are closed unanswered, not queued; the asking
    client takes that as a busy peer (a short cooldown), not a dead one."""
    from fusecache.nodecache import ObjectId
    from fusecache.peer_lane import LaneServer

    data = os.urandom(1000)
    srv = LaneServer(("127.0.0.1", 0), lambda names, fields, budget: (data, 1, b"k"),
                     lambda: None, 1)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    fields = {"bucket": "b", "key": "k", "etag": "e", "size": 1000, "block_size": BS,
              "index": 0}
    first = LaneConnection(f"127.0.0.1:{srv.port}", "a", None)
    try:
        assert bytes(first.get(fields, 1000, 5.0, None, block_buffer)[0]) == data
        second = LaneConnection(f"127.0.0.1:{srv.port}", "a", None)
        with pytest.raises(http.client.RemoteDisconnected):
            second.get(fields, 1000, 5.0, None, block_buffer)  # the one connection is held
        gf = group_file(tmp_path / "g.json", "me", [
            Member("a", "127.0.0.1:1", buckets=("b",), lane=f"127.0.0.1:{srv.port}"),
            Member("me", "x:1")])
        metrics = Metrics()
        client = PeerClient(GroupWatcher(gf), insecure=True, metrics=metrics)
        try:
            assert client.fetch(ObjectId("b", "k", "e", 1000), 0, BS, budget=5) is None
        finally:
            client.close()
        assert metrics.peer_requests.labels("a", "busy")._value.get() == 1
    finally:
        first.close()
        srv.shutdown()
        srv.server_close()
