"""Warming: list each dataset prefix, fetch what the node cache lacks, pin it, store the listing.

Built only on the core's public API (`fusecache.NodeCache`, `ListingCache`,
`S3Store`, `fetch_object`): prefetchd never talks to LMDB or boto3 itself.
Datasets are warmed in plan order (earlier stages first); an object named by
several datasets is fetched once. A shard pattern (`s3://b/train-{000..999}.tar`,
`s3://b/x/*.png`) lists the literal prefix before its first wildcard and keeps the
keys it matches (`prefetchd.pipeline._shard`, never expanded). `fetch_object` only
fetches missing blocks, so a second run transfers nothing and a killed run resumes
where it stopped. Fetches
run in a thread pool fed through a bounded window (memory stays bounded whatever
the dataset size). When the cache is full of pinned data the warmer stops
fetching and reports what it skipped; it never unpins anything it did not pin.
Each block is asked of the cache group's peers first (`fusecache.peer_client`, through
`<cache_dir>/group.json` once it exists) and read from S3 only when no peer serves it.

With a ``group`` (``prefetchd warm --group-striping``) only the blocks this node owns in
the cache group (``fusecache.group``) are fetched and pinned; the others are reported as
``others_bytes``.

Which datasets were warmed, when, and with which pin owner is prefetchd's own
record, kept as JSON in `<cache_dir>/prefetchd/warmed.json` (the core has no
place for it).
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import fusecache
from fusecache import errors
from fusecache.config import valid_bucket
from fusecache.group import Group
from fusecache.nodecache import block_key
from fusecache.offline_auth import record_authorised
from fusecache.warm import CacheFull
from prefetchd import _errors, _jsonfile
from prefetchd.pipeline import _shard

if TYPE_CHECKING:
    from fusecache.peer_client import PeerClient

log = logging.getLogger(__name__)

PIN_OWNER_PREFIX = "prefetchd:"

# seconds between additions of a warm's S3 traffic to the node cache's counters
COUNT_EVERY = 1.0
# seconds a stopped warm waits for the GETs under way before it leaves them behind
STOP_GRACE = 1.0

# Small files asked of the cache group per GetBlocks call, and such calls at once (a
# peer takes two batches of a client at a time, fusecache/peer_client.py): at most
# _GROUP_BATCH_JOBS * _GROUP_BATCH_BYTES of blocks held (twice that while one is copied).
_GROUP_BATCH = 64
_GROUP_BATCH_BYTES = 8 * 1024 * 1024
_GROUP_BATCH_JOBS = 3


class WarmError(_errors.UsageError):
    """Bad target (URI, endpoint, bucket): a one-line message, exit code 2."""


def parse_s3_uri(uri: str) -> tuple[str, str]:
    if re.match(r"s3a?://arn:", uri, re.IGNORECASE):
        raise WarmError(f"{uri}: an access point ARN cannot be warmed; give the access "
                        "point's alias (NAME-...-s3alias) as the bucket")
    for scheme in ("s3://", "s3a://"):
        if uri.startswith(scheme):
            rest = uri[len(scheme) :]
            bucket, _, prefix = rest.partition("/")
            if len(bucket) < 3:
                break
            if not valid_bucket(bucket):  # (boto3 then failed with its own words, exit 1)
                raise WarmError(f"{uri}: {bucket!r} is not an S3 bucket name (3 to 255 of "
                                "a-z 0-9 . - _, a letter or digit first and last)")
            return bucket, prefix.lstrip("/")
    raise WarmError(f"{uri}: not an s3://BUCKET[/PREFIX] URI")


def normal_uri(uri: str) -> str:
    """The one spelling of a location in commands and records: ``s3://BUCKET/PREFIX``.

    ``s3a://`` becomes ``s3://``, a bucket gets its slash (``s3://b/``). A prefix keeps
    its trailing slash or its absence: ``s3://b/ds/train`` may be an object, and
    ``warm`` resolves it by listing (a folder is recorded as ``s3://b/ds/train/``);
    ``status`` and ``unpin`` find a record under either spelling (:func:`find_record`).
    """
    bucket, prefix = parse_s3_uri(uri)
    return f"s3://{bucket}/{prefix}"


def find_record(records: dict[str, Any], uri: str) -> str | None:
    """The record key *uri* names: itself, or its folder form (trailing slash)."""
    u = normal_uri(uri)
    for cand in (u, u if u.endswith("/") else u + "/", u.rstrip("/")):
        if cand in records:
            return cand
    return None


@dataclass
class DatasetResult:
    uri: str
    objects: int = 0
    bytes: int = 0
    fetched_objects: int = 0
    transferred: int = 0
    skipped: int = 0
    skipped_bytes: int = 0
    failed: list[str] = field(default_factory=list)
    listing_dirs: int = 0
    interrupted: bool = False
    # --group-striping: bytes of the blocks other members own (not fetched here)
    others_bytes: int = 0


@dataclass
class WarmStats:
    """Progress shared by the fetch threads (guarded by a lock)."""

    total_objects: int = 0
    total_bytes: int = 0
    done_objects: int = 0
    done_bytes: int = 0
    transferred: int = 0
    started: float = field(default_factory=time.monotonic)


class Interrupted(Exception):
    """The warm was asked to stop (Ctrl-C, SIGTERM): raised out of a fetch to end it."""


class _Throttle:
    """A shared byte budget per second (token bucket); None means unlimited.

    The wait is on *stop*, so a stop ends it at once whatever the rate.
    """

    def __init__(self, rate: float | None, stop: threading.Event) -> None:
        self.rate = rate
        self.stop = stop
        self._lock = threading.Lock()
        self._next = time.monotonic()

    def spend(self, n: int) -> None:
        if not self.rate or n <= 0:
            return
        with self._lock:
            now = time.monotonic()
            self._next = max(self._next, now) + n / self.rate
            wait = self._next - now - 1.0  # allow a one-second burst
        if wait > 0:
            self.stop.wait(wait)


class StateFile:
    """prefetchd's record of warmed datasets, written atomically."""

    def __init__(self, cache_dir: str) -> None:
        self.dir = os.path.join(cache_dir, "prefetchd")
        self.path = os.path.join(self.dir, "warmed.json")

    def load(self) -> dict[str, Any]:
        return _jsonfile.load_dict(self.path)

    def update(self, fn: Callable[[dict[str, Any]], None]) -> None:
        d = self.load()
        fn(d)
        _jsonfile.save_dict(self.path, d)


def _listing_prefix(prefix: str) -> str | None:
    """The directory a prefix names, or None for a single key ('a/b.json') or a shard pattern."""
    if _shard.is_pattern(prefix):
        return None
    if prefix == "" or prefix.endswith("/"):
        return prefix
    return None


class Warmer:
    """Warm a list of s3:// URIs into one node cache."""

    def __init__(
        self,
        cache_dir: str,
        endpoint_url: str | None = None,
        concurrency: int = 16,
        bandwidth: float | None = None,
        pin_ttl: float | None = None,
        dry_run: bool = False,
        progress: Callable[[WarmStats], None] | None = None,
        stop: threading.Event | None = None,
        pin_owner: str | None = None,
        region: str | None = None,
        credentials: Mapping[str, str] | None = None,
        peers: PeerClient | None = None,
        group: Group | None = None,
    ) -> None:
        self.cache_dir = cache_dir
        # The cache group's peers are asked for each block before S3 (fusecache/peer_client.py);
        # by default through <cache_dir>/group.json, used once it exists (mutual TLS only).
        # A warm has no reader waiting: it gives a peer 5 s (not a mount's 0.75 s) before S3.
        if peers is None:  # imported here: `status` and `unpin` need no gRPC
            from fusecache.metrics import Metrics
            from fusecache.peer_client import open_peer_client

            peers = open_peer_client(cache_dir, timeout=5.0, metrics=Metrics())
        self.peers = peers
        # --group-striping: fetch and pin only the blocks this node owns in the cache group
        # (fusecache.group: weighted rendezvous per block); None: every block.
        self.group = group
        # The Kubernetes agent passes a volume's region and Secret (prefetchd.k8s.credentials);
        # None: boto3's standard chain. Never logged.
        self.region, self._credentials = region, credentials
        # None: one owner per dataset (PIN_OWNER_PREFIX + URI); the Kubernetes agent passes
        # an owner per workflow step so a release unpins exactly its own pins.
        self.pin_owner = pin_owner
        self.endpoint_url = endpoint_url
        self.concurrency = max(1, concurrency)
        self.stop = stop or threading.Event()
        self.throttle = _Throttle(bandwidth, self.stop)
        self.pin_ttl = pin_ttl
        self.dry_run = dry_run
        self.progress = progress
        self.gets = 0  # ranged GETs made (node cache counters: `fusecache stats`)
        self.stats = WarmStats()
        self._lock = threading.Lock()
        self._stores: dict[str, fusecache.S3Store] = {}
        self._retries = 0  # S3 requests retried, added to the node cache's s3_retries
        self._counted_bytes = self._counted_gets = 0  # added to its counters so far
        self._stop_seen: float | None = None  # when a fetch first saw the stop
        # pools left with GETs still hanging after a stop (left_behind)
        self._left_pools: list[cf.ThreadPoolExecutor] = []
        # seconds spent: connect (clients, bucket checks), list, fetch (GETs and cache
        # writes), total (all of warm()); reported by `warm --json`, used by the benchmark
        self.timings: dict[str, float] = {"connect": 0.0, "list": 0.0, "fetch": 0.0}

    def _store(self, bucket: str) -> fusecache.S3Store:
        s = self._stores.get(bucket)
        if s is None:
            t0 = time.monotonic()
            s = fusecache.S3Store(
                bucket, endpoint_url=self.endpoint_url, max_connections=self.concurrency + 4,
                region=self.region, credentials=self._credentials, on_retry=self._retried,
            )
            try:
                s.check_bucket()
            except errors.BucketNotFound:
                raise WarmError(f"s3://{bucket}: bucket does not exist") from None
            except errors.AccessDenied as e:
                raise WarmError(f"s3://{bucket}: access denied ({e})") from None
            except errors.StoreError as e:
                raise WarmError(
                    f"s3://{bucket}: endpoint {s.endpoint_url} unreachable ({e})"
                ) from None
            self._stores[bucket] = s
            self.timings["connect"] += time.monotonic() - t0
        return s

    def list_targets(
        self, uris: list[str]
    ) -> list[tuple[str, fusecache.S3Store, list[fusecache.ObjectInfo]]]:
        """Check every bucket and list every prefix before touching the cache."""
        out = []
        for uri in uris:
            bucket, prefix = parse_s3_uri(uri)
            uri = f"s3://{bucket}/{prefix}"
            store = self._store(bucket)
            # a shard pattern (train-{000000..001023}.tar, x/*.png): list the literal prefix
            # before the first wildcard and keep the keys it matches, never expanding it
            try:
                match = _shard.compile_pattern(prefix) if _shard.is_pattern(prefix) else None
            except ValueError as e:
                raise WarmError(f"{uri}: {e}") from None
            t0 = time.monotonic()
            try:
                objs = [o for o in store.list_all(_shard.prefix(prefix) if match else prefix)
                        if not o.key.endswith("/") and (match is None or match(o.key))]
            except errors.StoreError as e:
                raise WarmError(f"{uri}: listing failed: {e}") from None
            self.timings["list"] += time.monotonic() - t0
            if match is None and _listing_prefix(prefix) is None:
                exact = [o for o in objs if o.key == prefix]
                if exact:  # a single key: exactly that object, not its namesakes
                    objs = exact
                else:  # 's3://b/dir' names the directory 'dir/', as a mount would
                    objs = [o for o in objs if o.key.startswith(prefix + "/")]
                    uri = f"s3://{bucket}/{prefix}/"
            out.append((uri, store, objs))
        return out

    def warm(self, uris: list[str]) -> list[DatasetResult]:
        t0 = time.monotonic()
        try:
            return self._warm(uris)
        finally:
            self.timings["total"] = time.monotonic() - t0

    def _warm(self, uris: list[str]) -> list[DatasetResult]:
        uris = list(dict.fromkeys(normal_uri(u) for u in uris))
        targets = self.list_targets(uris)
        # two spellings of one folder ('s3://b/ds', 's3://b/ds/') are one dataset
        targets = list({uri: (uri, st, objs) for uri, st, objs in targets}.values())
        seen: set[tuple[str, str]] = set()
        plan: list[tuple[DatasetResult, fusecache.S3Store, list[fusecache.ObjectInfo]]] = []
        listed: dict[str, set[tuple[str, str]]] = {}  # uri -> (key, etag) of what it holds
        for uri, store, objs in targets:
            res = DatasetResult(uri, objects=len(objs), bytes=sum(o.size for o in objs))
            listed[uri] = {(o.key, o.etag) for o in objs}
            mine = []
            for o in objs:
                if (store.bucket, o.key) not in seen:
                    seen.add((store.bucket, o.key))
                    mine.append(o)
            plan.append((res, store, mine))
            self.stats.total_objects += len(mine)
            self.stats.total_bytes += sum(o.size for o in mine)
        if self.dry_run:
            return [r for r, _, _ in plan]
        cache = fusecache.NodeCache.open(self.cache_dir)
        counting = threading.Event()  # set: the warm is over

        def count_while_warming() -> None:
            while not counting.wait(COUNT_EVERY):
                self._count_traffic(cache)

        counter = threading.Thread(target=count_while_warming, name="prefetchd-counts",
                                   daemon=True)
        counter.start()
        try:
            state = StateFile(self.cache_dir)
            full = False
            room = _Room(cache, self.stats.total_bytes)
            for res, store, objs in plan:
                if self.stop.is_set():
                    res.interrupted = True
                    res.skipped, res.skipped_bytes = len(objs), sum(o.size for o in objs)
                    continue  # not started: nothing pinned, nothing to record
                bucket, prefix = parse_s3_uri(res.uri)
                lp = _listing_prefix(prefix)
                if lp is not None:
                    res.listing_dirs = fusecache.ListingCache(cache.env).store_recursive(
                        bucket, lp, objs
                    )
                if not res.objects:
                    # nothing there (a misspelled prefix?): nothing pinned, no warm to record
                    # (blind job round 36: `status` showed it warmed, `unpin` kept it)
                    record_authorised(cache, store, bucket, prefix)
                    continue
                try:  # read one object first: a credential may list what it may not read,
                    # and would pin (and later serve offline) another tenant's cached bytes
                    store.head(objs[0].key)
                except errors.AccessDenied as e:
                    raise WarmError(f"{res.uri}: access denied reading its objects ({e})") \
                        from None
                except errors.StoreError:
                    pass  # (gone since the listing, or S3 away: the fetch says so)
                owner = self.pin_owner or PIN_OWNER_PREFIX + res.uri
                started = time.time()
                # recorded before the first pin, as partial: a warm killed half way
                # leaves pins that `status` shows and that expire with --pin-ttl
                self._record(state, res, owner, started, partial=True)
                if not full:
                    t0 = time.monotonic()
                    try:
                        full = self._fetch_all(store, cache, objs, owner, res, room)
                    finally:
                        self.timings["fetch"] += time.monotonic() - t0
                else:
                    res.skipped, res.skipped_bytes = len(objs), sum(o.size for o in objs)
                res.interrupted = self.stop.is_set() and res.skipped > 0
                # skipped (interrupted, or the cache full of pinned data) or failed objects:
                # partial, and `status` says so
                self._record(state, res, owner, started,
                             partial=res.skipped > 0 or bool(res.failed))
                if not (res.skipped or res.failed):
                    _unpin_superseded(cache, res.uri, owner, listed[res.uri])
                # A mount with this credential may serve it while S3 is down.
                record_authorised(cache, store, bucket, prefix)
            cache.flush_touches()
        finally:
            counting.set()
            counter.join()
            self._count_traffic(cache)
            if self.left_behind:  # closed once their threads are done (a long-lived agent)
                pools = self._left_pools

                def close_when_done() -> None:
                    for p in pools:
                        p.shutdown(wait=True)
                    cache.close()

                threading.Thread(target=close_when_done, name="prefetchd-left-behind",
                                 daemon=True).start()
            else:
                cache.close()
        return [r for r, _, _ in plan]

    def _count_traffic(self, cache: fusecache.NodeCache) -> None:
        """Add what came from S3 (and from peers) since the last call to the node cache's
        counters, for `fusecache stats` (scope: prefetchd). Called every COUNT_EVERY
        seconds while the warm runs, and at its end: a blind test of the mount found a
        killed warm's 40 MiB never counted (they were added only at the end)."""
        with self._lock:
            moved, gets = self.stats.transferred, self.gets
            retries, self._retries = self._retries, 0
            moved_now, self._counted_bytes = moved - self._counted_bytes, moved
            gets_now, self._counted_gets = gets - self._counted_gets, gets
        peer = self.peers.metrics.take_pending() if self.peers.metrics else {}
        try:  # (peers' bytes of blocks a full cache did not take are not in `moved`)
            cache.add_counters({"s3_bytes": max(0, moved_now - peer.get("peer_bytes", 0)),
                                "s3_gets": gets_now, **peer}, scope="prefetchd")
            if retries:
                cache.add_counters({"s3_retries": retries})
        except Exception as e:  # noqa: BLE001 - bookkeeping must not fail a warm
            log.warning("could not update the node cache's counters: %s", e)

    def _retried(self) -> None:
        """Called by the store (from fetch threads) before each retried request."""
        with self._lock:
            self._retries += 1

    def _record(self, state: StateFile, res: DatasetResult, owner: str, when: float,
                partial: bool) -> None:
        def upd(d: dict[str, Any]) -> None:
            d[res.uri] = {
                "objects": res.objects,
                "bytes": res.bytes,
                "warmed_at": when,
                "pin_owner": owner,
                "pinned": True,
                "pin_expires_at": (when + self.pin_ttl) if self.pin_ttl else None,
                "partial": partial,
                "skipped_objects": res.skipped,
                "failed_objects": len(res.failed),
            }

        state.update(upd)

    def _fetch_all(
        self,
        store: fusecache.S3Store,
        cache: fusecache.NodeCache,
        objs: list[fusecache.ObjectInfo],
        owner: str,
        res: DatasetResult,
        room: _Room,
    ) -> bool:
        """Fetch objects through a bounded window; True when the cache turned out full
        (*room* had none left for an object, or the cache refused a block).

        With a cache group to ask, objects of one block are first asked of it in batches
        (``_fetch_small_from_group``: a GetBlocks call per batch, not a call per file);
        what it did not give, and every other object, goes through the window below.
        Objects of one block are fetched one per worker; an object of several blocks
        is fetched with up to ``concurrency`` parallel ranged GETs of its blocks
        (``fetch_object(parallel=...)``), so one large object moves at link speed
        instead of one block at a time. ``_BoundedStore`` keeps the GETs in flight,
        all objects together, at ``concurrency``.
        """
        full = threading.Event()
        window = threading.BoundedSemaphore(self.concurrency * 2)
        bounded = _BoundedStore(store, self.concurrency, self)
        bs = cache.block_size
        stats, lock = self.stats, self._lock
        peers = self.peers if self.peers is not None and self.peers.active() else None

        def on_block(n: int) -> None:
            with lock:
                stats.transferred += n
                stats.done_bytes += n
            if self.progress is not None:
                self.progress(stats)
            if self.stop.is_set():
                raise Interrupted()

        if peers is not None:
            objs = self._fetch_small_from_group(peers, store.bucket, cache, objs, owner, res,
                                                full)

        def one(o: fusecache.ObjectInfo) -> None:
            try:
                if full.is_set() or self.stop.is_set():
                    with lock:
                        res.skipped += 1
                        res.skipped_bytes += o.size
                    return
                blocks = (o.size + bs - 1) // bs
                moved: list[int] = []
                want, others = None, 0
                if self.group is not None:
                    oid = fusecache.ObjectId(store.bucket, o.key, o.etag, o.size)
                    group = self.group
                    owned = {i for i in range(blocks) if group.owns(block_key(oid, i, bs))}
                    others = sum(oid.block_span(i, bs)[1] - oid.block_span(i, bs)[0]
                                 for i in range(blocks) if i not in owned)
                    with lock:
                        res.others_bytes += others
                        stats.done_bytes += others
                    if not owned:
                        with lock:
                            stats.done_objects += 1
                        return
                    want = owned.__contains__
                if not room.take(fusecache.ObjectId(store.bucket, o.key, o.etag, o.size),
                                 o.size - others):
                    full.set()
                    with lock:
                        res.skipped += 1
                        res.skipped_bytes += o.size
                    return

                def on_block_of(n: int) -> None:
                    moved.append(n)
                    on_block(n)

                try:
                    n = fusecache.fetch_object(
                        bounded,
                        cache,
                        o,
                        pin_owner=owner,
                        pin_ttl=self.pin_ttl,
                        parallel=min(self.concurrency, blocks),
                        on_block=on_block_of,
                        want=want,
                        # small ones: the group was asked above, in batches
                        peers=self.peers if blocks > 1 else None,
                    )
                except Interrupted:
                    with lock:  # stored blocks stay (and pinned): a later warm resumes
                        res.transferred += sum(moved)
                        res.skipped += 1
                        res.skipped_bytes += o.size
                    return
                except CacheFull:
                    full.set()
                    oid = fusecache.ObjectId(store.bucket, o.key, o.etag, o.size)
                    cache.unpin_object(oid, owner)
                    with lock:  # (what it moved before that stays, unpinned: counted)
                        res.transferred += sum(moved)
                        res.skipped += 1
                        res.skipped_bytes += o.size
                    return
                except errors.StoreError as e:
                    log.warning("s3://%s/%s: %s", store.bucket, o.key, e)
                    with lock:
                        res.failed.append(o.key)
                    return
                with lock:
                    res.transferred += n
                    res.fetched_objects += 1 if n else 0
                    stats.done_objects += 1
                    # blocks that were cached already
                    stats.done_bytes += o.size - n - (others if want is not None else 0)
                if self.progress is not None and not n:
                    self.progress(stats)
            finally:
                window.release()

        pool = cf.ThreadPoolExecutor(self.concurrency, thread_name_prefix="prefetchd-fetch")
        futs: dict[cf.Future, fusecache.ObjectInfo] = {}
        left_behind = False
        try:
            for i, o in enumerate(objs):
                while not window.acquire(timeout=0.25):
                    if self._stopped_long_ago():
                        break
                else:
                    futs[pool.submit(one, o)] = o
                    if len(futs) > 4 * self.concurrency:
                        for f in [f for f in futs if f.done()]:
                            del futs[f]
                            f.result()  # an unexpected error ends the warm, as below
                    continue
                with lock:  # (the window full of hanging GETs: the rest never started)
                    res.skipped += len(objs) - i
                    res.skipped_bytes += sum(x.size for x in objs[i:])
                break
            while futs:
                done, _ = cf.wait(futs, timeout=0.25)
                for f in done:
                    del futs[f]
                    f.result()
                if futs and self._stopped_long_ago():
                    # GETs that S3 leaves hanging are not waited for (up to the request's
                    # deadline: a blind test of the mount, SIGTERM took 56 s): their objects
                    # are counted skipped, and their threads end on their own
                    left_behind = True
                    with lock:
                        res.skipped += len(futs)
                        res.skipped_bytes += sum(o.size for o in futs.values())
                    break
        finally:
            pool.shutdown(wait=not left_behind, cancel_futures=left_behind)
            if left_behind:
                self._left_pools.append(pool)
        return full.is_set()

    @property
    def left_behind(self) -> bool:
        """Stopped with GETs still hanging: their threads were not waited for (they end on
        their own, at the request's deadline), and the cache they may still write to is
        closed after them; `prefetchd warm` then exits without joining them."""
        return bool(self._left_pools)

    def _stopped_long_ago(self) -> bool:
        """Stopped (a signal, a release) more than STOP_GRACE seconds ago."""
        if not self.stop.is_set():
            return False
        if self._stop_seen is None:
            self._stop_seen = time.monotonic()
        return time.monotonic() - self._stop_seen > STOP_GRACE

    def _fetch_small_from_group(
        self,
        peers: PeerClient,
        bucket: str,
        cache: fusecache.NodeCache,
        objs: list[fusecache.ObjectInfo],
        owner: str,
        res: DatasetResult,
        full: threading.Event,
    ) -> list[fusecache.ObjectInfo]:
        """Ask the cache group for the objects of one block, up to ``_GROUP_BATCH`` of them
        (``_GROUP_BATCH_BYTES``) per call, ``_GROUP_BATCH_JOBS`` calls at once; return the
        objects left for ``_fetch_all``'s window: the larger ones and those the group did
        not give. With --group-striping only the objects whose block this node owns are
        asked for; the others are counted as ``others_bytes``, as ``_fetch_all`` does.

        Why apart: through ``fetch_object`` each small file is a call of its own to a peer,
        whose fixed cost (about 0.5 ms of the caller's CPU on the 2-core bench machine) is
        most of the transfer of a 100 KiB file.
        """
        bs = cache.block_size
        stats, lock = self.stats, self._lock
        rest: list[fusecache.ObjectInfo] = []
        small: list[fusecache.ObjectInfo] = []
        for o in objs:
            if not 0 < o.size <= bs:
                rest.append(o)
            elif self.group is not None and not self.group.owns(
                    block_key(fusecache.ObjectId(bucket, o.key, o.etag, o.size), 0, bs)):
                with lock:
                    res.others_bytes += o.size
                    stats.done_bytes += o.size
                    stats.done_objects += 1
            else:
                small.append(o)

        def on_block(n: int) -> None:
            with lock:
                stats.transferred += n
                stats.done_bytes += n

        def batch(part: list[fusecache.ObjectInfo]) -> list[fusecache.ObjectInfo]:
            """Returns the objects of *part* the group did not give or that did not fit."""
            if full.is_set() or self.stop.is_set():
                return part  # the window counts them as skipped
            sizes, no_room = fusecache.fetch_small_from_peers(
                peers, cache, bucket, part, owner, self.pin_ttl, on_block=on_block)
            if no_room:
                full.set()  # those that did not fit go back, and the window skips them
            left = []
            for o, n in zip(part, sizes, strict=True):
                if n is None:
                    left.append(o)
                    continue
                with lock:
                    res.transferred += n
                    res.fetched_objects += 1 if n else 0
                    stats.done_objects += 1
                    stats.done_bytes += o.size - n  # cached already
            if self.progress is not None:
                self.progress(stats)
            return left

        from fusecache.peer_client import in_runs  # gRPC only with a group

        parts = in_runs(small, _GROUP_BATCH, _GROUP_BATCH_BYTES, lambda o: o.size)
        with cf.ThreadPoolExecutor(_GROUP_BATCH_JOBS, thread_name_prefix="prefetchd-group") as pool:
            for left in pool.map(batch, parts):
                rest.extend(left)
        return rest



class _Room:
    """What the node cache can still take under pins, taken object by object before its
    GETs, so a warm that does not fit stops asking S3 for what it could not keep: a blind
    test of the mount warmed 144 MiB into 56 MiB of room; S3 sent all 144, the cache kept
    37. When the plan fits beside what the cache holds, nothing is counted; otherwise one
    pass over the cache's blocks (``NodeCache.pinned_bytes``) gives the room, and the
    object that reaches its end gets what is left (its first blocks are worth having).
    Other writers' pins are not seen: the cache's own refusal (CacheFull) still stops a
    fetch."""

    def __init__(self, cache: fusecache.NodeCache, planned_bytes: int) -> None:
        self._cache = cache
        self._lock = threading.Lock()
        self.tight = cache.used_bytes() + planned_bytes > cache.fill_limit
        self._left = cache.fill_limit - cache.pinned_bytes() if self.tight else 0

    def take(self, oid: fusecache.ObjectId, nbytes: int) -> bool:
        """Room for *nbytes* more of *oid* under pins (less what it holds pinned already);
        False: none left, so it is not fetched."""
        if not self.tight:
            return True
        if self._cache.is_pinned(oid):  # (its blocks held are counted pinned already)
            held = oid.block_count(self._cache.block_size) - \
                len(self._cache.missing_blocks(oid))
            nbytes = max(0, nbytes - held * self._cache.block_size)
        with self._lock:
            if self._left <= 0 and nbytes > 0:
                return False
            self._left -= nbytes
            return True


class _BoundedStore:
    """The store as ``fetch_object`` sees it, with at most *limit* GETs in flight.

    Several objects may each run parallel block fetches; the bound keeps the total
    at ``--concurrency`` (and within the store's connection pool).
    """

    def __init__(self, store: fusecache.S3Store, limit: int, warmer: Warmer) -> None:
        self._store = store
        self.bucket = store.bucket
        self._slots = threading.BoundedSemaphore(limit)
        self._warmer = warmer

    def get_range(self, key: str, start: int, end: int, etag: str | None = None,
                  into: bytearray | None = None,
                  progress: Callable[[int], None] | None = None) -> bytes:
        # --bandwidth-limit is spent before the GET: at a low rate the bytes in flight stay
        # about one second's worth (a stop then ends the warm at once), not every
        # worker's block
        self._warmer.throttle.spend(end - start)
        if self._warmer.stop.is_set():
            raise Interrupted()
        with self._slots:
            data = self._store.get_range(key, start, end, etag, into, progress)
        with self._warmer._lock:
            self._warmer.gets += 1
        return data


def open_existing_cache(cache_dir: str) -> fusecache.NodeCache:
    """The node cache in *cache_dir*; WarmError (exit 2) when there is none, so a mistyped
    --cache-dir to ``status``/``unpin`` is named instead of creating an empty cache."""
    if not os.path.isdir(os.path.join(cache_dir, "cache.lmdb")):
        raise WarmError(f"--cache-dir: no node cache in {cache_dir}")
    return fusecache.NodeCache.open(cache_dir)


def status(cache_dir: str) -> list[dict[str, Any]]:
    """Per warmed dataset: objects/bytes cached out of total, pinned or not, when warmed,
    whether the warm was interrupted (partial), when its pins expire."""
    cache = open_existing_cache(cache_dir)
    try:
        state = StateFile(cache_dir).load()
        if not state:
            return []
        now = time.time()
        per: dict[str, dict[str, int]] = {}
        for u in state:  # (a pattern's matches; one version of each key)
            objs, held = cached_share(cache, u)
            per[u] = {"cached_objects": objs, "cached_bytes": held}
        agent = _agent_pins(cache_dir, now)
        # (every kind of work the agent warms for pins under its own owner: a Job's too, which
        # status printed raw beside its friendly name; a blind test of the agent)
        agent_owners = set(_jsonfile.load_dict(_pin_records_path(cache_dir)))
        out = []
        for u, rec in state.items():
            exp = rec.get("pin_expires_at")
            pinned = bool(rec.get("pinned")) and (exp is None or exp > now)
            by = agent.get(u, [])
            own = rec.get("pin_owner")
            if pinned and own and not own.startswith(_AGENT_OWNERS) \
                    and own not in agent_owners:
                by = [own.removeprefix(PIN_OWNER_PREFIX) or "prefetchd warm", *by]
            out.append(
                {
                    "uri": u,
                    "objects": rec.get("objects", 0),
                    "bytes": rec.get("bytes", 0),
                    **per[u],
                    "pinned": bool(by) or (pinned and not own),
                    "pinned_by": by,
                    "pin_expires_at": exp,
                    "warmed_at": rec.get("warmed_at"),
                    "partial": bool(rec.get("partial")),
                }
            )
        return out
    finally:
        cache.close()


_AGENT_OWNERS = (PIN_OWNER_PREFIX + "workflow/", PIN_OWNER_PREFIX + "pod/")


def _pin_records_path(cache_dir: str) -> str:
    return os.path.join(cache_dir, "prefetchd", "k8s-pins.json")


def _agent_pins(cache_dir: str, now: float) -> dict[str, list[str]]:
    """Warmed URI -> who pins it, from the Kubernetes agent's live pin records.

    ``workflow ml/train-1 step train`` (released by the workflow's DAG) or ``pod ml/p`` (TTL);
    the records are the agent's (prefetchd/k8s/worker.py ``PinRecords``).
    """
    path = _pin_records_path(cache_dir)
    out: dict[str, list[str]] = {}
    for rec in _jsonfile.load_dict(path).values():
        if not isinstance(rec, dict) or (rec.get("expires_at") or now + 1) <= now:
            continue
        who = f"{rec.get('source')}" + (f" step {rec['step']}"
                                        if str(rec.get("source", "")).startswith("workflow ")
                                        else "")
        out.setdefault(rec.get("uri") or rec.get("dataset") or "", []).append(who)
    return {u: sorted(set(w)) for u, w in out.items()}


def cached_objects(cache: fusecache.NodeCache, uri: str) -> Iterator[fusecache.ObjectId]:
    """The cached objects the warm of *uri* chose (a record's ``uri``): a pattern's matches
    (``s3://b/x/*``, ``train-{000..009}.tar``), a folder's objects, or the one key, not its
    namesakes. Unpinning by anything wider or narrower leaves pins behind or takes others'."""
    bucket, prefix = parse_s3_uri(uri)
    if _shard.is_pattern(prefix):
        try:
            match = _shard.compile_pattern(prefix)
        except ValueError:
            return
        for oid in cache.iter_objects(bucket, _shard.prefix(prefix)):
            if match(oid.key):
                yield oid
        return
    for oid in cache.iter_objects(bucket, prefix):
        if not prefix or prefix.endswith("/") or oid.key == prefix:
            yield oid


def _unpin_superseded(cache: fusecache.NodeCache, uri: str, owner: str,
                      listed: set[tuple[str, str]]) -> None:
    """Drop *owner*'s pins on the cached objects of *uri* its listing no longer holds: an
    object overwritten since an earlier warm (another ETag) or deleted. Without it a re-warm
    kept the old version pinned next to the new one until the pins expired (a new-user
    walkthrough, 2026-12-07)."""
    for oid in cached_objects(cache, uri):
        if (oid.key, oid.etag) not in listed:
            cache.unpin_object(oid, owner)


def cached_share(cache: fusecache.NodeCache, uri: str) -> tuple[int, int]:
    """(objects of *uri* cached whole, bytes cached), counting the blocks held of an object
    cached in part (an interrupted warm of one large file is not 0 bytes); one version per
    key, the pinned or else the fuller one."""
    best: dict[str, tuple[bool, int, bool]] = {}  # key -> (pinned, bytes held, whole)
    for oid in cached_objects(cache, uri):
        missing = cache.missing_blocks(oid)
        held = oid.size - sum(hi - lo for lo, hi in
                              (oid.block_span(i, cache.block_size) for i in missing))
        if not held and oid.size:
            continue
        mine = (cache.is_pinned(oid), held, not missing)
        if mine > best.get(oid.key, (False, -1, False)):
            best[oid.key] = mine
    return (sum(whole for _, _, whole in best.values()),
            sum(held for _, held, _ in best.values()))


def unpin(cache_dir: str, uris: list[str]) -> tuple[int, list[str]]:
    """Drop prefetchd's pins on the given datasets.

    Returns (objects whose pin was actually removed, URIs prefetchd has no record of).
    A URI is found under any spelling (``s3://b/ds``, ``s3://b/ds/``, ``s3a://``). The record
    of a warm that found no objects (which older versions kept) is removed, not kept unpinned.
    """
    state = StateFile(cache_dir)
    cache = open_existing_cache(cache_dir)
    known = state.load()
    n = 0
    unknown: list[str] = []
    done: list[str] = []
    try:
        for u in uris:
            key = find_record(known, u)
            if key is None:
                unknown.append(u)
                continue
            owner = known[key].get("pin_owner", PIN_OWNER_PREFIX + key)
            for oid in cached_objects(cache, key):
                if cache.unpin_object(oid, owner):
                    n += 1
            done.append(key)
    finally:
        cache.close()

    def upd(d: dict[str, Any]) -> None:
        for k in done:
            if k in d and not d[k].get("objects"):
                del d[k]  # a warm of nothing: nothing cached to show
            elif k in d:
                d[k]["pinned"] = False

    state.update(upd)
    return n, unknown


def tty_progress(stream: Any = None) -> Callable[[WarmStats], None]:
    """A one-line progress bar on a terminal, a log line every 5 s otherwise."""
    stream = stream if stream is not None else sys.stderr
    last = [0.0]
    is_tty = hasattr(stream, "isatty") and stream.isatty()

    def show(s: WarmStats) -> None:
        now = time.monotonic()
        if now - last[0] < (0.2 if is_tty else 5.0):
            return
        last[0] = now
        el = max(now - s.started, 1e-6)
        rate = s.transferred / el
        left = max(s.total_bytes - s.done_bytes, 0)
        eta = f"{left / rate:.0f}s" if rate > 0 else "?"
        line = (
            f"{s.done_objects}/{s.total_objects} objects, {s.done_bytes / 1e6:.1f}/"
            f"{s.total_bytes / 1e6:.1f} MB, {rate / 1e6:.1f} MB/s, ETA {eta}"
        )
        if is_tty:
            stream.write("\r" + line.ljust(78))
            stream.flush()
        else:
            log.info("warm: %s", line)

    return show
