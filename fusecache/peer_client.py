"""The peer client: ask the cache group's other nodes for a block before S3.

Who calls it: the mount's read path (``reader.BlockReader._load``: RAM -> node cache ->
peers -> S3) and warms (``warm.fetch_object``, through :func:`fetch_from_peers`). Blocking;
call it from a worker thread.

Data flow of one block::

    GroupWatcher.current() (group.json, re-read when it changes)
      -> candidates: members hinting they hold the dataset (Member.datasets), then the
         block's rendezvous owners (group.owners over nodecache.block_key), never this
         node, never a peer whose breaker is open; at most ``max_tries`` of them
      -> one of the peer's ``_PER_PEER`` request slots (waited for at most ``timeout``;
         a peer whose slots stay taken is passed over, not penalised)
      -> the member's block lane when the group file names one (peer_lane.py: one HTTP/1.1
         request on a kept-alive connection with the same mutual TLS, the body read into
         the lent buffer; a lane that cannot be reached is left for gRPC a while), else
         ReadBlock over the peer's pooled channel (mutual TLS with the group's CA and
         this node's certificate; the server must present the member's name), each try
         bounded by ``timeout`` plus the block's size at ``_FLOOR_RATE`` and by what is
         left of the caller's budget; its chunks copied into one buffer (the caller's
         lent one, or a new one once the first arrives); GetBlock from a peer that has
         no ReadBlock (an older version: UNIMPLEMENTED), asked again after a while
      -> verified (length = the block's span, crc32, and the block key of the request's
         bucket/key/etag/size/block size) -> bytes; else None: the caller goes to S3

Folder read-ahead asks for a folder's next small files together (``fetch_first_blocks``):
one GetBlocks call per peer and round instead of one GetBlock per file, verified block by
block the same way; what no peer answered with goes to S3.

A peer that fails (unreachable, timed out, busy, refused, sent a bad block) is skipped for
a cooldown that doubles per failure up to a minute; after it one request probes it again
(the per-peer counterpart of ``circuit.py``). A miss (NOT_FOUND) is an answer, not a
failure. Without ``tls`` in the group file no peer is asked unless the mount was given
``--peer-insecure`` (plaintext, tests and development).
"""

from __future__ import annotations

import http.client
import logging
import os
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import grpc
from zlib_ng.zlib_ng import crc32  # the node cache's CRC-32 (same sum as zlib's, 3x faster)

from fusecache._proto import peer_pb2
from fusecache.blockmem import block_buffer
from fusecache.group import Group, GroupWatcher, Member, TlsFiles
from fusecache.metrics import Metrics
from fusecache.nodecache import ObjectId, block_key
from fusecache.peer_lane import LaneConnection, LaneDown, LaneStatus, client_context
from fusecache.peer_server import (
    HTTP2_FLOW_OPTIONS,
    MAX_BATCH,
    MAX_BATCH_BYTES,
    MAX_MESSAGE,
    STREAM_CHUNK,
    PeerConfigError,
    read_tls,
    resolve_tls,
)
from fusecache.peer_wire import WireError, decode_batch, decode_response

log = logging.getLogger(__name__)
T = TypeVar("T")

_GET_BLOCK = "/fusecache.peer.v1.Peer/GetBlock"
_GET_BLOCKS = "/fusecache.peer.v1.Peer/GetBlocks"
_READ_BLOCK = "/fusecache.peer.v1.Peer/ReadBlock"
# A peer without ReadBlock (an older version, mid-upgrade of the group) is asked with
# GetBlock for this long, then with ReadBlock again: one refused call per peer and period.
_UNARY_PERIOD = 300.0

