"""A TCP proxy that adds a fixed one-way delay to requests, to emulate S3 in another zone.

Why it exists: the benchmark's S3 server sits behind a tbf-shaped veth link (bandwidth),
but this machine's ``tc`` has no netem, so first-byte latency has to come from userspace.
Every chunk read from the client is forwarded upstream no earlier than its read time plus
``delay_ms`` (a delay line: chunks keep their order and each gets its own deadline, so a
burst is not serialised into one delay per chunk). The client's FIN travels the same line.
Responses (upstream -> client, the bulk bytes) pass straight through with ``os.splice``,
so the proxy models time to first byte (delay + server time) without limiting throughput.

Run as its own process::

    python bench/training/latency_proxy.py --listen 127.0.0.1:0 --upstream 10.0.0.2:8333 \\
        --delay-ms 20

which prints ``listening HOST:PORT`` once bound and serves until SIGTERM or SIGINT.
Only the standard library is used, so the file also works outside the package.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import math
import os
import queue
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from types import TracebackType

# Request chunks are read with this size; with the queue bound below, one connection holds
# at most QUEUE_CHUNKS * READ_SIZE (32 MiB) of delayed request bytes, and a full queue stops
# reading from the client (back-pressure through TCP).
READ_SIZE = 128 * 1024
QUEUE_CHUNKS = 256
PIPE_SIZE = 1024 * 1024  # asked for; the kernel may cap it (fs.pipe-max-size)
CONNECT_TIMEOUT = 10.0
THREAD_PREFIX = "latency-proxy"

# Errors that mean "splice does not work here" (as opposed to a broken connection).
_SPLICE_UNSUPPORTED = {errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP}

_EOF = b""  # queued after the last request chunk: shut upstream's write side


class _Connection:
    """One proxied connection: a reader, a delayed sender and a splice thread."""

    def __init__(self, proxy: LatencyProxy, client: socket.socket, num: int) -> None:
        self.proxy = proxy
        self.client = client
        self.upstream: socket.socket | None = None
        self.name = f"{THREAD_PREFIX}-{proxy.port}-{num}"
        self.queue: queue.Queue[tuple[float, bytes]] = queue.Queue(maxsize=QUEUE_CHUNKS)
        self.dead = threading.Event()  # aborted: drop pending data, wake every thread
        self.lock = threading.Lock()
        self.running = 0  # threads still running; the last one closes the sockets
        self.closed = False
        self.threads: list[threading.Thread] = []

    def start(self) -> None:
        # Hold a reference while spawning, so a reader that fails at once cannot close the
        # connection before the sender exists.
        with self.lock:
            self.running += 1
        self._spawn(self._read_client, "c2u-read")
        self._spawn(self._send_upstream, "c2u-send")
        self._release()

    def _spawn(self, target: Callable[[], None], role: str) -> None:
        t = threading.Thread(
            target=self._run, args=(target,), name=f"{self.name}-{role}", daemon=True
        )
        with self.lock:
            self.running += 1
            self.threads.append(t)
        t.start()

    def _run(self, target: Callable[[], None]) -> None:
        try:
            target()
        except OSError:
            self.abort()
        except Exception:
            self.abort()
            raise
        finally:
            self._release()

    def _release(self) -> None:
        with self.lock:
            self.running -= 1
            last = self.running == 0
        if last:
            self._close()

    def abort(self) -> None:
        """Drop the connection: wakes blocked recv/send/splice calls in every thread."""
        self.dead.set()
        with contextlib.suppress(queue.Full):
            self.queue.put_nowait((0.0, _EOF))  # wakes the sender if it waits for data
        with self.lock:
            if self.closed:
                return
            for s in (self.client, self.upstream):
                if s is not None:
                    with contextlib.suppress(OSError):
                        s.shutdown(socket.SHUT_RDWR)

    def _close(self) -> None:
        with self.lock:
            self.closed = True
            for s in (self.client, self.upstream):
                if s is not None:
                    with contextlib.suppress(OSError):
                        s.close()
        self.proxy._forget(self)

    # client -> upstream -------------------------------------------------------------------

    def _read_client(self) -> None:
        delay = self.proxy.delay_s
        while not self.dead.is_set():
            try:
                data = self.client.recv(READ_SIZE)
            except OSError:
                self.abort()
                return
            self._put((time.monotonic() + delay, data))
            if not data:
                return

    def _put(self, item: tuple[float, bytes]) -> None:
        while not self.dead.is_set():
            try:
                self.queue.put(item, timeout=0.2)
                return
            except queue.Full:
                continue

    def _send_upstream(self) -> None:
        try:
            up = socket.create_connection(
                (self.proxy.upstream_host, self.proxy.upstream_port), timeout=CONNECT_TIMEOUT
            )
        except OSError:
            self.abort()
            return
        up.settimeout(None)
        up.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.lock:
            if self.closed or self.dead.is_set():
                up.close()
                return
            self.upstream = up
        self._spawn(self._splice_to_client, "u2c")
        while True:
            deadline, data = self.queue.get()
            # Loop: a timed wait may wake a hair early, and no chunk may leave early.
            while (wait := deadline - time.monotonic()) > 0:
                if self.dead.wait(wait):
                    return
            if self.dead.is_set():
                return
            if not data:
                up.shutdown(socket.SHUT_WR)
                return
            up.sendall(data)  # an OSError aborts the connection (see _run)

    # upstream -> client -------------------------------------------------------------------

    def _splice_to_client(self) -> None:
        assert self.upstream is not None
        src, dst = self.upstream, self.client
        if not self._splice(src.fileno(), dst.fileno()):
            buf = bytearray(READ_SIZE)
            view = memoryview(buf)
            while (n := src.recv_into(buf)) > 0:
                dst.sendall(view[:n])
        dst.shutdown(socket.SHUT_WR)

    @staticmethod
    def _splice(src: int, dst: int) -> bool:
        """Move bytes src -> pipe -> dst until EOF; False if splice is unsupported."""
        splice = getattr(os, "splice", None)
        if splice is None:
            return False
        r, w = os.pipe()
        try:
            size = 64 * 1024  # Linux's default pipe size
            try:
                import fcntl

                with contextlib.suppress(OSError):  # EPERM above fs.pipe-max-size
                    fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
                size = fcntl.fcntl(w, fcntl.F_GETPIPE_SZ)
            except (OSError, ImportError, AttributeError):
                pass
            first = True
            while True:
                try:
                    n = splice(src, w, size)
                except OSError as e:
                    if first and e.errno in _SPLICE_UNSUPPORTED:
                        return False
                    raise
                first = False
                if n == 0:
                    return True
                while n:
                    moved = splice(r, dst, n)
                    if moved <= 0:
                        raise OSError(errno.EPIPE, "splice to the client moved no bytes")
                    n -= moved
        finally:
            os.close(r)
            os.close(w)


class LatencyProxy:
    """Forward TCP connections to an upstream, delaying the client -> upstream bytes."""

    def __init__(
        self,
        listen_host: str,
        listen_port: int,
        upstream_host: str,
        upstream_port: int,
        delay_ms: float,
    ) -> None:
        if not (isinstance(delay_ms, int | float) and math.isfinite(delay_ms) and delay_ms >= 0):
            raise ValueError(f"delay_ms must be a finite number >= 0, got {delay_ms!r}")
        if not 0 <= listen_port <= 65535:
            raise ValueError(f"listen port out of range: {listen_port}")
        if not 1 <= upstream_port <= 65535:
            raise ValueError(f"upstream port out of range: {upstream_port}")
        self.listen_host = listen_host
        self.listen_port = listen_port
        self.upstream_host = upstream_host
        self.upstream_port = upstream_port
        self.delay_ms = delay_ms
        self.delay_s = delay_ms / 1000.0
        self._listener: socket.socket | None = None
        self._accept_thread: threading.Thread | None = None
        self._conns: set[_Connection] = set()
        self._lock = threading.Lock()
        self._stopping = False
        self._accepted = 0

    @property
    def port(self) -> int:
        """The bound port (known once start() has returned)."""
        if self._listener is None:
            raise RuntimeError("proxy not started")
        return self._listener.getsockname()[1]

    @property
    def host(self) -> str:
        if self._listener is None:
            raise RuntimeError("proxy not started")
        return self._listener.getsockname()[0]

    @property
    def connections(self) -> int:
        """Number of live proxied connections."""
        with self._lock:
            return len(self._conns)

    @property
    def accepted(self) -> int:
        """Number of connections accepted since start()."""
        with self._lock:
            return self._accepted

    def start(self) -> LatencyProxy:
        if self._listener is not None:
            raise RuntimeError("proxy already started")
        self._listener = socket.create_server((self.listen_host, self.listen_port), backlog=128)
        self._accept_thread = threading.Thread(
            target=self._accept_loop, name=f"{THREAD_PREFIX}-{self.port}-accept", daemon=True
        )
        self._accept_thread.start()
        return self

    def _accept_loop(self) -> None:
        assert self._listener is not None
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError as e:
                if self._stopping:
                    return
                if e.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    time.sleep(0.1)  # out of fds/memory: retry rather than spin or die
                continue
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                if self._stopping:
                    client.close()
                    return
                self._accepted += 1
                conn = _Connection(self, client, self._accepted)
                self._conns.add(conn)
            conn.start()

    def _forget(self, conn: _Connection) -> None:
        with self._lock:
            self._conns.discard(conn)

    def stop(self, timeout: float = 5.0) -> None:
        """Close the listener and every live connection; join the threads."""
        if self._listener is None:
            return
        with self._lock:
            self._stopping = True
            conns = list(self._conns)
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes accept() on Linux
        if self._accept_thread is not None:
            self._accept_thread.join(timeout)
        self._listener.close()
        for conn in conns:
            conn.abort()
        # A sender may still be starting its splice thread: join until none is left alive.
        deadline = time.monotonic() + timeout
        for conn in conns:
            while time.monotonic() < deadline:
                alive = [t for t in list(conn.threads) if t.is_alive()]
                if not alive:
                    break
                alive[0].join(max(0.0, deadline - time.monotonic()))

    def __enter__(self) -> LatencyProxy:
        return self if self._listener is not None else self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


# command line ---------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        """One line on stderr, exit 2 (argparse's default adds the usage block)."""
        self.exit(2, f"{self.prog}: error: {message}\n")


def _host_port(min_port: int):
    def parse(text: str) -> tuple[str, int]:
        host, sep, port_s = text.rpartition(":")
        host = host.removeprefix("[").removesuffix("]")
        if not sep or not host or not port_s.isdigit():
            raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
        port = int(port_s)
        if not min_port <= port <= 65535:
            raise argparse.ArgumentTypeError(f"port out of range ({min_port}..65535) in {text!r}")
        return host, port

    return parse


def _delay(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected milliseconds, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"delay must be >= 0 ms, got {text!r}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = _Parser(
        prog="latency_proxy", description="TCP proxy that delays client -> upstream bytes."
    )
    parser.add_argument(
        "--listen",
        required=True,
        type=_host_port(0),
        metavar="HOST:PORT",
        help="address to listen on (port 0: pick a free one)",
    )
    parser.add_argument(
        "--upstream",
        required=True,
        type=_host_port(1),
        metavar="HOST:PORT",
        help="address to forward connections to",
    )
    parser.add_argument(
        "--delay-ms",
        required=True,
        type=_delay,
        metavar="MS",
        help="one-way delay added to client -> upstream bytes",
    )
    args = parser.parse_args(argv)

    # Block the stop signals before any thread starts (threads inherit the mask), then
    # wait for one synchronously in the main thread.
    stop_signals = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
    try:
        proxy = LatencyProxy(*args.listen, *args.upstream, args.delay_ms).start()
    except OSError as e:
        print(
            f"latency_proxy: error: cannot listen on {args.listen[0]}:{args.listen[1]}: {e}",
            file=sys.stderr,
        )
        return 1
    host = proxy.host
    shown = f"[{host}]" if ":" in host else host
    print(f"listening {shown}:{proxy.port}", flush=True)
    try:
        signal.sigwait(stop_signals)
    finally:
        proxy.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
