"""The peer server: this node's cache serves its blocks to the other nodes of the cache group.

Who calls it: ``fusecache peer-serve`` (fusecache/cli.py) and the prefetchd node agent,
which embeds :class:`PeerServer` (``start()`` / ``stop()`` from any thread). Its callers
are other nodes' ``peer_client.PeerClient`` (mounts and warms).

Data flow of one ``GetBlock(bucket, key, etag, size, block_size, index)`` (``ReadBlock``
goes the same way and sends the answer in chunks of ``STREAM_CHUNK``; ``GetBlocks``,
several blocks in one call, too: one slot and one booking of the bandwidth share for the
whole call, an empty answer instead of NOT_FOUND for a block not cached)::

    TLS handshake (client certificate signed by the group's CA)
      -> caller = the member whose name is the certificate's SAN/CN; PERMISSION_DENIED
         unless it is a member and the bucket is in its ``buckets``
      -> a concurrency slot (RESOURCE_EXHAUSTED when all are taken, at once)
      -> NodeCache.get_block (read-only, the same LMDB the mounts use; the cache
         verifies length and crc32): NOT_FOUND when absent, never a trip to S3
      -> the bandwidth share (token bucket): RESOURCE_EXHAUSTED when the block could
         not go out before the caller's deadline
      -> data, its crc32 and the cache's block key

With a lane address (``lane_listen``) the same single-block answer is also served over
HTTP/1.1 by ``peer_lane.LaneServer`` (``_answer_lane``: same checks, slot and share).

Security: with ``tls`` in the group file the server requires a client certificate
(mutual TLS); only ``--peer-insecure`` (tests, development) serves without it, and
then anyone who can reach the port can read any cached block. The group file is
re-read when it changes (members, buckets); certificate files are re-read at the
next handshake after they change (cert-manager renewals). Counters go to the node
cache's shared totals (``fusecache stats``) and to Prometheus.
"""

from __future__ import annotations

import ctypes
import logging
import os
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import grpc

from fusecache import errors
from fusecache._proto import peer_pb2
from fusecache.group import GROUP_FILE, Group, GroupFileError, GroupWatcher, TlsFiles, load_group
from fusecache.metrics import Metrics
from fusecache.nodecache import NodeCache, ObjectId, block_key
from fusecache.peer_lane import LaneServer, Refusal, server_context
from fusecache.peer_wire import encode_batch, encode_chunks, encode_response

log = logging.getLogger(__name__)
_Reply = TypeVar("_Reply")  # what a call's handler returns: bytes, or chunks of them

MIN_BLOCK = 64 * 1024
MAX_BLOCK = 256 << 20
# A response carries one block plus a few fields; requests are tiny.
MAX_MESSAGE = MAX_BLOCK + (1 << 20)
_MAX_REQUEST = 64 * 1024
# GetBlocks: at most this many blocks, and bytes of blocks, in one call (small files of
# a folder; a reply of 16 MiB leaves the link to others within ~15 ms at 10 Gbit/s).
MAX_BATCH = 64
MAX_BATCH_BYTES = 16 << 20
# ReadBlock's messages carry at most this much of a block. Each lands at the receiver as
# an allocation of its own size; under glibc's mmap threshold as the mount sets it (1 MiB,
# blockmem) it comes from the heap and is reused, where GetBlock's whole 8 MiB block was
# a fresh mapping at each layer (3,300-7,400 page faults per block in a process with the
# mount's malloc settings). A mount reading a 256 MiB object from a peer with mutual TLS
# on loopback (bench/run_peer_bench.py, 2026-12-05, four pairs alternated): 0.83-1.06
# million page faults per GB -> 0.38-0.51, 3.4-4.7 -> 2.6-3.1 s of mount CPU per GB,
# 245-333 -> 348-409 MB/s.
STREAM_CHUNK = 512 * 1024
# HTTP/2 flow control of both ends: a fixed 16 MiB window per stream (more than a 10-100
# Gbit/s LAN's bandwidth-delay product) instead of gRPC's BDP probing, whose pings and
# window updates cost more than the transfer of a large unary reply on a busy node: an
# 8 MiB gRPC echo over TLS on loopback moved 400-430 MB/s with 2.6-2.9 s of CPU per GB
# (both ends), and 770-870 MB/s with 1.3-1.6 s with these (the receiving end's setting
# is the one that counts). Through the mount (bench/run_peer_bench.py, 2026-12-05, six
# pairs): small files from a peer (GetBlocks) 1,857-2,233 files/s against 1,732-1,982
# without, higher in every pair; ReadBlock's 512 KiB messages gain nothing measurable.
HTTP2_FLOW_OPTIONS = [("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", 16 << 20)]
# 16 concurrent blocks: with 8 MiB blocks that is 128 MiB in flight at most, which a
# 10 Gbit/s link drains in ~0.1 s; more would only queue in memory.
DEFAULT_CONCURRENCY = 16
# Handles of the cache open per block size (a mount may use its own); bounded.
_MAX_BLOCK_SIZES = 4
_FLUSH_INTERVAL = 1.0