# 1.5 s: a block from a peer on a 10 Gbit/s LAN takes ~10 ms (8 MiB) on the wire and
# 40-80 ms of CPU at each end (Python, TLS); on busy nodes 0.75 s sent a third of the
# blocks to S3 (bench/run_group_bench.py). A peer that has not answered in 1.5 s is
# overloaded or gone, and S3 is the better bet.
DEFAULT_TIMEOUT = 1.5
_MIN_TRY = 0.05  # less budget than this left: do not start a try
_COOLDOWN = 2.0
_MAX_COOLDOWN = 60.0
# Breaker states kept (one per member that failed); members come and go over a node's
# life, so the oldest is forgotten past this (it is then asked again sooner, no more).
_MAX_STATES = 1024
_BUSY_COOLDOWN = 0.5
# Requests in flight to one peer. A few overlap the server's cache read and checksum with
# the transfer; more only share its link and CPU and push every one of them towards its
# timeout (a mount's read-ahead alone asks for up to 12 blocks at once). Measured on
# loopback on 2 busy cores (load 7-10), 8 MiB blocks through `fusecache peer-serve` with
# mutual TLS, 256 MiB: 1 in flight 150-260 MB/s, 4 in flight 190-330 MB/s (CPU bound on
# both ends; bench/run_peer_bench.py). The rest wait for a slot, within the try's bound.
_PER_PEER = 4
# GetBlocks calls in flight to one peer, besides those: two keep a peer's cache read of
# one batch overlapping the transfer of the other.
_BATCHES_PER_PEER = 2
# Time a try allows for moving the block itself, on top of --peer-timeout: a peer that
# cannot send at 50 MB/s is no better than S3.
_FLOOR_RATE = 50e6


@dataclass
class _PeerState:
    failures: int = 0
    skip_until: float = 0.0


@dataclass
class _Channel:
    """One peer's pooled channel and its methods (replies come as raw bytes, parsed by
    peer_wire: no protobuf copies)."""

    creds_key: tuple | None
    channel: grpc.Channel
    get_block: grpc.UnaryUnaryMultiCallable
    get_blocks: grpc.UnaryUnaryMultiCallable
    read_block: grpc.UnaryStreamMultiCallable
    unary_until: float = -1e18  # GetBlock instead of ReadBlock until then


def _kept(view: memoryview, into: bytearray | None = None) -> bytearray:
    """A block a peer sent, copied out of its message into *into* (a buffer the caller
    lends, of the block's length) or a new one: a bytearray, so that the mount's reader
    can reuse its buffer once the RAM tier lets it go, as it does a GET's."""
    buf = _buffer(len(view), into)
    buf[:] = view
    return buf


def _buffer(n: int, into: bytearray | None) -> bytearray:
    """*into* if the caller lent one of *n* bytes, else a new buffer of *n* bytes."""
    return into if into is not None and len(into) == n else block_buffer(n)


