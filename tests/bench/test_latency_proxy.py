"""The benchmark's latency proxy over real sockets: exact bytes, delay line, HTTP, closes, CLI."""

from __future__ import annotations

import hashlib
import os
import random
import secrets
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.training.latency_proxy import THREAD_PREFIX, LatencyProxy  # noqa: E402
from fusecache.locals3 import LocalS3  # noqa: E402

SCRIPT = ROOT / "bench" / "training" / "latency_proxy.py"
MiB = 1024 * 1024


def proxy_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(THREAD_PREFIX)]


def wait_for(cond: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        data = sock.recv(n - len(buf))
        assert data, f"EOF after {len(buf)} of {n} bytes"
        buf += data
    return buf


def recv_all(sock: socket.socket) -> bytes:
    chunks = []
    while data := sock.recv(1 << 20):
        chunks.append(data)
    return b"".join(chunks)


class Upstream:
    """A loopback TCP server that runs *handler* on each connection in a thread of its own."""

    def __init__(self, handler: Callable[[socket.socket], None]) -> None:
        self.handler = handler
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.errors: list[BaseException] = []
        self.threads: list[threading.Thread] = []
        self.accepter = threading.Thread(target=self._accept, daemon=True)
        self.accepter.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self.threads.append(t)
            t.start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            with conn:
                self.handler(conn)
        except BaseException as e:  # reported by close()
            self.errors.append(e)

    def close(self) -> None:
        self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self.accepter.join(5)
        for t in self.threads:
            t.join(10)
            assert not t.is_alive(), "upstream handler still running"
        if self.errors:
            raise self.errors[0]


@pytest.fixture()
def upstream() -> Iterator[Callable[[Callable[[socket.socket], None]], Upstream]]:
    servers: list[Upstream] = []

    def make(handler: Callable[[socket.socket], None]) -> Upstream:
        servers.append(Upstream(handler))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


@pytest.fixture()
def proxies() -> Iterator[Callable[[int, float], LatencyProxy]]:
    """Started proxies, stopped afterwards with a check that no thread of theirs is left."""
    started: list[LatencyProxy] = []

    def make(upstream_port: int, delay_ms: float) -> LatencyProxy:
        started.append(LatencyProxy("127.0.0.1", 0, "127.0.0.1", upstream_port, delay_ms).start())
        return started[-1]

    yield make
    for p in started:
        p.stop()
    assert wait_for(lambda: not proxy_threads(), 5), proxy_threads()


def connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def test_bytes_exact_both_ways_full_duplex(upstream, proxies) -> None:
    request = secrets.token_bytes(5 * MiB)
    response = random.Random(7).randbytes(64 * MiB)
    seen: dict[str, str] = {}

    def handler(conn: socket.socket) -> None:
        # Answer while the request is still coming in: both directions at once.
        sender = threading.Thread(target=conn.sendall, args=(response,))
        sender.start()
        h = hashlib.sha256()
        while data := conn.recv(1 << 20):
            h.update(data)
        seen["request"] = h.hexdigest()
        sender.join()
        conn.shutdown(socket.SHUT_WR)

    up = upstream(handler)
    proxy = proxies(up.port, 5)
    with connect(proxy.port) as c:

        def send() -> None:
            c.sendall(request)
            c.shutdown(socket.SHUT_WR)

        sender = threading.Thread(target=send)
        sender.start()
        got = hashlib.sha256()
        n = 0
        while data := c.recv(1 << 20):
            got.update(data)
            n += len(data)
        sender.join()
    assert n == len(response)
    assert got.hexdigest() == hashlib.sha256(response).hexdigest()
    assert wait_for(lambda: "request" in seen)
    assert seen["request"] == hashlib.sha256(request).hexdigest()
    assert wait_for(lambda: proxy.connections == 0)


def test_first_byte_is_delayed(upstream, proxies) -> None:
    def handler(conn: socket.socket) -> None:
        while data := conn.recv(4096):
            conn.sendall(data)

    proxy = proxies(upstream(handler).port, 150)
    with connect(proxy.port) as c:
        for _ in range(2):  # on a fresh connection, then on one already in use
            t0 = time.monotonic()
            c.sendall(b"ping")
            first = c.recv(1)
            elapsed = time.monotonic() - t0
            assert first == b"p"
            assert 0.150 <= elapsed < 0.150 + 2.0, elapsed
            assert recv_exact(c, 3) == b"ing"


def test_delay_line_not_stop_and_wait(upstream, proxies) -> None:
    n, gap, delay = 10, 0.020, 0.200
    record = struct.Struct("!I")
    arrivals: list[tuple[int, float]] = []

    def handler(conn: socket.socket) -> None:
        buf = b""
        while data := conn.recv(4096):
            now = time.monotonic()
            buf += data
            while len(buf) >= record.size:
                (i,) = record.unpack(buf[: record.size])
                arrivals.append((i, now))
                buf = buf[record.size :]

    proxy = proxies(upstream(handler).port, delay * 1000)
    sent: list[float] = []
    with connect(proxy.port) as c:
        t0 = time.monotonic()
        for i in range(n):
            time.sleep(max(0.0, t0 + i * gap - time.monotonic()))
            sent.append(time.monotonic())
            c.sendall(record.pack(i))
        c.shutdown(socket.SHUT_WR)
        assert recv_all(c) == b""
    assert wait_for(lambda: len(arrivals) == n)
    assert [i for i, _ in arrivals] == list(range(n))
    for (i, arrived), t_sent in zip(arrivals, sent, strict=True):
        assert arrived - t_sent >= delay, f"chunk {i} arrived early"
    # A delay line keeps the chunks' spacing (gap); in series (stop-and-wait) each chunk
    # waits for the one before it, so they arrive at least one delay apart. Compared
    # with the spacing they were sent with, not with a wall-clock bound: a loaded
    # machine slows both alike.
    spacing = sorted(b - a for (_, a), (_, b) in zip(arrivals, arrivals[1:], strict=False))
    sent_spacing = sorted(b - a for a, b in zip(sent, sent[1:], strict=False))
    median, sent_median = spacing[len(spacing) // 2], sent_spacing[len(sent_spacing) // 2]
    assert median < max(delay / 2, 2 * sent_median), (spacing, sent_spacing)


@pytest.mark.s3
def test_http_keepalive_through_proxy(local_s3: LocalS3, bucket: str, proxies) -> None:
    import boto3
    from botocore.config import Config

    body = secrets.token_bytes(3 * MiB + 17)
    local_s3.client().put_object(Bucket=bucket, Key="obj", Body=body)
    proxy = proxies(local_s3.s3_port, 10)
    client = boto3.client(
        "s3",
        endpoint_url=f"http://127.0.0.1:{proxy.port}",
        aws_access_key_id=local_s3.access_key,
        aws_secret_access_key=local_s3.secret_key,
        region_name="us-east-1",
        config=Config(retries={"max_attempts": 1}),
    )
    for i in range(20):  # whole objects and ranges, alternately
        extra = {"Range": "bytes=1000-1999"} if i % 2 else {}
        stream = client.get_object(Bucket=bucket, Key="obj", **extra)["Body"]
        assert stream.read() == (body[1000:2000] if i % 2 else body)
        stream.close()
    assert proxy.accepted == 1  # all 20 requests on one kept-alive connection
    del stream  # it holds the socket (even after close()) until it is garbage
    client.close()
    assert wait_for(lambda: proxy.connections == 0)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def rst_close(sock: socket.socket) -> None:
    """Close with a reset (SO_LINGER 0) instead of a FIN."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def test_half_close_reset_and_stop(upstream, proxies) -> None:
    got_eof = threading.Event()

    def handler(conn: socket.socket) -> None:
        try:
            data = recv_all(conn)  # until the client's (delayed) FIN
            got_eof.set()
            conn.sendall(b"got " + data)
        except OSError:
            pass  # the connections this test resets or drops

    def resetter(conn: socket.socket) -> None:
        conn.recv(16)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    def streamer(conn: socket.socket) -> None:
        block = b"z" * MiB
        try:
            for _ in range(1024):
                conn.sendall(block)
        except OSError:
            pass  # the client went away: expected
        else:
            raise AssertionError("the reset never reached the upstream")

    dead = socket.create_server(("127.0.0.1", 0))
    dead_port = dead.getsockname()[1]
    dead.close()
    proxy = proxies(upstream(handler).port, 20)
    proxy2 = proxies(upstream(resetter).port, 5)
    proxy3 = proxies(dead_port, 5)
    proxy4 = proxies(upstream(streamer).port, 5)
    baseline = open_fds()

    # Half close: the client stops sending but still reads the answer.
    with connect(proxy.port) as c:
        c.sendall(b"hello")
        c.shutdown(socket.SHUT_WR)
        assert got_eof.wait(5)
        assert recv_all(c) == b"got hello"
    assert wait_for(lambda: proxy.connections == 0), proxy.connections

    # Client reset in the middle of a request.
    c = connect(proxy.port)
    c.sendall(b"partial")
    assert wait_for(lambda: proxy.connections == 1)
    rst_close(c)
    assert wait_for(lambda: proxy.connections == 0), proxy.connections

    # Client reset in the middle of a streamed response (the splice direction).
    c = connect(proxy4.port)
    assert len(recv_exact(c, MiB)) == MiB
    rst_close(c)
    assert wait_for(lambda: proxy4.connections == 0), proxy4.connections

    # Upstream reset while the client waits for an answer.
    with connect(proxy2.port) as c:
        c.sendall(b"x")
        try:
            assert recv_all(c) == b""
        except ConnectionResetError:
            pass
    assert wait_for(lambda: proxy2.connections == 0), proxy2.connections

    # Upstream not listening: the client is dropped.
    with connect(proxy3.port) as c:
        try:
            assert recv_all(c) == b""
        except ConnectionResetError:
            pass
    assert wait_for(lambda: proxy3.connections == 0), proxy3.connections

    # No fd left behind by any of it (the upstreams' handler sockets close a bit later).
    assert wait_for(lambda: open_fds() == baseline), (open_fds(), baseline)
    assert all(name.endswith("-accept") for name in proxy_threads()), proxy_threads()

    # stop() with live idle connections closes them and joins every thread.
    idle = [connect(proxy.port) for _ in range(3)]
    assert wait_for(lambda: proxy.connections == 3)
    try:
        for p in (proxy, proxy2, proxy3, proxy4):
            p.stop()
        assert proxy_threads() == []
        for c in idle:
            c.settimeout(5)
            try:
                assert c.recv(1) == b""
            except ConnectionResetError:
                pass
    finally:
        for c in idle:
            c.close()


def test_cli(upstream) -> None:
    def handler(conn: socket.socket) -> None:
        while data := conn.recv(4096):
            conn.sendall(data.upper())

    up = upstream(handler)
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), "--listen", "127.0.0.1:0",
         "--upstream", f"127.0.0.1:{up.port}", "--delay-ms", "30"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        assert line.startswith("listening 127.0.0.1:"), line
        port = int(line.rsplit(":", 1)[1])
        with connect(port) as c:
            t0 = time.monotonic()
            c.sendall(b"abc")
            c.shutdown(socket.SHUT_WR)
            assert recv_all(c) == b"ABC"
            assert time.monotonic() - t0 >= 0.030
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=5) == 0
        assert proc.stdout.read() == ""  # type: ignore[union-attr]  # exactly one line
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()  # type: ignore[union-attr]
        proc.stderr.close()  # type: ignore[union-attr]

    bad = subprocess.run(
        [sys.executable, str(SCRIPT), "--listen", "nonsense",
         "--upstream", "127.0.0.1:1", "--delay-ms", "5"],
        cwd=ROOT, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert bad.returncode == 2
    assert "nonsense" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert bad.stdout == ""
