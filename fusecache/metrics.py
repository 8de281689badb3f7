"""Prometheus metrics of one mount, plus counters shared through the node cache.

Each process keeps its own registry (so tests can run several mounts in one
process). Counter deltas are also flushed periodically into the node cache's
totals, which is what ``fusecache stats`` prints for the whole node.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter as _Tally

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

log = logging.getLogger(__name__)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.hits = Counter("fusecache_cache_hits", "Block reads served by a cache tier",
                            ["tier"], registry=r)
        self.misses = Counter("fusecache_cache_misses", "Block reads a cache tier missed",
                              ["tier"], registry=r)
        self.s3_bytes = Counter("fusecache_s3_bytes", "Bytes received from S3", registry=r)
        self.s3_requests = Counter("fusecache_s3_requests", "S3 requests", ["op"],
                                   registry=r)
        self.s3_latency = Histogram(
            "fusecache_s3_request_seconds", "S3 request latency", ["op"], registry=r,
            buckets=(.002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30))
        self.s3_retries = Counter("fusecache_s3_retries",
                                  "S3 requests retried after a temporary failure", registry=r)
        self.s3_errors = Counter("fusecache_s3_errors", "S3 requests that failed for good",
                                 registry=r)
        self.evictions = Counter("fusecache_cache_evictions",
                                 "Blocks evicted from the disk tier (node-wide total seen)",
                                 registry=r)
        self.cache_bytes = Gauge("fusecache_cache_bytes", "Cache bytes used and limit",
                                 ["tier", "kind"], registry=r)
        self.s3_unreachable = Gauge(
            "fusecache_s3_unreachable",
            "1 while the S3 circuit breaker is open (S3 did not answer; requests fail fast)",
            registry=r)
        self.s3_outages = Counter("fusecache_s3_outages",
                                  "Times the S3 circuit breaker opened", registry=r)
        self.s3_fast_failures = Counter(
            "fusecache_s3_fast_failures",
            "S3 requests failed at once because the circuit breaker was open", registry=r)
        self.stale = Counter(
            "fusecache_stale_served",
            "Operations answered from cached metadata of any age because S3 could not be "
            "reached (stale-if-error), by kind: lookup, listing, attributes", ["kind"],
            registry=r)
        self.offline_refused = Counter(
            "fusecache_offline_refused",
            "Operations refused with EACCES while S3 was unreachable: this mount's "
            "credential had no recent authorisation record for its bucket/prefix",
            registry=r)
        self.readahead_bytes = Gauge("fusecache_readahead_inflight_bytes",
                                     "Bytes reserved by read-ahead", registry=r)
        self.streamed_reads = Counter(
            "fusecache_streamed_reads",
            "Reads answered from a block still arriving from S3 (the bytes they asked for "
            "had come): they did not wait for the whole block", registry=r)
        self.folder_readahead = Counter(
            "fusecache_folder_readahead_files",
            "Small files fetched ahead because their folder was being read file by file "
            "(dirahead.py), by result: fetched, used (opened after its fetch began), failed, "
            "held (already in the node cache: not fetched), paged_in (held, and asked into "
            "the page cache)",
            ["result"], registry=r)
        self.open_prefilled = Counter(
            "fusecache_open_prefilled_files",
            "Small cached files handed to the kernel's page cache as they were opened "
            "(--open-prefill): their reads cost no FUSE READ request", registry=r)
        # The cache group (peer_client.py asks, peer_server.py serves). Peers are the
        # group's members: the label's values are bounded by the group's size.
        self.peer_requests = Counter(
            "fusecache_peer_requests",
            "Block requests to peers, by peer and result: hit, miss (not cached there), "
            "busy, denied, unavailable, timeout, bad (failed verification), error",
            ["peer", "result"], registry=r)
        self.peer_latency = Histogram(
            "fusecache_peer_request_seconds", "Latency of block requests to a peer",
            ["peer"], registry=r,
            buckets=(.001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5))
        self.peer_bytes = Counter("fusecache_peer_bytes",
                                  "Block bytes received from peers", registry=r)
        self.peer_fallbacks = Counter(
            "fusecache_peer_fallbacks",
            "Blocks read from S3 after the group's peers were asked and could not serve them",
            registry=r)
        self.peer_bytes_served = Counter("fusecache_peer_bytes_served",
                                         "Block bytes served to peers", registry=r)
        self.peer_requests_served = Counter(
            "fusecache_peer_requests_served",
            "Block requests from peers, by result: ok, not_found, resource_exhausted, "
            "permission_denied, invalid_argument, error", ["result"], registry=r)
        self.peer_lane_served = Counter(
            "fusecache_peer_lane_requests_served",
            "Of those, the block requests that came over the block lane (HTTP/1.1) rather "
            "than gRPC", registry=r)
        self._pending = _Tally()
        self._pending_lock = threading.Lock()  # retried() runs in worker threads
        self._last_evictions: int | None = None

    def tier_counter(self, tier: str, hit: bool) -> _TierCounter:
        """A pre-bound hit or miss counter of one tier (no label lookup per read)."""
        return _TierCounter(self, (self.hits if hit else self.misses).labels(tier),
                            f"{tier}_{'hits' if hit else 'misses'}")

    def observe_s3(self, op: str, seconds: float, nbytes: int) -> None:
        """Called from worker threads; prometheus_client metrics are thread-safe."""
        self.s3_requests.labels(op).inc()
        self.s3_latency.labels(op).observe(seconds)
        if nbytes:
            self.s3_bytes.inc(nbytes)

    def observe_breaker(self, event: str) -> None:
        """From CircuitBreaker (any thread): open, close, fast_fail."""
        if event == "open":
            self.s3_unreachable.set(1)
            self.s3_outages.inc()
        elif event == "close":
            self.s3_unreachable.set(0)
        elif event == "fast_fail":
            self.s3_fast_failures.inc()

    def observe_peer(self, peer: str, result: str, seconds: float, nbytes: int) -> None:
        """One block request to a peer (from a worker thread)."""
        self.peer_requests.labels(peer, result).inc()
        self.peer_latency.labels(peer).observe(seconds)
        hit = result == "hit"
        self._tally_peer(int(hit), int(not hit), nbytes if hit else 0)

    def observe_peer_batch(self, peer: str, seconds: float, hits: int, misses: int,
                           nbytes: int) -> None:
        """One GetBlocks call answered: *hits* blocks (*nbytes*) came, *misses* did not."""
        self.peer_latency.labels(peer).observe(seconds)
        if hits:
            self.peer_requests.labels(peer, "hit").inc(hits)
        if misses:
            self.peer_requests.labels(peer, "miss").inc(misses)
        self._tally_peer(hits, misses, nbytes)

    def _tally_peer(self, hits: int, misses: int, nbytes: int) -> None:
        """Blocks that came from peers (*nbytes*) and requests that brought none."""
        with self._pending_lock:
            if nbytes:
                self.peer_bytes.inc(nbytes)
            self._pending["peer_hits"] += hits
            self._pending["peer_misses"] += misses
            self._pending["peer_bytes"] += nbytes

    def observe_peer_fallback(self, blocks: int = 1) -> None:
        """Peers were asked for *blocks* blocks and none served them: they come from S3."""
        self.peer_fallbacks.inc(blocks)
        with self._pending_lock:
            self._pending["peer_fallbacks"] += blocks

    def observe_served(self, nbytes: int, blocks: int = 1) -> None:
        """The peer server sent *blocks* blocks (from a gRPC worker thread)."""
        self.peer_bytes_served.inc(nbytes)
        with self._pending_lock:
            self._pending["peer_blocks_served"] += blocks
            self._pending["peer_bytes_served"] += nbytes

    def stale_served(self, kind: str) -> None:
        self.stale.labels(kind).inc()

    def retried(self) -> None:
        """One S3 request retried (called by the store from a worker thread)."""
        self.s3_retries.inc()
        with self._pending_lock:
            self._pending["s3_retries"] += 1

    def take_pending(self) -> dict[str, int]:
        """Counter deltas since the last call (for the node cache's shared totals)."""
        with self._pending_lock:
            out, self._pending = dict(self._pending), _Tally()
        return out

    def has_pending(self) -> bool:
        return bool(self._pending)

    def add_pending(self, name: str, value: int) -> None:
        self._pending[name] += value

    def set_node_totals(self, used: int, limit: int, evictions: int) -> None:
        self.cache_bytes.labels("disk", "used").set(used)
        self.cache_bytes.labels("disk", "limit").set(limit)
        if self._last_evictions is not None and evictions > self._last_evictions:
            self.evictions.inc(evictions - self._last_evictions)
        self._last_evictions = evictions

    def serve(self, port: int, addr: str = "127.0.0.1") -> None:
        start_http_server(port, addr=addr, registry=self.registry)
        log.info("metrics on http://%s:%d/metrics", addr, port)


class _TierCounter:
    __slots__ = ("_child", "_metrics", "_name")

    def __init__(self, metrics: Metrics, child, name: str) -> None:
        self._metrics = metrics
        self._child = child
        self._name = name

    def inc(self) -> None:
        self._child.inc()
        self._metrics._pending[self._name] += 1