class PeerConfigError(errors.ConfigError):
    """Bad server configuration (listen address, group file, TLS files): exit 2."""


def resolve_tls(tls: TlsFiles, group_path: Path) -> TlsFiles:
    """TLS paths of the group file, relative ones taken from the group file's directory."""
    base = group_path.parent

    def one(p: str) -> str:
        return p if os.path.isabs(p) else str(base / p)
    return TlsFiles(one(tls.ca), one(tls.cert), one(tls.key))


def read_tls(tls: TlsFiles) -> tuple[bytes, bytes, bytes]:
    """(ca, cert, key) PEM bytes; PeerConfigError naming the file that cannot be read."""
    out = []
    for what, p in (("ca", tls.ca), ("cert", tls.cert), ("key", tls.key)):
        try:
            data = Path(p).read_bytes()
        except OSError as e:
            raise PeerConfigError(f"group tls.{what} {p}: {e.strerror}") from None
        if b"-----BEGIN" not in data:
            raise PeerConfigError(f"group tls.{what} {p}: not a PEM file")
        out.append(data)
    return out[0], out[1], out[2]


def _tls_stamp(tls: TlsFiles) -> tuple:
    stamp = []
    for p in (tls.ca, tls.cert, tls.key):
        try:
            st = os.stat(p)
            stamp.append((st.st_mtime_ns, st.st_size, st.st_ino))
        except OSError:
            stamp.append(None)
    return tuple(stamp)


def parse_listen(text: str, flag: str = "--listen") -> tuple[str, int]:
    """HOST:PORT (IPv6 as [::1]:PORT); PeerConfigError naming *flag* otherwise."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise PeerConfigError(f"invalid {flag} {text!r}: expected HOST:PORT")
    return host, int(port)


def _check_bindable(host: str, port: int, listen: str, flag: str = "--listen") -> None:
    """Name a busy or foreign address in one line before gRPC logs its own errors."""
    h = host.strip("[]")
    try:
        infos = socket.getaddrinfo(h, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise PeerConfigError(f"{flag} {listen}: {e.strerror}") from None
    family, _, _, _, addr = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(addr)
        except OSError as e:
            raise PeerConfigError(f"{flag} {listen}: cannot listen ({e.strerror})") from None


# glibc mallopt parameters
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD = 32 << 20   # glibc's largest: an 8 MiB block buffer comes from the heap
_TRIM_THRESHOLD = 256 << 20  # free heap kept for the next blocks (a peak already reached)


def keep_block_buffers() -> bool:
    """Let glibc reuse the freed multi-MiB buffers of served blocks (process-wide).

    By default glibc maps each 8 MiB buffer (the block read from disk, the reply, gRPC's
    copy) afresh, or trims the heap under it when it is freed, so every block costs
    thousands of page faults and zeroed pages. Measured, 4 blocks in flight over mTLS:
    server CPU 2.4-3.0 -> 1.75-1.95 s per GB served. Called by ``fusecache peer-serve``
    only (a process of its own); memory kept is at most what a burst already used.
    Returns False where this is not glibc.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)
                    and libc.mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD))
    except (OSError, AttributeError):
        return False


