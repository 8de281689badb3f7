"""A fault-injecting HTTP proxy in front of a real S3 server, driven from a test.

Who uses it: the fault tests in tests/faults/ put it between a real ``fusecache mount``
or ``prefetchd warm`` (``--endpoint-url`` pointed at the proxy) and the session's
SeaweedFS. Data flow per client request: read the request off the client's connection
(keep-alive, so many requests per connection), note it in ``requests``, look for the
first ``Rule`` that matches it (method, object key, first byte of the Range), then
either answer an error itself (``status``) or forward it unchanged on a keep-alive
connection to the server (the request's signature stays valid: the Host header is
not touched), read the whole response and send it back, spoiled as the rule says:

- ``status``: 500 InternalError, 503 SlowDown or 429 TooManyRequests with an S3 XML
  error body;
- ``trickle``: the whole correct response, its body at ``after_bytes`` bytes a second (a
  slow link that delivers all along);
- ``replay``: the response the server gave the last request for the same (key, range
  start), sent again as it was (a replaying middlebox, or a server that ignores
  ``If-Match``: an earlier version's bytes and ETag);
- ``reset``: headers and the first ``after_bytes`` bytes of the body, then a TCP RST;
- ``truncate``: the original Content-Length but ``after_bytes`` fewer body bytes, then FIN;
- ``stall``: headers, then nothing for ``seconds`` (None: until the proxy stops), then FIN;
- ``delay``: the whole correct response, ``seconds`` late;
- ``pause``: headers and the first ``after_bytes`` bytes of the body, then nothing for
  ``seconds``, then the rest (a correct response whose body stops half-way a while).

A rule applies ``times`` times (None: for ever). Counters say how many requests each
(method, key, range start) saw and how many were spoiled, which is what a test compares
with the retries the code reports. Threads: one per client connection (daemon);
``stop()`` closes the listener, releases stalls and closes every connection.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import struct
import threading
import urllib.parse
from collections import Counter
from dataclasses import dataclass, field

MAX_HEADER_BYTES = 64 * 1024
_ERRORS = {500: ("Internal Server Error", "InternalError", "We encountered an internal error."),
           503: ("Slow Down", "SlowDown", "Please reduce your request rate."),
           429: ("Too Many Requests", "TooManyRequests", "Please reduce your request rate.")}
FAULTS = ("status", "reset", "truncate", "stall", "delay", "pause", "replay", "trickle")


@dataclass
class Rule:
    """Which requests to spoil and how. ``None`` in a match field matches anything."""

    fault: str
    method: str | None = "GET"
    key: str | None = None
    range_start: int | None = None
    times: int | None = 1
    status: int = 503
    after_bytes: int = 0
    seconds: float | None = None
    hits: int = 0

    def __post_init__(self) -> None:
        if self.fault not in FAULTS:
            raise ValueError(f"unknown fault {self.fault!r}")
        if self.fault == "status" and self.status not in _ERRORS:
            raise ValueError(f"status {self.status} not supported")

    def matches(self, req: Request) -> bool:
        return ((self.method is None or req.method == self.method)
                and (self.key is None or req.key == self.key)
                and (self.range_start is None or req.range_start == self.range_start)
                and (self.times is None or self.hits < self.times))


@dataclass(frozen=True)
class Request:
    method: str
    bucket: str
    key: str
    range_start: int | None
    fault: str | None = field(default=None, compare=False)


class FaultProxy:
    """Listen on 127.0.0.1:<free port>; forward to *upstream* (host, port)."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self._rules: list[Rule] = []
        self._lock = threading.Lock()
        self.requests: list[Request] = []
        self._stopping = threading.Event()
        self._conns: set[socket.socket] = set()
        # (key, range start) -> the last forwarded response to it (replay), a few only
        self._answers: dict[tuple[str, int | None], tuple] = {}
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._accept, name="fault-proxy", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- driving -----------------------------------------------------------------

    def add(self, rule: Rule) -> Rule:
        with self._lock:
            self._rules.append(rule)
        return rule

    def clear(self) -> None:
        """Drop every rule (requests from now on pass unspoiled)."""
        with self._lock:
            self._rules.clear()

    def gets(self, key: str | None = None) -> Counter[int | None]:
        """GET requests per range start (of *key*, or of every key)."""
        with self._lock:
            return Counter(r.range_start for r in self.requests
                           if r.method == "GET" and (key is None or r.key == key))

    def spoiled(self, key: str | None = None) -> int:
        with self._lock:
            return sum(1 for r in self.requests
                       if r.fault is not None and (key is None or r.key == key))

    # -- lifecycle ---------------------------------------------------------------

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=5)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- serving -----------------------------------------------------------------

    def _accept(self) -> None:
        while not self._stopping.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self._conns.add(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True,
                             name="fault-proxy-conn").start()

    def _serve(self, client: socket.socket) -> None:
        upstream: http.client.HTTPConnection | None = None
        rfile = client.makefile("rb")
        try:
            while not self._stopping.is_set():
                head = _read_head(rfile)
                if head is None:
                    return
                method, target, headers = head
                length = int(_header(headers, "content-length") or 0)
                body = rfile.read(length) if length else b""
                req = _describe(method, target, headers)
                with self._lock:
                    rule = next((r for r in self._rules if r.matches(req)), None)
                    if rule is not None:
                        rule.hits += 1
                    self.requests.append(Request(req.method, req.bucket, req.key,
                                                 req.range_start,
                                                 rule.fault if rule else None))
                if rule is not None and rule.fault == "status":
                    _send_error(client, rule.status, req)
                    continue
                with self._lock:
                    old = self._answers.get((req.key, req.range_start))
                if rule is not None and rule.fault == "replay" and old is not None:
                    status, reason, rheaders, rbody = old
                    client.sendall(_response_head(status, reason, rheaders, len(rbody))
                                   + rbody)
                    continue
                if rule is not None and rule.fault == "delay":
                    self._stopping.wait(rule.seconds or 0)
                if upstream is None:
                    upstream = http.client.HTTPConnection(*self.upstream, timeout=60)
                status, reason, rheaders, rbody = _forward(upstream, method, target,
                                                           headers, body)
                if method == "GET" and status in (200, 206):
                    with self._lock:
                        self._answers[(req.key, req.range_start)] = (status, reason,
                                                                     rheaders, rbody)
                        while len(self._answers) > 64:
                            self._answers.pop(next(iter(self._answers)))
                if rule is None or rule.fault in ("delay", "replay"):
                    client.sendall(_response_head(status, reason, rheaders, len(rbody))
                                   + rbody)
                    continue
                # reset, truncate, stall: the headers promise the whole body
                client.sendall(_response_head(status, reason, rheaders, len(rbody)))
                if rule.fault == "reset":
                    client.sendall(rbody[:rule.after_bytes])
                    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                      struct.pack("ii", 1, 0))
                    return  # close with linger 0: RST
                if rule.fault == "truncate":
                    client.sendall(rbody[:max(0, len(rbody) - max(1, rule.after_bytes))])
                    client.shutdown(socket.SHUT_WR)
                    return
                if rule.fault == "trickle":
                    step = max(1, rule.after_bytes // 10)
                    for pos in range(0, len(rbody), step):
                        client.sendall(rbody[pos:pos + step])
                        if self._stopping.wait(0.1):
                            return
                    continue
                if rule.fault == "pause":
                    client.sendall(rbody[:rule.after_bytes])
                    self._stopping.wait(rule.seconds or 0)
                    client.sendall(rbody[rule.after_bytes:])
                    continue
                self._stopping.wait(rule.seconds)  # stall
                return
        except OSError:
            return
        finally:
            with self._lock:
                self._conns.discard(client)
            with contextlib.suppress(OSError):
                rfile.close()
                client.close()
            if upstream is not None:
                upstream.close()


def _read_head(rfile) -> tuple[str, str, list[tuple[str, str]]] | None:
    line = rfile.readline(MAX_HEADER_BYTES)
    if not line:
        return None
    method, target, _ = line.decode("latin-1").split(" ", 2)
    headers: list[tuple[str, str]] = []
    while True:
        h = rfile.readline(MAX_HEADER_BYTES)
        if h in (b"\r\n", b"\n", b""):
            break
        name, _, value = h.decode("latin-1").partition(":")
        headers.append((name.strip(), value.strip()))
    return method, target, headers


def _header(headers: list[tuple[str, str]], name: str) -> str | None:
    return next((v for k, v in headers if k.lower() == name), None)


def _describe(method: str, target: str, headers: list[tuple[str, str]]) -> Request:
    path = urllib.parse.unquote(urllib.parse.urlsplit(target).path).lstrip("/")
    bucket, _, key = path.partition("/")
    start = None
    rng = _header(headers, "range")
    if rng and rng.startswith("bytes="):
        first = rng[6:].split("-", 1)[0]
        start = int(first) if first.isdigit() else None
    return Request(method, bucket, key, start)


def _forward(conn: http.client.HTTPConnection, method: str, target: str,
             headers: list[tuple[str, str]], body: bytes):
    """Send the request as it came (one reconnect if the kept-alive connection died)."""
    for attempt in range(2):
        try:
            conn.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
            for k, v in headers:
                conn.putheader(k, v)
            conn.endheaders(body or None)
            resp = conn.getresponse()
            data = resp.read()
            return resp.status, resp.reason, resp.getheaders(), data
        except (http.client.HTTPException, OSError):
            conn.close()
            if attempt:
                raise
    raise AssertionError("unreachable")


def _response_head(status: int, reason: str, headers: list[tuple[str, str]],
                   body_len: int) -> bytes:
    lines = [f"HTTP/1.1 {status} {reason}"]
    has_length = False
    for k, v in headers:
        low = k.lower()
        if low in ("transfer-encoding", "connection", "keep-alive"):
            continue
        if low == "content-length":
            has_length = True
        lines.append(f"{k}: {v}")
    if not has_length:
        lines.append(f"Content-Length: {body_len}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _send_error(client: socket.socket, status: int, req: Request) -> None:
    reason, code, message = _ERRORS[status]
    body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
            f"<Message>{message}</Message><Resource>/{req.bucket}/{req.key}</Resource>"
            "<RequestId>fault-proxy</RequestId></Error>").encode()
    head = (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/xml\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    client.sendall(head + body if req.method != "HEAD" else head)
