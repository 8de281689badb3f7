"""Inodes and names: the S3 prefix tree seen as directories and files.

Who calls it: the FUSE adapter for lookup/getattr/open/readdir. How a name is
resolved under a directory prefix P:

1. A fresh listing of P in the node cache (``listings``) answers yes or no with
   one LMDB get, for every process on the node.
2. Otherwise a recent negative answer (RAM, TTL-bound) answers no.
3. Otherwise HEAD P+name and LIST P+name+'/' (max 1 key) run in parallel: a
   directory wins over a file of the same name. A lookup never waits for a
   listing of the whole of P, so a prefix of a million objects costs two small
   requests. Once a few lookups in P have gone to S3, P is listed in the
   background (the way a training loader opens every file of a folder), and
   later lookups are answered by step 1. A listing of P that shows a folder
   (a dataset's class folders) is followed by one listing of the whole tree under
   P without a delimiter, when it is small enough: it gives every folder under P
   its listing in a page per 1,000 objects.

Readdir lists P fully (paginated), streaming pages into the node cache, then walks
the cached entries; a listing is shared with other mounts and prefetchd while it
is fresh under ``metadata_ttl``.

Inode numbers are a hash of the key (directories end in '/'), so they are stable
for the life of the mount, and the table only holds nodes the kernel still
references (lookup counts, ``forget``): memory is bounded by the kernel's inode
cache, not by the size of the bucket. A file node re-checks its ETag with HEAD
when older than the TTL; a changed ETag gives a new ObjectId, so old cached
blocks are never served for new content.

S3 unreachable (stale-if-error): every S3 request of one operation is bounded by
``op_timeout`` (``--read-timeout``) as a whole and fails at once while the S3
circuit breaker is open (``circuit.py``). A lookup, a revalidation or a listing
that cannot reach S3 then answers from the last known state in the node cache,
whatever its age: a listing, a remembered name, the node's own size and ETag
(whose blocks are keyed by that ETag, so they are the bytes S3 last had). Before
anything is served that way, and for every operation while the breaker is open,
the mount's ``OfflineGate`` must allow it (its credential was authorised for this
bucket/prefix recently: ``offline_auth.py``), else AccessDenied (EACCES). One
warning per outage; each stale answer counts in ``fusecache_stale_served``.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import lmdb
import trio

from fusecache import errors
from fusecache.circuit import CircuitBreaker
from fusecache.config import S3Location
from fusecache.listings import DirEntry, DirRecord, ListingCache, valid_name
from fusecache.nodecache import ObjectId
from fusecache.offline_auth import OfflineGate
from fusecache.store import ListPage, ObjectInfo, ObjectStore

log = logging.getLogger(__name__)

ROOT_INODE = 1
_NEGATIVE_CACHE_MAX = 100_000
_WARNED_MAX = 10_000
# After this many lookups in one directory had to ask S3, the directory is listed
# once in the background: a data loader opening every file of a class folder then
# pays one LIST per 1,000 names instead of a HEAD+LIST per name. Bounded: a few
# listings at a time, and counts for the most recently used directories only.
_LIST_AFTER_REMOTE_LOOKUPS = 4
_BACKGROUND_LISTINGS_MAX = 2
_LOOKUP_COUNTS_MAX = 4096
_BACKGROUND_LIST_MAX_PAGES = 20  # 20,000 names; a bigger directory keeps HEAD+LIST
# A directory whose listing shows at least _TREE_MIN_DIRS folders (a dataset's folder,
# its class folders) is then listed whole, without a delimiter, in the background: when
# it holds at most _TREE_MAX_OBJECTS objects, that one listing (a page per 1,000
# objects) gives every folder under it its listing, where folder by folder cost a LIST
# per folder and, until a folder was listed, a HEAD and a LIST per name looked up in it.
# A bigger tree costs the pages read before the bound, once per directory and mount.
# The mount's root is listed at mount time, so a dataset of up to that many objects is
# listed whole before the job's first lookup.
_TREE_MIN_DIRS = 1
_TREE_MAX_OBJECTS = 20_000
_TREE_CHECK = 256  # names of a directory looked at for fresh folder listings first
# A directory listed before whose listing is past the TTL (the next epoch of a job, with a
# TTL shorter than an epoch) is listed again at the first lookup in it, and the lookup
# answered from that, if it had at most this many names (one LIST page): every later
# lookup and open in it is then answered from the new listing, where asking S3 name by
# name cost a HEAD and a LIST each (measured: 2,000 files in 200 folders, TTL 2 s, on a
# warm node cache, 114-181 files/s at 5 ms of mount CPU a file).
_RELIST_AT_LOOKUP_MAX = 1000
# opened_etag of a node a previous server opened: the kernel may cache pages of a
# version not known here (never equal to an S3 ETag, so the first open drops them).
_PAGES_UNKNOWN = "(restored)"
# S3 did not answer: these fall back to the node cache's last known state.
_OFFLINE = (errors.StoreUnavailable, errors.DeadlineExceeded)


@dataclass(slots=True)
class Node:
    ino: int
    parent: int
    name: str
    is_dir: bool
    key: str            # object key, or the directory's prefix ending in '/' ('' at a root)
    size: int = 0
    etag: str = ""
    mtime: float = 0.0
    checked_at: float = 0.0   # wall-clock time of the last confirmation from S3 or cache
    lookups: int = 0
    # ETag when last opened: decides keep_cache. None: never opened since the kernel
    # took the inode, so it caches no page of it.
    opened_etag: str | None = None
    restored: bool = False  # from a previous server (restore); metadata not known yet


def _ino_for(key: str, is_dir: bool) -> int:
    h = hashlib.blake2b((key + ("/" if is_dir and not key.endswith("/") else "")).encode(),
                        digest_size=8).digest()
    ino = int.from_bytes(h, "little") & 0x7FFF_FFFF_FFFF_FFFF
    return ino if ino > ROOT_INODE else ino + 2


# authorize_read: how long S3's yes to a folder stands, and how many folders are remembered
READ_AUTH_TTL = 900.0
READ_AUTH_MAX = 100_000


def _folder(node: Node) -> str:
    """The folder an object's key lies in (authorize_read's unit)."""
    return node.key.rpartition("/")[0]


class Namespace:
    def __init__(self, store: ObjectStore, listings: ListingCache, location: S3Location,
                 ttl: float, clock: Callable[[], float] = time.time,
                 fallback_listings: Callable[[], ListingCache] | None = None,
                 breaker: CircuitBreaker | None = None, offline: OfflineGate | None = None,
                 op_timeout: float = 60.0,
                 on_stale: Callable[[str], None] | None = None) -> None:
        self.store = store
        # told how long each lookup in the node cache's listings took on the loop (the
        # mount's indexwarm.IndexWarmer: a slow one read the index from disk)
        self.index_noticed: Callable[[float], None] = lambda seconds: None
        self.breaker = breaker
        self.offline = offline
        self.op_timeout = op_timeout
        self._on_stale = on_stale
        self.listings = listings
        # Called once when the node cache cannot take metadata writes (disk full):
        # listings then go to a private cache so the mount keeps working.
        self._fallback_listings = fallback_listings
        self.location = location
        self.ttl = ttl
        self.clock = clock
        # folder -> when this mount's credential last read an object in it (authorize_read)
        self._read_ok: OrderedDict[str, float] = OrderedDict()
        now = clock()
        self.root = Node(ROOT_INODE, ROOT_INODE, "", True, location.prefix, mtime=now,
                         checked_at=now, lookups=1)
        self._nodes: dict[int, Node] = {ROOT_INODE: self.root}
        self._negative: OrderedDict[tuple[int, str], float] = OrderedDict()
        self._listing_flights: dict[str, trio.Event] = {}
        self._remote_lookups: OrderedDict[str, int] = OrderedDict()
        self._background_listings = 0
        self._trees_tried: OrderedDict[str, None] = OrderedDict()  # bounded
        self._tree_listing = False  # one whole-tree listing at a time
        self._listing_ended: trio.Event | None = None  # set as the next one ends
        self._warned: set[str] = set()
        self._offline_warned: float | None = None

    # -- inode table -----------------------------------------------------------------

    def get(self, ino: int) -> Node:
        try:
            return self._nodes[ino]
        except KeyError:
            raise errors.ObjectNotFound(f"inode {ino} unknown") from None

    def __len__(self) -> int:
        return len(self._nodes)

    def find(self, ino: int) -> Node | None:
        return self._nodes.get(ino)

    def restore(self, held: list[tuple[int, int, str, bool, int]]) -> None:
        """Re-create the nodes a previous server of this connection handed out:
        (ino, parent ino, name, is_dir, kernel lookup count), from fusecache.relay.
        Keys follow from the parent chain; file metadata is filled in on first use
        (``rehydrate``)."""
        by_ino = {h[0]: h for h in held}

        def build(ino: int, depth: int = 0) -> Node | None:
            node = self._nodes.get(ino)
            if node is not None or depth > 4096 or ino not in by_ino:
                return node
            _ino, parent_ino, name, is_dir, lookups = by_ino[ino]
            parent = build(parent_ino, depth + 1)
            if parent is None or not parent.is_dir or not valid_name(name):
                return None
            node = Node(ino, parent.ino, name, is_dir,
                        parent.key + name + ("/" if is_dir else ""), lookups=lookups,
                        restored=not is_dir, opened_etag=None if is_dir else _PAGES_UNKNOWN)
            if is_dir:
                node.mtime = node.checked_at = self.clock()
            self._nodes[ino] = node
            return node

        for ino in by_ino:
            build(ino)

    async def rehydrate(self, node: Node) -> Node:
        """Size and ETag of a file node restored from a previous server: from the node
        cache's listings when it has them, else HEAD; never guessed (EIO instead)."""
        if not node.restored:
            return node
        bucket = self.location.bucket
        entry, when = None, 0.0
        known = self.listings.get_name(bucket, node.key, node.name)
        if known is not None:
            entry, when = known
        else:
            parent = self._nodes.get(node.parent)
            rec = self.listings.get_dir(bucket, parent.key) if parent is not None else None
            if rec is not None:
                entry, when = self.listings.lookup(bucket, parent.key, rec, node.name), \
                    rec.listed_at
        if entry is not None and not entry.is_dir and entry.etag:
            node.size, node.etag = entry.size, entry.etag
            node.mtime, node.checked_at = entry.mtime or node.mtime, when
        else:
            info = await trio.to_thread.run_sync(self.store.head, node.key,
                                                 abandon_on_cancel=True)
            node.size, node.etag = info.size, info.etag
            node.mtime, node.checked_at = info.mtime or node.mtime, self.clock()
        node.restored = False
        return node

    def forget(self, ino: int, n: int) -> None:
        node = self._nodes.get(ino)
        if node is None or ino == ROOT_INODE:
            return
        node.lookups -= n
        if node.lookups <= 0:
            del self._nodes[ino]

    def _child(self, parent: Node, name: str, is_dir: bool, size: int = 0, etag: str = "",
               mtime: float = 0.0, when: float | None = None) -> Node:
        """The node of *name*, as S3 (a HEAD, a listing) said it was at *when* (now when
        None): its metadata is trusted for the TTL from then, not from when it is handed
        out (a listing taken at 0 and served at 9.5 s with a TTL of 10 s is no longer
        trusted at 10 s; blind FUSE test: a deleted object read until 19.5 s). An older
        word than the node's own (a listing from before its HEAD) changes nothing."""
        key = parent.key + name + ("/" if is_dir else "")
        ino = _ino_for(key, is_dir)
        node = self._nodes.get(ino)
        while node is not None and node.key != key:  # hash collision: probe
            ino = ino + 1 if ino < 0x7FFF_FFFF_FFFF_FFFF else 2
            node = self._nodes.get(ino)
        now = self.clock()
        when = now if when is None else min(when, now)
        if node is None:
            node = Node(ino, parent.ino, name, is_dir, key, size, etag, mtime or now, when)
            self._nodes[ino] = node
        elif is_dir:
            node.checked_at = max(node.checked_at, when)
        elif when >= node.checked_at or node.restored:
            node.size, node.etag, node.checked_at = size, etag, when
            node.restored = False
            node.mtime = mtime or node.mtime
        return node

    def valid_for(self, node: Node) -> float:
        """How much longer *node*'s metadata is trusted (seconds; inf with no TTL)."""
        if not self.fresh(node.checked_at):
            return 0.0
        if math.isinf(self.ttl):
            return math.inf
        return max(0.0, self.ttl - (self.clock() - node.checked_at))

    def fresh(self, when: float) -> bool:
        """Whether what S3 said at *when* is still trusted; never once seen changed
        (``seen_changed``: -inf), whatever the TTL."""
        return when != -math.inf and (math.isinf(self.ttl) or self.clock() - when < self.ttl)

    # -- lookup --------------------------------------------------------------------------

    async def lookup(self, parent_ino: int, name: str) -> Node:
        """Resolve *name* in a directory; the caller owns one more lookup reference."""
        parent = self.get(parent_ino)
        if not parent.is_dir:
            raise errors.ObjectNotFound(f"{parent.key} is not a directory")
        if not valid_name(name):
            raise errors.ObjectNotFound(name)
        # LMDB reads of small values stay on the loop: cheaper than a thread hop.
        self._gate_if_offline()
        t = time.perf_counter()
        rec, entry = self.listings.find(self.location.bucket, parent.key, name)
        self.index_noticed(time.perf_counter() - t)
        if rec is not None and self.fresh(rec.listed_at):
            node = self._listed(parent, name, entry, rec.listed_at)
        elif rec is not None and self.ttl > 0 and rec.count <= _RELIST_AT_LOOKUP_MAX:
            node = await self._relisted(parent, name, entry, rec.listed_at)
        else:
            try:
                node = await self._lookup_remote(parent, name)
            except _OFFLINE as e:
                if rec is None:
                    raise
                self._serve_stale("lookup", e)
                node = self._listed(parent, name, entry, rec.listed_at)
        node.lookups += 1
        return node

    async def _relisted(self, parent: Node, name: str, stale: DirEntry | None,
                        stale_at: float) -> Node:
        """*name* from a new listing of its directory, whose last one is past the TTL (one
        LIST for all its names, shared with concurrent lookups; each page bounded as a
        listing's are, not the whole: a directory that grew may take several); S3
        unreachable: the last known entry (stale-if-error)."""
        bucket = self.location.bucket
        try:
            await self.ensure_listing(parent, stale_kind="lookup")
        except _OFFLINE as e:
            self._serve_stale("lookup", e)
            return self._listed(parent, name, stale, stale_at)
        rec, entry = self.listings.find(bucket, parent.key, name)
        if rec is None:  # not kept (the node cache refused it): ask for the name itself
            return await self._lookup_remote(parent, name)
        return self._listed(parent, name, entry, rec.listed_at)

    def _listed(self, parent: Node, name: str, entry: DirEntry | None, when: float) -> Node:
        """The node of *name* as the parent's listing taken at *when* has it (None: not in
        it)."""
        if entry is None:
            raise errors.ObjectNotFound(parent.key + name)
        return self._node_for_entry(parent, entry, when)

    def _gate_if_offline(self) -> None:
        """While S3 is unreachable, serve nothing the mount's credential may not read."""
        if self.offline is not None and self.breaker is not None and self.breaker.is_open:
            self.offline.check()

    def _serve_stale(self, kind: str, cause: BaseException) -> None:
        """About to answer from cached metadata of any age because S3 did not answer."""
        if self.offline is not None:
            self.offline.check()  # AccessDenied: EACCES
        if self._on_stale is not None:
            self._on_stale(kind)
        # One warning per outage (per opening of the breaker; without one, per minute).
        outage = self.breaker.opened_at if self.breaker is not None else \
            float(int(self.clock() // 60))
        if self._offline_warned != outage:
            self._offline_warned = outage
            log.warning("S3 is unreachable (%s): serving the node cache's last known "
                        "metadata and cached blocks (stale-if-error) until it answers again",
                        cause)

    async def _bounded(self, what: str, fn: Callable, *args: object):
        """Run one operation's S3 work within op_timeout as a whole; fail fast while the
        circuit breaker is open; trip it when S3 did not answer in time."""
        if self.breaker is not None:
            self.breaker.check(what)
        with trio.move_on_after(self.op_timeout):
            return await fn(*args)
        if self.breaker is not None:
            self.breaker.trip(f"no answer within {self.op_timeout:g}s")
        raise errors.DeadlineExceeded(f"{what}: S3 did not answer within {self.op_timeout:g}s")

    async def _in_thread(self, fn: Callable, *args: object):
        return await trio.to_thread.run_sync(functools.partial(fn, *args),
                                             abandon_on_cancel=True)

    def _listing_if_fresh(self, prefix: str) -> DirRecord | None:
        rec = self.listings.get_dir(self.location.bucket, prefix)
        return rec if rec is not None and self.fresh(rec.listed_at) else None

    async def _lookup_remote(self, parent: Node, name: str) -> Node:
        neg_key = (parent.ino, name)
        expiry = self._negative.get(neg_key)
        if expiry is not None:
            if self.clock() < expiry:
                raise errors.ObjectNotFound(parent.key + name)
            del self._negative[neg_key]
        key = parent.key + name
        bucket = self.location.bucket
        for k in (key + "/", key):
            known = self.listings.get_name(bucket, k, name)
            if known is not None and self.fresh(known[1]):
                return self._node_for_entry(parent, known[0], known[1])
        try:
            self._count_remote_lookup(parent)
            node = await self._bounded(f"lookup of s3://{bucket}/{key}", self._head_and_list,
                                       parent, name, key)
        except _OFFLINE as e:
            for k in (key + "/", key):
                known = self.listings.get_name(bucket, k, name)
                if known is not None:
                    self._serve_stale("lookup", e)
                    return self._node_for_entry(parent, known[0], known[1])
            raise
        if node is None:
            if self.ttl > 0:
                self._negative[neg_key] = self.clock() + min(self.ttl, 3600.0)
                if len(self._negative) > _NEGATIVE_CACHE_MAX:
                    self._negative.popitem(last=False)
            raise errors.ObjectNotFound(key)
        entry = DirEntry(name, node.is_dir, node.size, node.etag, node.mtime)
        try:
            await trio.to_thread.run_sync(self.listings.put_name, bucket, node.key, entry)
        except lmdb.Error as e:
            self._listings_failed(e)  # remembering the name is an optimisation only
        return node

    def _count_remote_lookup(self, parent: Node) -> None:
        """Start a background listing of *parent* once enough lookups asked S3."""
        if self.ttl <= 0:
            return  # a listing would be stale at once
        n = self._remote_lookups.pop(parent.key, 0) + 1
        if n >= _LIST_AFTER_REMOTE_LOOKUPS and parent.key not in self._listing_flights \
                and self.list_soon(parent.key) is not None:
            n = 0
        self._remote_lookups[parent.key] = n
        if len(self._remote_lookups) > _LOOKUP_COUNTS_MAX:
            self._remote_lookups.popitem(last=False)

    def list_soon(self, prefix: str) -> trio.Event | None:
        """List directory *prefix* into the node cache in the background; the event is
        set when that listing (or one already running) ends. None when it is too big to
        hold, S3 is unreachable, or _BACKGROUND_LISTINGS_MAX listings are running (the
        caller may ask again later). Also used by folder read-ahead."""
        running = self._listing_flights.get(prefix)
        if running is not None:
            return running
        if (self.ttl <= 0 or self._background_listings >= _BACKGROUND_LISTINGS_MAX
                or self._remote_lookups.get(prefix, 0) < 0
                or (self.breaker is not None and self.breaker.is_open)):
            return None
        self._background_listings += 1
        flight = self._listing_flights[prefix] = trio.Event()
        trio.lowlevel.spawn_system_task(self._list_in_background, prefix, flight,
                                        name=f"fusecache-list:{prefix}")
        return flight

    async def _list_in_background(self, prefix: str, flight: trio.Event) -> None:
        try:
            stored = await trio.to_thread.run_sync(
                self._list_into_cache, prefix, _BACKGROUND_LIST_MAX_PAGES,
                abandon_on_cancel=True)
            if stored is not None:
                self._list_tree_soon(prefix, stored)
            else:  # too big to hold: never try this directory again
                self._remote_lookups[prefix] = -(1 << 62)
                if len(self._remote_lookups) > _LOOKUP_COUNTS_MAX:
                    self._remote_lookups.popitem(last=False)
        except Exception as e:  # noqa: BLE001 - an optimisation must never end the mount
            log.debug("background listing of %r failed (lookups go on asking S3): %s",
                      prefix, e)
        finally:
            del self._listing_flights[prefix]
            flight.set()
            self._background_listings -= 1
            if self._listing_ended is not None:
                self._listing_ended.set()
                self._listing_ended = None

    def _list_tree_soon(self, prefix: str, folders: int) -> None:
        """After a listing of *prefix* that showed *folders* folders: list the whole tree
        under it in the background if it has enough folders (see _TREE_MIN_DIRS), was not
        tried by this mount, and no other tree listing is running."""
        if (folders < _TREE_MIN_DIRS or self.ttl <= 0 or self._tree_listing
                or prefix in self._trees_tried
                or (self.breaker is not None and self.breaker.is_open)):
            return
        self._trees_tried[prefix] = None
        if len(self._trees_tried) > _LOOKUP_COUNTS_MAX:
            self._trees_tried.popitem(last=False)
        self._tree_listing = True
        trio.lowlevel.spawn_system_task(self._list_tree_in_background, prefix,
                                        name=f"fusecache-list-tree:{prefix}")

    async def _list_tree_in_background(self, prefix: str) -> None:
        try:
            n = await trio.to_thread.run_sync(self._list_tree_into_cache, prefix,
                                              abandon_on_cancel=True)
            log.debug("listed the tree under %r whole: %s", prefix,
                      "too big" if n is None else f"{n} folders")
        except Exception as e:  # noqa: BLE001 - an optimisation: folders list one by one
            log.debug("whole-tree listing of %r failed: %s", prefix, e)
        finally:
            self._tree_listing = False

    def _list_tree_into_cache(self, prefix: str) -> int | None:
        """List everything under *prefix* (no delimiter) into the node cache as the
        listings of every folder in it; None, storing nothing, past _TREE_MAX_OBJECTS;
        0, listing nothing, when the folders of *prefix*'s first _TREE_CHECK names all
        have fresh listings already (a dataset prefetchd warmed, or a mount listed).
        Runs in a worker thread."""
        rec = self.listings.get_dir(self.location.bucket, prefix)
        if rec is not None:
            folders = [e for e in self.listings.entries(self.location.bucket, prefix, rec,
                                                        None, _TREE_CHECK) if e.is_dir]
            if folders and all(self._listing_if_fresh(prefix + e.name + "/")
                               for e in folders):
                return 0
        objects = []
        for obj in self.store.list_all(prefix):
            if len(objects) >= _TREE_MAX_OBJECTS:
                return None
            objects.append(obj)
        return self.listings.store_recursive(self.location.bucket, prefix, objects,
                                             self._warn_skip)

    def listing_ended(self) -> trio.Event:
        """Set when the next background listing ends: a listing refused because
        _BACKGROUND_LISTINGS_MAX were running may be asked for again then."""
        if self._listing_ended is None:
            self._listing_ended = trio.Event()
        return self._listing_ended

    def _listings_failed(self, e: Exception) -> bool:
        """Switch to the private listing cache after a node-cache write failure."""
        if self._fallback_listings is None:
            log.warning("node cache cannot store metadata (%s)", e)
            return False
        log.warning("node cache cannot store metadata (%s); keeping this mount's listings "
                    "in a private cache", e)
        self.listings = self._fallback_listings()
        self._fallback_listings = None
        return True

    async def _head_and_list(self, parent: Node, name: str, key: str) -> Node | None:
        head: ObjectInfo | None = None
        is_dir = False

        failed: list[Exception] = []

        async def do_head() -> None:
            nonlocal head
            try:
                head = await self._in_thread(self.store.head, key)
            except errors.ObjectNotFound:
                head = None
            except Exception as e:  # noqa: BLE001 - re-raised below, not in a group
                failed.append(e)

        async def do_list() -> None:
            nonlocal is_dir
            try:
                is_dir = await self._in_thread(self.store.has_under, key + "/")
            except Exception as e:  # noqa: BLE001 - re-raised below, not in a group
                failed.append(e)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(do_head)
            nursery.start_soon(do_list)
        if failed:
            error = failed[0]
            failed.clear()
            try:
                raise error
            finally:  # not a cycle through this frame's locals
                del error
        if is_dir:
            return self._child(parent, name, True)
        if head is not None:
            return self._child(parent, name, False, head.size, head.etag, head.mtime)
        return None

    def _node_for_entry(self, parent: Node, e: DirEntry, when: float) -> Node:
        return self._child(parent, e.name, e.is_dir, e.size, e.etag, e.mtime, when)

    # -- files ------------------------------------------------------------------------------

    async def authorize_read(self, node: Node) -> None:
        """Let this mount's credential read *node* only if S3 lets it: the first open in a
        folder (again after READ_AUTH_TTL) asks S3 for the object (HEAD) with it, so bytes
        that another credential put in the shared node cache are served only to a
        credential S3 allows to read that folder; AccessDenied is EACCES. A blind test of
        the mount: a key allowed to list but not read got every cached file, with no
        request to S3. S3 unreachable: the offline records decide (offline_auth.py).
        A yes older than S3's last AccessDenied to this credential (its access withdrawn,
        seen by any request: the idle mount's periodic check among them) is asked again:
        a revoked key had read cached files for 40 minutes under --metadata-ttl indefinite."""
        at = self._read_ok.get(_folder(node))
        if at is not None and self.clock() - at < READ_AUTH_TTL and \
                self.store.denied_at < at:
            return
        try:
            await self._head(node)
        except _OFFLINE:
            self._gate_if_offline()
            return
        self._read_allowed(node)

    async def _head(self, node: Node) -> ObjectInfo:
        """The object's attributes from S3, with this mount's credential (bounded)."""
        return await self._bounded(f"HEAD s3://{self.location.bucket}/{node.key}",
                                   self._in_thread, self.store.head, node.key)

    def _read_allowed(self, node: Node) -> None:
        """S3 has just let this mount's credential read *node*: its folder is authorised."""
        folder = _folder(node)
        self._read_ok[folder] = self.clock()
        self._read_ok.move_to_end(folder)
        while len(self._read_ok) > READ_AUTH_MAX:
            self._read_ok.popitem(last=False)

    async def revalidate(self, node: Node) -> Node:
        """Confirm a file's size and ETag with S3 when its metadata is older than the TTL."""
        if node.is_dir or self.fresh(node.checked_at):
            self._gate_if_offline()
            return node
        try:
            info = await self._head(node)
        except _OFFLINE as e:
            self._serve_stale("attributes", e)
            return node
        if info.etag != node.etag:
            log.info("s3://%s/%s changed (ETag %s -> %s)", self.location.bucket, node.key,
                     node.etag, info.etag)
        node.size, node.etag, node.mtime = info.size, info.etag, info.mtime or node.mtime
        node.checked_at = self.clock()
        self._read_allowed(node)  # (S3 answered this credential's HEAD)
        return node

    async def seen_changed(self, node: Node, oid: ObjectId) -> None:
        """A read of *oid* found the object changed on the server (HTTP 412): the node,
        its folder's listing and its remembered name no longer hold, so the next lookup or
        open asks S3 and finds the new version (they kept the old ETag for the rest of the
        TTL, forever with an indefinite one, and every new open failed with ESTALE; blind
        FUSE test). Shared with the node's other mounts through the node cache."""
        if node.etag != oid.etag:
            return  # already moved on
        node.checked_at = -math.inf  # (valid_for: 0, so the kernel is told so too)
        parent = self._nodes.get(node.parent)
        bucket = self.location.bucket
        try:
            if parent is not None:
                await trio.to_thread.run_sync(self.listings.invalidate, bucket, parent.key)
            await trio.to_thread.run_sync(self.listings.forget_name, bucket, node.key)
        except lmdb.Error as e:
            self._listings_failed(e)

    def object_id(self, node: Node) -> ObjectId:
        return ObjectId(self.location.bucket, node.key, node.etag, node.size)

    # -- directories ---------------------------------------------------------------------------

    async def ensure_listing(self, node: Node, stale_kind: str = "listing") -> DirRecord:
        """A fresh listing of a directory, from the node cache or listed from S3 now; S3
        unreachable: the last one, counted as stale under *stale_kind* (the operation
        answered from it)."""
        self._gate_if_offline()
        while True:
            rec = self._listing_if_fresh(node.key)
            if rec is not None:
                return rec
            flight = self._listing_flights.get(node.key)
            if flight is None:
                break
            await flight.wait()
        flight = self._listing_flights[node.key] = trio.Event()
        folders: int | None = None
        try:
            try:
                if self.breaker is not None:
                    self.breaker.check(f"LIST s3://{self.location.bucket}/{node.key}")
                # Each page is bounded by the store (its deadline and timeouts are
                # --read-timeout); a directory of many pages may take longer as a whole.
                folders = await trio.to_thread.run_sync(self._list_into_cache, node.key,
                                                        abandon_on_cancel=True)
            except lmdb.Error as e:
                if not self._listings_failed(e):
                    raise errors.StoreError(f"cannot store the listing of {node.key!r}: "
                                            f"{e}") from None
                folders = await trio.to_thread.run_sync(self._list_into_cache, node.key,
                                                        abandon_on_cancel=True)
        except _OFFLINE as e:
            stale = self.listings.get_dir(self.location.bucket, node.key)
            if stale is None:
                raise
            self._serve_stale(stale_kind, e)
            return stale
        finally:
            del self._listing_flights[node.key]
            flight.set()
        if folders is not None:
            self._list_tree_soon(node.key, folders)
        rec = self.listings.get_dir(self.location.bucket, node.key)
        if rec is None:
            raise errors.StoreError(f"listing of {node.key!r} vanished")
        return rec

    def _list_into_cache(self, prefix: str, max_pages: int | None = None) -> int | None:
        """List *prefix* page by page into the node cache; the number of folders in it.
        Runs in a worker thread.

        With *max_pages*, a longer listing is dropped unstored (None): the pages are
        held in memory until the end, so nothing partial reaches the cache.
        """
        pages = self._pages(prefix)
        if max_pages is not None:
            held = []
            for page in pages:
                if len(held) == max_pages:
                    return None
                held.append(page)
            pages = iter(held)
        writer = self.listings.writer(self.location.bucket, prefix)
        folders = 0
        for page in pages:
            for p in page.prefixes:
                name = p[len(prefix):].rstrip("/")
                if not p.endswith("/") or not valid_name(name) or "/" in name:
                    self._warn_skip(p)
                    continue
                writer.add(DirEntry(name, True))
                folders += 1
            for o in page.objects:
                name = o.key[len(prefix):]
                if not name:
                    continue  # the directory marker object itself
                if not valid_name(name):
                    self._warn_skip(o.key)
                    continue
                writer.add(DirEntry(name, False, o.size, o.etag, o.mtime))
        writer.commit()
        return folders

    def _pages(self, prefix: str) -> Iterator[ListPage]:
        whole = self.store.list_dir(prefix) if prefix else None
        if whole is not None:
            yield whole
            return
        token: str | None = None
        while True:
            page = self.store.list_page(prefix, token)
            yield page
            token = page.next_token
            if token is None:
                return

    def _warn_skip(self, key: str) -> None:
        if key in self._warned:
            return
        if len(self._warned) < _WARNED_MAX:
            self._warned.add(key)
        log.warning("skipping S3 key %r: not a valid POSIX name (empty segment, '.', '..' "
                    "or over 255 bytes)", key)

    async def dir_entries(self, node: Node, rec: DirRecord, after: str | None,
                          limit: int = 256) -> list[DirEntry]:
        return self.listings.entries(self.location.bucket, node.key, rec, after, limit)

    def node_for_entry(self, parent: Node, entry: DirEntry, when: float) -> Node:
        """The node of a listing's *entry*; *when*: the listing's time."""
        return self._node_for_entry(parent, entry, when)

    def listed_after(self, prefix: str, after: str | None, limit: int) -> list[DirEntry] | None:
        """Up to *limit* entries of directory *prefix* after the name *after*, from its
        fresh listing in the node cache; None when there is none (nothing asks S3)."""
        rec = self._listing_if_fresh(prefix)
        if rec is None:
            return None
        return self.listings.entries(self.location.bucket, prefix, rec, after, limit)