class PeerClient:
    """Pooled channels and breakers for the group's peers. Thread-safe."""

    def __init__(self, watcher: GroupWatcher, *, timeout: float = DEFAULT_TIMEOUT,
                 insecure: bool = False, metrics: Metrics | None = None,
                 max_tries: int = 2, clock: Callable[[], float] = time.monotonic) -> None:
        self.watcher = watcher
        self.timeout = timeout
        self.insecure = insecure
        self.metrics = metrics
        self.max_tries = max_tries
        self._clock = clock
        self._lock = threading.Lock()
        self._channels: dict[tuple[str, str], _Channel] = {}
        self._states: dict[str, _PeerState] = {}
        self._inflight: dict[tuple[str, bool], threading.BoundedSemaphore] = {}
        self._creds: grpc.ChannelCredentials | None = None
        self._creds_key: tuple | None = None
        self._creds_checked = -1e18
        self._warned: set[str] = set()
        # the block lanes (fusecache/peer_lane.py): idle connections per (member, lane),
        # at most _PER_PEER each; members whose lane is unreachable -> when to try it again
        self._lanes: dict[tuple[str, str], list[LaneConnection]] = {}
        self._lane_ctx: tuple[tuple, ssl.SSLContext] | None = None
        self._lane_off: dict[str, float] = {}

    # -- public --------------------------------------------------------------------

    def group(self) -> Group | None:
        with self._lock:
            return self.watcher.current(self._clock())

    def active(self) -> bool:
        """Whether there is anyone to ask (cheap: for the trio thread)."""
        g = self.group()
        return g is not None and (g.tls is not None or self.insecure) and any(
            m.name != g.self_name for m in g.members)

    def candidates(self, group: Group, oid: ObjectId, idx: int, block_size: int) -> list[Member]:
        """Who to ask for a block, best first: dataset holders, then the block's owners."""
        key = block_key(oid, idx, block_size)
        owners = group.owners(key, max(group.replicas, 2))
        hinted = [m for m in owners if m.holds_hint(oid.bucket, oid.key)]
        hinted += [m for m in group.members if m.holds_hint(oid.bucket, oid.key)
                   and m not in hinted]
        out: list[Member] = []
        for m in hinted + owners:
            if m.name != group.self_name and m not in out:
                out.append(m)
        return out

    def _usable_group(self) -> Group | None:
        """The group, if peers may be asked (it has TLS, or plaintext was allowed)."""
        group = self.group()
        if group is None:
            return None
        if group.tls is None and not self.insecure:
            self._warn_once("notls", "group file %s has no 'tls': peers are not asked (pass "
                            "--peer-insecure to use plaintext peers, for tests only)",
                            self.watcher.path)
            return None
        return group

    def fetch(self, oid: ObjectId, idx: int, block_size: int,
              budget: float | None = None, into: bytearray | None = None) -> bytes | None:
        """The verified block from a peer, or None (then read it from S3).

        *budget*: seconds left of the caller's deadline; no try runs past it. *into*: a
        buffer of the block's length to receive it in (the result is then *into*); when
        the result is not *into*, *into* may hold part of a block that failed.
        """
        group = self._usable_group()
        if group is None:
            return None
        end_by = self._clock() + (budget if budget is not None else 1e9)
        tried = 0
        for member in self.candidates(group, oid, idx, block_size):
            if tried >= self.max_tries:
                break
            if not self._may_try(member.name):
                continue
            left = end_by - self._clock()
            if left < _MIN_TRY:
                break
            tried += 1
            start, end = oid.block_span(idx, block_size)
            allowance = self.timeout + (end - start) / _FLOOR_RATE
            # A queue behind our own requests is no sign of a bad peer: wait as long as one
            # try may take (one of those in flight ends by then, or fails and opens the
            # breaker), so read-ahead bursts do not spill over to S3.
            slot = self._slot(member.name)
            if not slot.acquire(timeout=min(allowance, left)):
                self._observe(member.name, "busy", allowance, 0)
                continue  # its requests in flight are not done: ask another, or S3
            try:
                data = self._try(group, member, oid, idx, block_size,
                                 min(allowance, end_by - self._clock()), into)
            finally:
                slot.release()
            if data is not None:
                return data
        if tried and self.metrics is not None:
            self.metrics.observe_peer_fallback()
        return None

    def fetch_first_blocks(self, oids: list[ObjectId], block_size: int,
                           budget: float | None = None) -> dict[ObjectId, bytes]:
        """The verified first blocks of these objects that peers hold (any the group
        could not give are left out: read them from S3).

        Each round asks every peer that is some pending block's next candidate for all
        of its blocks in one GetBlocks call (at most MAX_BATCH blocks, MAX_BATCH_BYTES);
        a block a peer lacks or failed goes to its next candidate in the next round, up
        to ``max_tries`` candidates, as ``fetch`` does. *budget* bounds the whole call.
        """
        group = self._usable_group()
        if group is None or not oids:
            return {}
        end_by = self._clock() + (budget if budget is not None else 1e9)
        order = {o: self.candidates(group, o, 0, block_size) for o in oids}
        got: dict[ObjectId, bytes] = {}
        asked = False
        for _round in range(self.max_tries):
            batches: dict[str, tuple[Member, list[ObjectId]]] = {}
            for o, members in order.items():
                while members and not self._may_ask(members[0].name):
                    members.pop(0)
                if members:
                    m = members.pop(0)
                    batches.setdefault(m.name, (m, []))[1].append(o)
            if not batches:
                break
            for member, wanted in batches.values():
                for part in in_runs(wanted, MAX_BATCH, MAX_BATCH_BYTES,
                                    lambda o: o.block_span(0, block_size)[1]):
                    left = end_by - self._clock()
                    if left < _MIN_TRY:
                        return got
                    asked = True
                    found = self._try_many(group, member, part, block_size, left)
                    for o, data in found.items():
                        got[o] = data
                        order.pop(o, None)
            order = {o: ms for o, ms in order.items() if ms}
            if not order:
                break
        if asked and len(got) < len(oids) and self.metrics is not None:
            self.metrics.observe_peer_fallback(len(oids) - len(got))
        return got

    def _may_ask(self, name: str) -> bool:
        """Whether this member may be asked now (its breaker is closed). Unlike
        _may_try this books no probe: a batch asks a failed peer again only once its
        cooldown is over, through _try_many."""
        with self._lock:
            st = self._states.get(name)
            return st is None or st.failures == 0 or self._clock() >= st.skip_until

    def connect(self, timeout: float = 5.0, most: int = 8) -> int:
        """Open the channels to up to *most* other members now (those hinting they hold
        datasets first): TCP and TLS handshakes, so that the first block asked of each
        does not wait for them. Returns how many were ready within *timeout*. Blocking:
        the mount calls it in a worker thread at start."""
        group = self._usable_group()
        if group is None:
            return 0
        ready = 0
        end_by = self._clock() + timeout
        others = sorted((m for m in group.members if m.name != group.self_name),
                        key=lambda m: not m.datasets)
        for member in others[:most]:
            try:
                ch = self._channel(group, member).channel
                grpc.channel_ready_future(ch).result(
                    timeout=max(0.01, end_by - self._clock()))
                ready += 1
            except (grpc.FutureTimeoutError, PeerConfigError, KeyError) as e:
                log.debug("peer %s not connected ahead: %s", member.name, e)
        return ready

    def close(self) -> None:
        with self._lock:
            chans, self._channels = list(self._channels.values()), {}
            lanes, self._lanes = [c for idle in self._lanes.values() for c in idle], {}
        for ch in chans:
            ch.channel.close()
        for c in lanes:
            c.close()

    # -- one try -------------------------------------------------------------------

    def _try(self, group: Group, member: Member, oid: ObjectId, idx: int, block_size: int,
             timeout: float, into: bytearray | None = None) -> bytes | None:
        t0 = self._clock()
        result, nbytes, data = "error", 0, None
        try:
            start, end = oid.block_span(idx, block_size)
            got, crc, key = self._receive(group, member, peer_pb2.GetBlockRequest(
                bucket=oid.bucket, key=oid.key, etag=oid.etag, size=oid.size,
                block_size=block_size, index=idx), end - start, t0 + timeout, into)
            if (len(got) != end - start or crc32(got) != crc
                    or key != block_key(oid, idx, block_size)):
                result = "bad"
                log.warning("peer %s sent a block %d of s3://%s/%s that failed verification "
                            "(%d bytes, want %d); reading it from S3", member.name, idx,
                            oid.bucket, oid.key, len(got), end - start)
                self._failed(member.name, _COOLDOWN)
            else:
                data = got if isinstance(got, bytearray) else _kept(got, into)
                result, nbytes = "hit", len(data)
                self._answered(member.name)
        except grpc.RpcError as e:
            result = self._rpc_failed(member.name, e)
        except LaneStatus as e:
            result = self._lane_failed(member.name, e)
        except http.client.RemoteDisconnected as e:  # closed unanswered: all its lanes taken
            result = "busy"
            log.debug("peer %s: block lane: %s", member.name, e)
            self._failed(member.name, _BUSY_COOLDOWN)
        except (OSError, http.client.HTTPException) as e:  # the lane broke or timed out
            result = "timeout" if isinstance(e, TimeoutError) else "unavailable"
            log.debug("peer %s: block lane: %s", member.name, e)
            self._failed(member.name, _COOLDOWN)
        except PeerConfigError as e:
            self._unusable(member.name, e)
        self._observe(member.name, result, self._clock() - t0, nbytes)
        return data

    def _receive(self, group: Group, member: Member, req: peer_pb2.GetBlockRequest,
                 span: int, end_by: float, into: bytearray | None
                 ) -> tuple[bytearray | memoryview, int, bytes]:
        """(data, crc32, block key) as the peer sent them, unverified: by ReadBlock into
        *into* (when it has the block's length) or a new buffer, or by GetBlock (a view of
        its reply) for a block that fits one of ReadBlock's messages (a small file: a
        unary call costs the caller less than a stream of one message, 0.47-0.55 against
        0.77-0.85 ms of CPU for 100 KiB on the 2-core bench VM) and from a peer that has
        no ReadBlock. An empty answer for a malformed one; grpc.RpcError as the call
        failed."""
        if member.lane and self._clock() >= self._lane_off.get(member.name, -1e18):
            try:
                return self._receive_lane(group, member, req, span, end_by, into)
            except LaneDown as e:
                log.info("peer %s: its block lane %s cannot be reached (%s): asking it over "
                         "gRPC for %.0f s", member.name, member.lane, e, _UNARY_PERIOD)
                with self._lock:
                    if len(self._lane_off) > _MAX_STATES:
                        self._lane_off.clear()
                    self._lane_off[member.name] = self._clock() + _UNARY_PERIOD
        ch = self._channel(group, member)
        if span > STREAM_CHUNK and self._clock() >= ch.unary_until:
            call = ch.read_block(req, timeout=max(_MIN_TRY, end_by - self._clock()))
            buf: bytearray | None = None
            pos, crc, key = 0, 0, b""
            try:
                for raw in call:
                    part, c, k = decode_response(raw)
                    if buf is None:  # the first message: the block's sum and key
                        crc, key = c, k
                        buf = _buffer(span, into)
                    if pos + len(part) > span:
                        raise WireError("more bytes than the block has")
                    buf[pos:pos + len(part)] = part
                    pos += len(part)
            except WireError:
                call.cancel()
                return memoryview(b""), 0, b""
            except grpc.RpcError as e:
                if e.code() is not grpc.StatusCode.UNIMPLEMENTED:
                    raise
                log.info("peer %s has no ReadBlock (an older version): asking it with "
                         "GetBlock for %.0f s", member.name, _UNARY_PERIOD)
                ch.unary_until = self._clock() + _UNARY_PERIOD
            else:
                if buf is None:
                    return memoryview(b""), 0, b""
                return (buf if pos == span else memoryview(buf)[:pos]), crc, key
        raw = ch.get_block(req, timeout=max(_MIN_TRY, end_by - self._clock()))
        try:
            return decode_response(raw)
        except WireError:
            return memoryview(b""), 0, b""

    def _receive_lane(self, group: Group, member: Member, req: peer_pb2.GetBlockRequest,
                      span: int, end_by: float, into: bytearray | None
                      ) -> tuple[bytearray, int, bytes]:
        """(data, crc32, block key) over the member's block lane, unverified, read into
        *into* when it has the block's length; LaneDown when the lane cannot be reached,
        LaneStatus for a refusal, OSError or HTTPException when the exchange broke."""
        ctx = self._lane_context(group)
        key = (member.name, member.lane)
        with self._lock:
            idle = self._lanes.get(key) or []
            conn = idle.pop() if idle else None
        if conn is None or conn.context is not ctx:
            if conn is not None:
                conn.close()
            conn = LaneConnection(member.lane, member.name, ctx)
        fields = {"bucket": req.bucket, "key": req.key, "etag": req.etag, "size": req.size,
                  "block_size": req.block_size, "index": req.index}
        try:
            got = conn.get(fields, span, max(_MIN_TRY, end_by - self._clock()), into,
                           block_buffer)
        except LaneStatus:
            self._keep_lane(key, conn)  # a refusal leaves the connection usable
            raise
        self._keep_lane(key, conn)
        return got

    def _keep_lane(self, key: tuple[str, str], conn: LaneConnection) -> None:
        with self._lock:
            if len(self._lanes) > 1024:  # members come and go: keep it bounded
                for old in self._lanes.values():
                    for c in old:
                        c.close()
                self._lanes.clear()
            idle = self._lanes.setdefault(key, [])
            if len(idle) < _PER_PEER:
                idle.append(conn)
                return
        conn.close()

    def _lane_context(self, group: Group) -> ssl.SSLContext | None:
        """This node's TLS context for the lanes, rebuilt when its files change (None for
        a group without tls, with --peer-insecure)."""
        if group.tls is None:
            return None
        _, key = self._credentials(group)  # the files' stamps, looked at once a second
        assert key is not None
        with self._lock:
            if self._lane_ctx is not None and self._lane_ctx[0] == key:
                return self._lane_ctx[1]
        tls = key[0]
        ca, _, _ = read_tls(tls)
        try:
            ctx = client_context(ca, tls.cert, tls.key)
        except (ssl.SSLError, OSError) as e:
            raise PeerConfigError(f"group tls {tls.cert} / {tls.key}: {e}") from None
        with self._lock:
            self._lane_ctx = (key, ctx)
        return ctx

    def _lane_failed(self, name: str, e: LaneStatus) -> str:
        """Book a lane refusal as _rpc_failed books a gRPC one; the metrics' result name."""
        if e.status == 404:
            self._answered(name)
            return "miss"
        if e.status == 429:
            self._failed(name, _BUSY_COOLDOWN)
            return "busy"
        if e.status == 403:
            self._warn_once(f"denied:{name}", "peer %s refused this node: %s", name, e.reason)
        else:
            log.debug("peer %s: block lane answered %s", name, e)
        self._failed(name, _COOLDOWN)
        return {403: "denied", 503: "unavailable"}.get(e.status, "bad" if e.status == 502
                                                       else "error")

    def _try_many(self, group: Group, member: Member, oids: list[ObjectId], block_size: int,
                  budget: float) -> dict[ObjectId, bytes]:
        """One GetBlocks call to *member* for the first blocks of *oids*: those it sent
        and that passed verification."""
        spans = [o.block_span(0, block_size) for o in oids]
        nbytes = sum(end - start for start, end in spans)
        timeout = min(budget, self.timeout + nbytes / _FLOOR_RATE)
        slot = self._slot(member.name, batch=True)
        if not slot.acquire(timeout=timeout):
            self._observe(member.name, "busy", timeout, 0)
            return {}
        t0 = self._clock()
        out: dict[ObjectId, bytes] = {}
        result = "error"
        try:
            get_blocks = self._channel(group, member).get_blocks
            req = peer_pb2.GetBlocksRequest(blocks=[peer_pb2.GetBlockRequest(
                bucket=o.bucket, key=o.key, etag=o.etag, size=o.size, block_size=block_size,
                index=0) for o in oids])
            raw = get_blocks(req, timeout=max(_MIN_TRY, timeout - (self._clock() - t0)))
            try:
                answers = decode_batch(raw)
            except WireError:
                answers = []
            if len(answers) != len(oids):
                result = "bad"
                log.warning("peer %s answered %d of %d blocks asked; reading them from S3",
                            member.name, len(answers), len(oids))
                self._failed(member.name, _COOLDOWN)
            else:
                bad = 0
                for o, (start, end), ans in zip(oids, spans, answers, strict=True):
                    if ans is None:
                        continue
                    data, crc, key = ans
                    if (len(data) != end - start or crc32(data) != crc
                            or key != block_key(o, 0, block_size)):
                        bad += 1
                        continue
                    out[o] = bytes(data)
                if bad:
                    result = "bad"
                    log.warning("peer %s sent %d blocks that failed verification; reading "
                                "them from S3", member.name, bad)
                    self._failed(member.name, _COOLDOWN)
                else:
                    result = "answered"
                    self._answered(member.name)
        except grpc.RpcError as e:
            result = self._rpc_failed(member.name, e)
        except PeerConfigError as e:
            self._unusable(member.name, e)
        finally:
            slot.release()
        if result == "answered" and self.metrics is not None:
            self.metrics.observe_peer_batch(member.name, self._clock() - t0, len(out),
                                            len(oids) - len(out),
                                            sum(len(d) for d in out.values()))
        elif result != "answered":
            self._observe(member.name, result, self._clock() - t0, 0)
        return out

    def _unusable(self, name: str, e: PeerConfigError) -> None:
        """This node's TLS files cannot be used: say so once, skip the peer a while."""
        self._warn_once(f"tls:{e}", "peers not asked: %s", e)
        self._failed(name, _COOLDOWN)

    def _rpc_failed(self, name: str, e: grpc.RpcError) -> str:
        """Book a failed call against the peer's breaker; the metrics' result name."""
        code = e.code() if hasattr(e, "code") else grpc.StatusCode.UNKNOWN
        if code is grpc.StatusCode.NOT_FOUND:
            self._answered(name)
        elif code is grpc.StatusCode.RESOURCE_EXHAUSTED:
            self._failed(name, _BUSY_COOLDOWN)
        else:
            if code is grpc.StatusCode.PERMISSION_DENIED:
                self._warn_once(f"denied:{name}", "peer %s refused this node: %s",
                                name, e.details() if hasattr(e, "details") else e)
            else:
                log.debug("peer %s: %s", name, code)
            self._failed(name, _COOLDOWN)
        return _RESULTS.get(code, "error")

    def _observe(self, name: str, result: str, seconds: float, nbytes: int) -> None:
        if self.metrics is not None:
            self.metrics.observe_peer(name, result, seconds, nbytes)

    def _slot(self, name: str, batch: bool = False) -> threading.BoundedSemaphore:
        """The peer's request slots: _PER_PEER for single blocks (a reader waits for
        them) and, apart, _BATCHES_PER_PEER for batches (read-ahead), so that a reader's
        block never queues behind the read-ahead's batches."""
        key = (name, batch)
        with self._lock:
            sem = self._inflight.get(key)
            if sem is None:
                if len(self._inflight) > 1024:  # members come and go: keep it bounded
                    self._inflight.clear()
                sem = self._inflight[key] = threading.BoundedSemaphore(
                    _BATCHES_PER_PEER if batch else _PER_PEER)
            return sem

    # -- breakers ------------------------------------------------------------------

    def _may_try(self, name: str) -> bool:
        with self._lock:
            st = self._states.get(name)
            if st is None or st.failures == 0:
                return True
            now = self._clock()
            if now < st.skip_until:
                return False
            st.skip_until = now + self.timeout  # one probe at a time
            return True

    def _failed(self, name: str, base: float) -> None:
        with self._lock:
            if name not in self._states and len(self._states) >= _MAX_STATES:
                del self._states[next(iter(self._states))]
            st = self._states.setdefault(name, _PeerState())
            st.failures += 1
            st.skip_until = self._clock() + min(_MAX_COOLDOWN, base * 2 ** (st.failures - 1))
            if st.failures == 1:
                log.info("peer %s skipped for %.1fs after a failure", name,
                         st.skip_until - self._clock())

    def _answered(self, name: str) -> None:
        with self._lock:
            st = self._states.get(name)
            if st is not None and st.failures:
                st.failures = 0
                st.skip_until = 0.0

    # -- channels --------------------------------------------------------------------

    def _channel(self, group: Group, member: Member) -> _Channel:
        """The peer's channel: one per peer, rebuilt when its endpoint or this node's
        certificate files change; channels of members that left are closed."""
        creds, creds_key = self._credentials(group)
        ck = (member.name, member.endpoint)
        stale = []
        with self._lock:
            live = {(m.name, m.endpoint) for m in group.members}
            for k in [k for k, v in self._channels.items() if k not in live
                      or (k == ck and v.creds_key != creds_key)]:
                stale.append(self._channels.pop(k))
            entry = self._channels.get(ck)
            if entry is None:
                opts = [("grpc.max_receive_message_length", MAX_MESSAGE),
                        ("grpc.enable_retries", 0),
                        ("grpc.initial_reconnect_backoff_ms", 500),
                        ("grpc.max_reconnect_backoff_ms", 5000), *HTTP2_FLOW_OPTIONS]
                if creds is None:
                    ch = grpc.insecure_channel(member.endpoint, options=opts)
                else:  # the server must present a certificate for the member's name
                    opts.append(("grpc.ssl_target_name_override", member.name))
                    ch = grpc.secure_channel(member.endpoint, creds, options=opts)
                entry = self._channels[ck] = _Channel(
                    creds_key, ch,
                    ch.unary_unary(_GET_BLOCK, request_serializer=_ask_one,
                                   _registered_method=True),
                    ch.unary_unary(_GET_BLOCKS, request_serializer=_ask_many,
                                   _registered_method=True),
                    ch.unary_stream(_READ_BLOCK, request_serializer=_ask_one,
                                    _registered_method=True))
        for old in stale:
            old.channel.close()
        return entry

    def _credentials(self, group: Group) -> tuple[grpc.ChannelCredentials | None, tuple | None]:
        """This node's client credentials, re-read when the files change (renewals)."""
        if group.tls is None:
            return None, None
        tls = resolve_tls(group.tls, self.watcher.path)
        now = self._clock()
        with self._lock:  # the files' stamps are looked at once a second, not per call
            if self._creds is not None and self._creds_key is not None \
                    and self._creds_key[0] == tls and now - self._creds_checked < 1.0:
                return self._creds, self._creds_key
        key = (tls, _stamp(tls))
        with self._lock:
            self._creds_checked = now
            if key == self._creds_key and self._creds is not None:
                return self._creds, key
        ca, cert, pkey = read_tls(tls)
        creds = grpc.ssl_channel_credentials(root_certificates=ca, private_key=pkey,
                                             certificate_chain=cert)
        with self._lock:
            self._creds, self._creds_key = creds, key
        return creds, key

    def _warn_once(self, key: str, msg: str, *args: object) -> None:
        with self._lock:
            if key in self._warned or len(self._warned) > 256:
                return
            self._warned.add(key)
        log.warning(msg, *args)