class TokenBucket:
    """A bandwidth share in bytes per second, thread-safe.

    ``reserve(n, max_wait)`` books *n* bytes and returns how long to wait before
    sending them, or None when that wait would exceed *max_wait* (then nothing is
    booked). Booking ahead (tokens may go negative) keeps the long-run rate exact
    even for blocks larger than the burst.
    """

    def __init__(self, rate: float, burst: float) -> None:
        self.rate = rate
        self.burst = burst
        self._tokens = burst
        self._stamp = time.monotonic()
        self._lock = threading.Lock()

    def reserve(self, n: int, max_wait: float) -> float | None:
        with self._lock:
            now = time.monotonic()
            self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate)
            self._stamp = now
            wait = max(0.0, (n - self._tokens) / self.rate)
            if wait > max_wait:
                return None
            self._tokens -= n
            return wait


_SERVICE = "fusecache.peer.v1.Peer"


class PeerServer:
    """Serves the node cache in *cache_dir* to the group's members over gRPC.

    ``start()`` binds and returns (raises PeerConfigError on bad configuration);
    requests are served by gRPC's worker threads; ``stop()`` ends it. ``port`` is
    the port bound (useful with ``HOST:0``).
    """

    def __init__(self, cache_dir: str | os.PathLike, listen: str, *,
                 group_path: str | os.PathLike | None = None, insecure: bool = False,
                 max_concurrency: int = DEFAULT_CONCURRENCY, max_mbps: float | None = None,
                 metrics: Metrics | None = None, lane_listen: str | None = None) -> None:
        self.cache_dir = Path(cache_dir)
        self.listen = listen
        self.lane_listen = lane_listen
        self.group_path = Path(group_path) if group_path is not None \
            else self.cache_dir / GROUP_FILE
        self.insecure = insecure
        self.max_concurrency = max(1, max_concurrency)
        self.metrics = metrics or Metrics()
        self.bandwidth = (TokenBucket(max_mbps * 125_000, max(max_mbps * 125_000 * 0.1, 1 << 20))
                          if max_mbps else None)
        self.port = 0
        self._slots = threading.BoundedSemaphore(self.max_concurrency)
        self._watcher = GroupWatcher(self.group_path)
        self._watch_lock = threading.Lock()
        self._caches: dict[int, NodeCache] = {}
        self._caches_lock = threading.Lock()
        self._server: grpc.Server | None = None
        self._stop = threading.Event()
        self._flusher: threading.Thread | None = None
        self._tls: TlsFiles | None = None
        self._tls_stamp: tuple | None = None
        self.lane_port = 0
        self._lane: LaneServer | None = None
        self._lane_ctx: tuple[tuple, ssl.SSLContext] | None = None

    # -- lifecycle ---------------------------------------------------------------

    def start(self) -> None:
        host, port = parse_listen(self.listen)
        _check_bindable(host, port, self.listen)
        group = self._initial_group()
        cache = self._cache(None)  # the cache's own block size; fails early if unusable
        self._caches[cache.block_size] = cache
        server = grpc.server(
            futures.ThreadPoolExecutor(self.max_concurrency + 4,
                                       thread_name_prefix="fusecache-peer"),
            maximum_concurrent_rpcs=4 * self.max_concurrency,
            options=[("grpc.max_send_message_length", MAX_MESSAGE),
                     ("grpc.max_receive_message_length", _MAX_REQUEST),
                     ("grpc.so_reuseport", 0), *HTTP2_FLOW_OPTIONS])
        # GetBlock's reply is already in wire format (encode_response): no serializer
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(_SERVICE, {
            "GetBlock": grpc.unary_unary_rpc_method_handler(
                self.get_block, request_deserializer=peer_pb2.GetBlockRequest.FromString),
            "ReadBlock": grpc.unary_stream_rpc_method_handler(
                self.read_block, request_deserializer=peer_pb2.GetBlockRequest.FromString),
            "GetBlocks": grpc.unary_unary_rpc_method_handler(
                self.get_blocks, request_deserializer=peer_pb2.GetBlocksRequest.FromString)}),))
        try:
            if self.insecure:
                self.port = server.add_insecure_port(self.listen)
            else:
                assert group is not None and group.tls is not None
                self.port = server.add_secure_port(self.listen, self._credentials(group.tls))
        except RuntimeError:
            raise PeerConfigError(f"--listen {self.listen}: cannot listen there") from None
        if not self.port:
            raise PeerConfigError(f"--listen {self.listen}: cannot listen there (address in "
                                  "use, or not an address of this host)")
        if self.lane_listen:
            self._start_lane(self.lane_listen)
        server.start()
        self._server = server
        self._flusher = threading.Thread(target=self._flush_loop, daemon=True,
                                         name="fusecache-peer-flush")
        self._flusher.start()
        log.info("serving cache %s to peers on %s:%d%s (%s)", self.cache_dir, host, self.port,
                 f", block lane on port {self.lane_port}" if self._lane else "",
                 "INSECURE: no TLS, no authentication" if self.insecure else "mutual TLS")

    def _start_lane(self, listen: str) -> None:
        """The block lane (fusecache/peer_lane.py) on *listen*, in a thread of its own."""
        host, port = parse_listen(listen, "--lane-listen")
        _check_bindable(host, port, listen, "--lane-listen")
        self._lane_context()  # names unusable TLS files now, not at the first handshake
        try:
            # connections, not requests (those take the same slots as gRPC's): each asking
            # mount keeps up to four alive, so a node serves many more than it answers at once
            lane = LaneServer((host.strip("[]"), port), self._answer_lane, self._lane_context,
                              max(256, 16 * self.max_concurrency))
        except OSError as e:
            raise PeerConfigError(f"--lane-listen {listen}: cannot listen ({e.strerror})") \
                from None
        self._lane, self.lane_port = lane, lane.port
        threading.Thread(target=lane.serve_forever, kwargs={"poll_interval": 0.5},
                         name="fusecache-lane-accept", daemon=True).start()

    def _lane_context(self) -> ssl.SSLContext | None:
        """The lane's TLS context, rebuilt when the certificate files change (renewals);
        None with --peer-insecure."""
        if self.insecure or self._tls is None:
            return None
        stamp = _tls_stamp(self._tls)
        if self._lane_ctx is not None and self._lane_ctx[0] == stamp:
            return self._lane_ctx[1]
        try:
            ca, _, _ = read_tls(self._tls)
            ctx = server_context(ca, self._tls.cert, self._tls.key)
        except (PeerConfigError, ssl.SSLError, OSError) as e:
            if self._lane_ctx is None:
                raise
            log.warning("keeping the current peer certificate for the block lane: %s", e)
            return self._lane_ctx[1]
        self._lane_ctx = (stamp, ctx)
        return ctx

    def _initial_group(self) -> Group | None:
        try:
            group = load_group(self.group_path)
        except FileNotFoundError:
            group = None
        except OSError as e:
            raise PeerConfigError(f"--group {self.group_path}: {e.strerror}") from None
        except GroupFileError as e:
            raise PeerConfigError(str(e)) from None
        if self.insecure:
            log.warning("PEER SERVER WITHOUT TLS (--peer-insecure): anyone who can reach %s "
                        "can read every block in %s; for tests and development only",
                        self.listen, self.cache_dir)
            return group
        if group is None:
            raise PeerConfigError(f"--group {self.group_path}: no group file (its tls and "
                                  "members say who may connect); pass --peer-insecure only "
                                  "for tests")
        if group.tls is None:
            raise PeerConfigError(f"{self.group_path}: no 'tls' in the group file, so peers "
                                  "cannot be authenticated; add it, or pass --peer-insecure "
                                  "(tests only)")
        self._tls = resolve_tls(group.tls, self.group_path)
        read_tls(self._tls)  # names an unreadable file now, not at the first handshake
        return group

    def _credentials(self, tls: TlsFiles) -> grpc.ServerCredentials:
        ca, cert, key = read_tls(self._tls or tls)
        self._tls_stamp = _tls_stamp(self._tls or tls)
        initial = grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=ca)
        return grpc.dynamic_ssl_server_credentials(initial, self._reload_tls,
                                                   require_client_authentication=True)

    def _reload_tls(self) -> grpc.ServerCertificateConfiguration | None:
        """Called by gRPC before each handshake: new files after a renewal, else None."""
        assert self._tls is not None
        stamp = _tls_stamp(self._tls)
        if stamp == self._tls_stamp:
            return None
        try:
            ca, cert, key = read_tls(self._tls)
        except PeerConfigError as e:
            log.warning("keeping the current peer certificate: %s", e)
            return None
        self._tls_stamp = stamp
        log.info("peer certificate files changed: using the new ones")
        return grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=ca)

    def stop(self, grace: float | None = 1.0) -> None:
        self._stop.set()
        if self._lane is not None:
            self._lane.shutdown()
            self._lane.server_close()
            self._lane = None
        if self._server is not None:
            self._server.stop(grace).wait()
            self._server = None
        if self._flusher is not None:
            self._flusher.join(timeout=5)
            self._flusher = None
        self._flush()
        with self._caches_lock:
            for c in self._caches.values():
                c.close()
            self._caches.clear()

    def wait(self) -> None:
        """Block until stopped."""
        self._stop.wait()

    # -- serving -------------------------------------------------------------------

    def _group(self) -> Group | None:
        with self._watch_lock:
            return self._watcher.current(time.monotonic())

    def _cache(self, block_size: int | None) -> NodeCache:
        with self._caches_lock:
            c = self._caches.get(block_size) if block_size is not None else None
            if c is not None:
                return c
            if block_size is not None and len(self._caches) >= _MAX_BLOCK_SIZES:
                raise _Refused(grpc.StatusCode.RESOURCE_EXHAUSTED,
                               f"block size {block_size}: this server already serves "
                               f"{_MAX_BLOCK_SIZES} block sizes")
            try:
                c = NodeCache.open(self.cache_dir, block_size=block_size)
            except errors.FusecacheError as e:
                raise PeerConfigError(f"--cache-dir {self.cache_dir}: {e}") from None
            if block_size is not None:
                self._caches[block_size] = c
            return c

    def _authorise(self, bucket: str, context: grpc.ServicerContext) -> str:
        """The caller's member name; _Refused (PERMISSION_DENIED) if it may not ask."""
        if self.insecure:
            return "?"
        ac = context.auth_context()
        return self._member_asking({v.decode(errors="replace") for k in (
            "x509_subject_alternative_name", "x509_common_name") for v in ac.get(k, [])}, bucket)

    def _member_asking(self, names: set[str], bucket: str) -> str:
        """The member whose certificate carries one of *names*, if it may ask for blocks of
        *bucket*; _Refused (PERMISSION_DENIED) otherwise."""
        if self.insecure:
            return "?"
        group = self._group()
        member = next((m for m in (group.members if group else ()) if m.name in names), None)
        if member is None:
            raise _Refused(grpc.StatusCode.PERMISSION_DENIED,
                           f"certificate of {sorted(names)} names no member of the group")
        if bucket not in member.buckets:
            raise _Refused(grpc.StatusCode.PERMISSION_DENIED,
                           f"member {member.name} has no mount or warm of bucket {bucket!r}")
        return member.name

    def _checked(self, req: peer_pb2.GetBlockRequest) -> ObjectId:
        """The object a block request names; _Refused (INVALID_ARGUMENT) if malformed."""
        if not req.bucket or not req.key or not MIN_BLOCK <= req.block_size <= MAX_BLOCK:
            raise _Refused(grpc.StatusCode.INVALID_ARGUMENT,
                           "bucket, key and a block size of 64KiB-256MiB are required")
        oid = ObjectId(req.bucket, req.key, req.etag, req.size)
        if req.index >= oid.block_count(req.block_size):
            raise _Refused(grpc.StatusCode.INVALID_ARGUMENT,
                           f"block {req.index} is past the end of a {req.size}-byte object")
        return oid

    def _pace(self, nbytes: int, left: float | None) -> None:
        """Wait for the bandwidth share to let *nbytes* go; _Refused when that would be
        past the caller's deadline (*left* seconds away; None: no deadline)."""
        if self.bandwidth is None:
            return
        wait = self.bandwidth.reserve(nbytes, 1e9 if left is None else left)
        if wait is None:
            raise _Refused(grpc.StatusCode.RESOURCE_EXHAUSTED,
                           "bandwidth share spent until past your deadline")
        if wait > 0:
            time.sleep(wait)

    @contextmanager
    def _slot(self) -> Iterator[None]:
        """One of the server's concurrency slots; _Refused (RESOURCE_EXHAUSTED) at once
        when all are taken."""
        if not self._slots.acquire(blocking=False):
            raise _Refused(grpc.StatusCode.RESOURCE_EXHAUSTED,
                           f"serving {self.max_concurrency} calls already")
        try:
            yield
        finally:
            self._slots.release()

    def _serve(self, method: str, context: grpc.ServicerContext,
               answer: Callable[[], tuple[_Reply, int, int, str]]) -> _Reply:
        """Run one gRPC call's *answer* (``_counted``), refusals as gRPC status codes."""
        return self._counted(method, answer, context.abort)

    def _counted(self, method: str, answer: Callable[[], tuple[_Reply, int, int, str]],
                 refuse: Callable[[grpc.StatusCode, str], object]) -> _Reply:
        """Run one request's *answer* (its reply, bytes and blocks served, who asked),
        counting it; a refusal goes to *refuse* (which raises: gRPC's abort, the lane's
        HTTP status)."""
        result = "error"
        try:
            reply, served, blocks, caller = answer()
            result = "ok"
            self.metrics.observe_served(served, blocks)
            log.debug("served %s (%d bytes) to %s", method, served, caller)
            return reply
        except _Refused as e:
            result = e.code.name.lower()
            if e.code is grpc.StatusCode.PERMISSION_DENIED:
                log.warning("refused a peer: %s", e.message)
            refuse(e.code, e.message)
            raise AssertionError("unreachable") from None  # refuse raises
        except PeerConfigError as e:
            refuse(grpc.StatusCode.UNAVAILABLE, str(e))
            raise AssertionError("unreachable") from None
        finally:
            self.metrics.peer_requests_served.labels(result).inc()

    def _one_block(self, req: peer_pb2.GetBlockRequest, context: grpc.ServicerContext
                   ) -> tuple[bytes, int, bytes, str]:
        """The block a GetBlock or ReadBlock call asks for: (data, crc32, block key, who
        asked), its bandwidth share booked; _Refused when it may not or cannot have it."""
        return self._block_for(self._authorise(req.bucket, context), req,
                               context.time_remaining())

    def _block_for(self, caller: str, req: peer_pb2.GetBlockRequest, left: float | None
                   ) -> tuple[bytes, int, bytes, str]:
        oid = self._checked(req)
        with self._slot():
            got = self._cache(req.block_size).get_block_crc(oid, req.index)
            if got is None:
                raise _Refused(grpc.StatusCode.NOT_FOUND, "not cached here")
            data, crc = got
            self._pace(len(data), left)
        return data, crc, block_key(oid, req.index, req.block_size), caller

    def _answer_lane(self, names: set[str], fields: dict[str, str], budget: float | None
                     ) -> tuple[bytes, int, bytes]:
        """One block asked over the lane (peer_lane.Answer): the same rules and counts as
        GetBlock, its refusals as HTTP statuses."""
        def answer() -> tuple[tuple[bytes, int, bytes], int, int, str]:
            try:
                req = peer_pb2.GetBlockRequest(
                    bucket=fields["bucket"], key=fields["key"], etag=fields["etag"],
                    size=int(fields["size"]), block_size=int(fields["block_size"]),
                    index=int(fields["index"]))
            except (ValueError, KeyError):
                raise _Refused(grpc.StatusCode.INVALID_ARGUMENT,
                               "size, block_size and index must be integers") from None
            data, crc, key, caller = self._block_for(
                self._member_asking(names, req.bucket), req, budget)
            return (data, crc, key), len(data), 1, caller

        def refuse(code: grpc.StatusCode, message: str) -> None:
            raise Refusal(_HTTP_STATUS.get(code, 500), message)

        self.metrics.peer_lane_served.inc()
        return self._counted("a block over the lane", answer, refuse)

    def get_block(self, req: peer_pb2.GetBlockRequest, context: grpc.ServicerContext) -> bytes:
        """One GetBlock call: the encoded ``GetBlockResponse``, or an abort."""
        def answer() -> tuple[bytes, int, int, str]:
            data, crc, key, caller = self._one_block(req, context)
            return encode_response(data, crc, key), len(data), 1, caller
        return self._serve("GetBlock", context, answer)

    def read_block(self, req: peer_pb2.GetBlockRequest, context: grpc.ServicerContext
                   ) -> Iterator[bytes]:
        """One ReadBlock call: the encoded ``GetBlockResponse`` chunks, or an abort."""
        def answer() -> tuple[Iterator[bytes], int, int, str]:
            data, crc, key, caller = self._one_block(req, context)
            return encode_chunks(data, crc, key, STREAM_CHUNK), len(data), 1, caller
        return self._serve("ReadBlock", context, answer)

    def get_blocks(self, req: peer_pb2.GetBlocksRequest,
                   context: grpc.ServicerContext) -> bytes:
        """One GetBlocks call: the encoded ``GetBlocksResponse``, or an abort."""
        def answer() -> tuple[bytes, int, int, str]:
            if not 0 < len(req.blocks) <= MAX_BATCH:
                raise _Refused(grpc.StatusCode.INVALID_ARGUMENT,
                               f"1 to {MAX_BATCH} blocks per call, not {len(req.blocks)}")
            oids = [self._checked(b) for b in req.blocks]
            spans = [o.block_span(b.index, b.block_size)
                     for o, b in zip(oids, req.blocks, strict=True)]
            asked = sum(end - start for start, end in spans)
            if asked > MAX_BATCH_BYTES:
                raise _Refused(grpc.StatusCode.INVALID_ARGUMENT,
                               f"{asked} bytes of blocks asked in one call; at most "
                               f"{MAX_BATCH_BYTES}")
            caller = ""
            for bucket in sorted({b.bucket for b in req.blocks}):
                caller = self._authorise(bucket, context)
            found: list[tuple[bytes, int, bytes] | None] = []
            served = 0
            with self._slot():
                for oid, b in zip(oids, req.blocks, strict=True):
                    got = self._cache(b.block_size).get_block_crc(oid, b.index)
                    if got is None:
                        found.append(None)
                        continue
                    served += len(got[0])
                    found.append((got[0], got[1], block_key(oid, b.index, b.block_size)))
                self._pace(served, context.time_remaining())
            return encode_batch(found), served, sum(f is not None for f in found), caller
        return self._serve("GetBlocks", context, answer)

    # -- bookkeeping ---------------------------------------------------------------

    def _flush_loop(self) -> None:
        while not self._stop.wait(_FLUSH_INTERVAL):
            self._flush()

    def _flush(self) -> None:
        """Access times of served blocks (LRU) and the counters, to the node cache."""
        with self._caches_lock:
            caches = list(self._caches.values())
        if not caches:
            return
        try:
            for c in caches:
                c.flush_touches()
            caches[0].add_counters(self.metrics.take_pending())
        except Exception as e:  # noqa: BLE001 - bookkeeping must not stop serving
            log.warning("could not update the node cache's bookkeeping: %s", e)


_HTTP_STATUS = {grpc.StatusCode.INVALID_ARGUMENT: 400, grpc.StatusCode.PERMISSION_DENIED: 403,
                grpc.StatusCode.NOT_FOUND: 404, grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
                grpc.StatusCode.UNAVAILABLE: 503}


class _Refused(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