_ask_one = peer_pb2.GetBlockRequest.SerializeToString
_ask_many = peer_pb2.GetBlocksRequest.SerializeToString

_RESULTS = {
    grpc.StatusCode.NOT_FOUND: "miss",
    grpc.StatusCode.RESOURCE_EXHAUSTED: "busy",
    grpc.StatusCode.PERMISSION_DENIED: "denied",
    grpc.StatusCode.UNAUTHENTICATED: "denied",
    grpc.StatusCode.UNAVAILABLE: "unavailable",
    grpc.StatusCode.DEADLINE_EXCEEDED: "timeout",
}


def in_runs(items: Iterable[T], most: int, most_bytes: int,
            size: Callable[[T], int]) -> Iterator[list[T]]:
    """*items* in runs of at most *most* items and *most_bytes* bytes by *size* (at least one
    item each): what one GetBlocks call may carry (``MAX_BATCH``, ``MAX_BATCH_BYTES``), or a
    warm's batch of small files (prefetchd/warm.py)."""
    part: list[T] = []
    nbytes = 0
    for item in items:
        n = size(item)
        if part and (len(part) >= most or nbytes + n > most_bytes):
            yield part
            part, nbytes = [], 0
        part.append(item)
        nbytes += n
    if part:
        yield part


def _stamp(tls: TlsFiles) -> tuple:
    out = []
    for p in (tls.ca, tls.cert, tls.key):
        try:
            st = os.stat(p)
            out.append((st.st_mtime_ns, st.st_size))
        except OSError:
            out.append(None)
    return tuple(out)


def open_peer_client(cache_dir: str | os.PathLike, group_file: str | os.PathLike | None = None,
                     *, timeout: float = DEFAULT_TIMEOUT, insecure: bool = False,
                     metrics: Metrics | None = None) -> PeerClient:
    """A client over *group_file* (default ``<cache_dir>/group.json``; it may appear later)."""
    from fusecache.group import GROUP_FILE

    path = Path(group_file) if group_file is not None else Path(cache_dir) / GROUP_FILE
    return PeerClient(GroupWatcher(path), timeout=timeout, insecure=insecure, metrics=metrics)


def fetch_from_peers(peers: PeerClient | None, oid: ObjectId, idx: int, block_size: int,
                     budget: float | None = None, into: bytearray | None = None
                     ) -> bytes | None:
    """The block from the group, or None: the one call the warm path and the mount's
    reader make (*into* as in ``PeerClient.fetch``)."""
    if peers is None:
        return None
    try:
        return peers.fetch(oid, idx, block_size, budget, into)
    except Exception as e:  # noqa: BLE001 - peers are an optimisation; S3 stays the source
        log.debug("peer fetch of block %d of %s failed: %s", idx, oid.key, e)
        return None


def first_blocks_from_peers(peers: PeerClient, oids: list[ObjectId], block_size: int,
                            budget: float | None = None) -> dict[ObjectId, bytes]:
    """The first blocks the group gives, or {} when asking fails: the one call folder
    read-ahead and the warm's batches of small files make
    (``PeerClient.fetch_first_blocks``)."""
    try:
        return peers.fetch_first_blocks(oids, block_size, budget)
    except Exception as e:  # noqa: BLE001 - peers are an optimisation; S3 stays the source
        log.debug("batch peer fetch of %d blocks failed: %s", len(oids), e)
        return {}
