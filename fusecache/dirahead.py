"""Folder read-ahead: the small files of a folder that is being read file by file are
fetched ahead of the reader, several at a time, into the RAM tier and the node cache.

Who calls it: the FUSE adapter (``fs.py``) reports every file it opens (``opened``).
Data flow: the folder's next names come from its fresh listing in the node cache
(``Namespace.listed_after``); each one neither in RAM nor in the node cache (checked
in a worker thread, a batch at a time: ``BlockReader.not_in_node_cache``) is loaded
with ``BlockReader.get_block``, so a reader that opens a file while it is being
fetched waits for that fetch (single flight), never a second GET, and the block lands
where a read looks first (RAM tier) and in the node cache (write-behind). One the node
cache holds is not fetched but asked into the page cache in the same worker-thread call
(``POSIX_FADV_WILLNEED``), so that its read is served on the loop without a thread
waiting for the disk, while those asked in and not opened yet stay under
``_PAGE_IN_BYTES`` (``pagein.py``). Unbounded, this asked for nearly the whole of a
prefetched dataset in an epoch's first second (a shuffled reader opens a folder's next
files much later), and the readers' own reads queued behind it at the disk; the read a
reader needs next is asked for at its LOOKUP instead (``fs.py``). Measured (2026-12-04, a
902 MB prefetched tree, page cache dropped), the training experiment's epoch against
local disk's utilisation, with the LOOKUP advice: 0.98-0.99x with the bound or with no
page-in at all, 0.97-0.98x unbounded (0.92-0.93x unbounded and without the advice); one
folder of 1,500 files read by 4 unpaced readers after a remount: 3,453-3,660 files/s
with the bound, 2,758-2,907 with no page-in, 4,301-4,713 unbounded without the advice.

Why: a data loader reads an image or audio folder one whole small file at a time, in
shuffled order, with a few workers. Each open then waits one GET's first byte (13 ms
on loopback here, 20-40 ms to a remote S3) while the link idles, and the kernel's
read-ahead never crosses a file. Fetching the folder's other small files meanwhile
turns a cold epoch into many GETs in flight, as ``prefetchd warm`` does.

Policy, chosen so the waste has a bound a user can state: a folder starts once two
different files of it have been opened, or at its first open once two other folders of
its parent have started (the class folders of a dataset read in shuffled order). From
then on every open grants ``per_open`` fetches of the folder's next small files, in
name order from where the last fetch stopped, once round the folder. A job that reads
a whole folder, in any order, gets it fetched ahead with no byte fetched twice; a job
that opens only some files of a big folder fetches at most ``per_open`` more files per
file it opens. A folder with no fresh listing (a loader that opens the paths of its
own index, never listing) is listed in the background (``Namespace.list_soon``); when
none may start (two are running, S3 is unreachable, no metadata TTL), it asks again as a
running listing ends or at its next open.
With a cache group (``BlockReader.peers_active``), a batch's missing files are asked of
the peers in one call (``BlockReader.load_first_blocks``: GetBlocks), what they lack is
fetched one by one from S3, and an open grants ``_GROUP_SHARE`` times ``per_open``.
Files in RAM or in flight, folders and files larger than ``max_file`` are skipped;
one in the node cache costs a ``_HELD_SHARE``-th of a credit (asking the page cache for it
is a local disk read, not a GET): an open pages in at most ``_HELD_SHARE * per_open`` of
them. Bounds: ``in_flight`` fetches at once (half the mount's connections by default, so a
reader's own GET always finds one), ``_MAX_CREDITS`` per folder, ``_MAX_FOLDERS`` folders
tracked (least recently opened forgotten), ``_SCANNERS`` folders scanned at once,
``_SCAN_LIMIT`` listing entries looked at per batch of at most ``_BATCH`` files (and no more
than the folder's credits buy) checked against the node cache.

Each batch is one worker-thread call, and on this project's 2-core VM a thread hop costs
the loop and the machine far more than the check it carries. So a folder whose last batch
was mostly held in the node cache (a prefetched dataset after a remount) is checked
``_HELD_SHARE`` times as many files at a time. Prefetched small files, page cache dropped
(bench/run_files_bench.py, paired with the code before, three rounds, 4 readers): the same
files/s (1,125-1,701 against 1,160-1,747 on a busy machine) at 1.94-2.20 against 2.18-2.53 s
of mount CPU.
"""

from __future__ import annotations

import logging
from collections import OrderedDict, deque
from collections.abc import Iterator
from dataclasses import dataclass, field

import trio

from fusecache.listings import DirEntry
from fusecache.metrics import Metrics
from fusecache.namespace import Namespace, Node
from fusecache.nodecache import ObjectId, block_key
from fusecache.pagein import PageInBudget
from fusecache.reader import BlockReader

log = logging.getLogger(__name__)

_MAX_FOLDERS = 1024
_HOT_PARENT = 2
_MAX_CREDITS = 256
_SCAN_LIMIT = 256  # listing entries looked at per batch at most
_BATCH = 32       # files checked against the node cache in one worker-thread call
_HELD_SHARE = 4   # files held in the node cache paged in for one credit
_SCANNERS = 4     # folders whose credits are being spent at once
_USED_MEMORY = 8192  # files fetched ahead remembered, to count those opened (used)
# Held files asked into the page cache and not opened yet: at most this many bytes
# (pagein.PageInBudget: each counted until it is opened or 30 s old).
_PAGE_IN_BYTES = 64 * 1024 * 1024
# With a cache group to ask, an open grants this many times per_open: a file from a peer
# costs a transfer on the LAN, not a GET, and a folder's files come in one call per
# batch, so fetching further ahead costs both ends less per file. Measured with a warmed
# peer (2,000 files of 110 KiB in 100 folders, 4 shuffled readers, mutual TLS, 2 cores):
# 16 instead of 4 per open took the mount's CPU from 3.6-4.0 to 2.6-3.3 s and the
# peer's from 1.3-1.7 to 0.7-1.0 s. 64 instead of 16 (a class folder of ~20 files in one
# call at its first open; `run_train_bench.py --scale 2 --datasets files --contenders
# local,fusecache-group`, three alternated rounds, 2026-12-05): 0.60-0.62 against
# 0.57-0.58 of local disk's utilisation, mount CPU 2.5-2.6 against 2.8-2.9 s.
_GROUP_SHARE = 16


@dataclass(slots=True)
class _Folder:
    prefix: str
    first: str                  # the first file opened; a second, other one starts it
    above: str | None           # the parent folder's prefix (None: this is the root)
    started: bool = False
    cursor: str | None = None   # last name read from the listing (None: its start)
    upcoming: deque[DirEntry] = field(default_factory=deque)  # read, not looked at yet
    stop_at: str = ""           # where it started: once round, it stops there
    wrapped: bool = False
    at_end: bool = False        # the listing is read once round; *upcoming* is the rest
    done: bool = False          # nothing left to fetch
    credits: int = 0
    held: bool = False          # most of the last batch checked was in the node cache
    queued: bool = False
    listing: bool = False       # waiting for a background listing of it
    unlisted: bool = False      # no fresh listing, and none could be started yet


class FolderReadAhead:
    """Lives on the trio thread, beside the BlockReader whose loads it starts."""

    def __init__(self, namespace: Namespace, reader: BlockReader, metrics: Metrics, *,
                 per_open: int, max_file: int, in_flight: int) -> None:
        self.ns = namespace
        self.reader = reader
        self.per_open = per_open
        self.max_file = max_file
        self.in_flight = max(1, in_flight)
        self._metric_fetched = metrics.folder_readahead.labels("fetched")
        self._metric_used = metrics.folder_readahead.labels("used")
        self._metric_failed = metrics.folder_readahead.labels("failed")
        self._metric_held = metrics.folder_readahead.labels("held")
        self._metric_paged = metrics.folder_readahead.labels("paged_in")
        self._folders: OrderedDict[str, _Folder] = OrderedDict()
        # Folders started, per parent folder: once _HOT_PARENT folders of one parent
        # (class folders of a dataset) are being read, a sibling starts at its first open.
        self._started_under: OrderedDict[str, int] = OrderedDict()
        self._ready: deque[_Folder] = deque()
        self._scanners = 0
        self._slots = trio.Semaphore(self.in_flight)
        self._fetched: OrderedDict[bytes, None] = OrderedDict()
        self._page_ins = PageInBudget(_PAGE_IN_BYTES, max_entries=_USED_MEMORY)
        # Folders whose listing was refused, asked for again when a running one ends.
        self._refused: OrderedDict[str, _Folder] = OrderedDict()
        self._retrying = False
        self._nursery: trio.Nursery | None = None

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Own the fetch tasks until cancelled."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await trio.sleep_forever()

    def opened(self, node: Node) -> None:
        """A file was opened (FUSE OPEN): count it for its folder, maybe fetch ahead."""
        if self.per_open <= 0 or node.is_dir or self._nursery is None:
            return
        key = block_key(self.ns.object_id(node), 0, self.reader.block_size)
        if key in self._fetched:
            del self._fetched[key]
            self._metric_used.inc()
        self._page_ins.opened(key)
        parent = self.ns.find(node.parent)
        if parent is None or not parent.is_dir:
            return
        folder = self._folders.get(parent.key)
        first_open = folder is None
        if folder is None:
            above = self.ns.find(parent.parent)
            folder = _Folder(parent.key, node.name,
                             above.key if above is not None and above is not parent else None)
            self._folders[parent.key] = folder
            if len(self._folders) > _MAX_FOLDERS:
                self._folders.popitem(last=False)
        else:
            self._folders.move_to_end(parent.key)
        if folder.done:
            return
        if not folder.started:
            hot = self._started_under.get(folder.above, 0) >= _HOT_PARENT
            if not hot and (first_open or node.name == folder.first):
                return  # one file opened: maybe just a look, not a read of the folder
            folder.started = True
            folder.cursor = folder.stop_at = node.name
            if folder.above is not None:
                n = self._started_under.pop(folder.above, 0) + 1
                self._started_under[folder.above] = n
                if len(self._started_under) > _MAX_FOLDERS:
                    self._started_under.popitem(last=False)
        share = _GROUP_SHARE if self.reader.peers_active() else 1
        folder.credits = min(_MAX_CREDITS, folder.credits + share * self.per_open)
        folder.unlisted = False  # an open: ask for its listing again
        if not folder.queued:
            folder.queued = True
            self._ready.append(folder)
        self._pump()

    def _pump(self) -> None:
        """Start scanners while there are folders with credits (at most _SCANNERS)."""
        assert self._nursery is not None
        while self._scanners < _SCANNERS and self._ready:
            folder = self._ready.popleft()
            if folder.credits > 0 and not folder.done \
                    and self._folders.get(folder.prefix) is folder:
                self._scanners += 1
                self._nursery.start_soon(self._scan, folder)
            else:
                folder.queued = False

    async def _scan(self, folder: _Folder) -> None:
        """Spend the folder's credits: its next files not in RAM are checked against the
        node cache in a worker thread, a batch at a time (the check may page B-tree pages
        in from disk: never on the loop); the held ones are asked into the page cache in
        the same call while the page-in bound has room, the missing ones fetched. A fetch
        costs its credit, a held file a _HELD_SHARE-th of one, and a folder whose last batch
        was mostly held is checked that many times as many files per call."""
        try:
            while folder.credits > 0 and not folder.done \
                    and self._folders.get(folder.prefix) is folder:
                buys = folder.credits * (_HELD_SHARE if folder.held else 1)
                batch = self._candidates(folder, min(_BATCH, buys))
                if not batch:
                    if folder.done or folder.listing or folder.unlisted:
                        break
                    await trio.sleep(0)  # a long run of files in RAM: let others in
                    continue
                missing, paged = await trio.to_thread.run_sync(
                    self.reader.not_in_node_cache, [oid for _, oid in batch],
                    self._page_ins.room())
                for oid in paged:
                    self._page_ins.add(block_key(oid, 0, self.reader.block_size), oid.size)
                held = len(batch) - len(missing)
                folder.held = held > len(missing)
                folder.credits -= -(-held // _HELD_SHARE)
                self._metric_held.inc(held)
                self._metric_paged.inc(len(paged))
                if self.reader.peers_active():
                    await self._fetch_from_group(folder, batch, missing)
                    continue
                for oid in self._affordable(folder, batch, missing):
                    await self._slots.acquire()
                    if self.reader.in_memory(oid, 0):  # its reader got there first
                        self._slots.release()
                        continue
                    folder.credits -= 1
                    self._note_fetch(oid)
                    assert self._nursery is not None
                    self._nursery.start_soon(self._fetch, oid)
        finally:
            self._scanners -= 1
            folder.queued = False
            self._queue(folder)
            self._pump()

    @staticmethod
    def _affordable(folder: _Folder, batch: list[tuple[DirEntry, ObjectId]],
                    missing: set[ObjectId]) -> Iterator[ObjectId]:
        """The batch's files in *missing*, one at a time while the folder has credits (the
        caller spends them); once they are spent, the rest go back to the front of the
        folder's upcoming files, for the next credits."""
        for i, (_entry, oid) in enumerate(batch):
            if oid not in missing:
                continue
            if folder.credits <= 0:
                folder.upcoming.extendleft(e for e, o in reversed(batch[i:]) if o in missing)
                return
            yield oid

    async def _fetch_from_group(self, folder: _Folder, batch: list[tuple[DirEntry, ObjectId]],
                                missing: set[ObjectId]) -> None:
        """With a cache group: the batch's missing files its credits buy are asked of the
        peers in one call (one slot); the rest keep for the next credits."""
        wanted: list[ObjectId] = []
        for oid in self._affordable(folder, batch, missing):
            if not self.reader.in_memory(oid, 0):
                folder.credits -= 1
                self._note_fetch(oid)
                wanted.append(oid)
        if wanted:
            await self._slots.acquire()
            assert self._nursery is not None
            self._nursery.start_soon(self._fetch_batch, wanted)

    async def _fetch_batch(self, oids: list[ObjectId]) -> None:
        """Ask the group for *oids* at once; what it did not give is fetched one by one
        from S3, each in a slot of its own."""
        rest = oids
        try:
            with trio.move_on_after(self.reader.read_timeout):
                rest = await self.reader.load_first_blocks(oids)
        except Exception as e:  # noqa: BLE001 - best effort: fetched one by one below
            log.debug("folder read-ahead from the group failed: %s", e)
        finally:
            self._slots.release()
        self._metric_fetched.inc(len(oids) - len(rest))
        for oid in rest:
            await self._slots.acquire()
            if self.reader.in_memory(oid, 0):  # its reader got there first
                self._slots.release()
                continue
            assert self._nursery is not None
            self._nursery.start_soon(self._fetch, oid, False)

    def _candidates(self, folder: _Folder, limit: int) -> list[tuple[DirEntry, ObjectId]]:
        """Up to *limit* of the folder's next small files not in RAM or in flight; [] when
        there are none left (*done*) or no fresh listing yet (a listing is asked for)."""
        out: list[tuple[DirEntry, ObjectId]] = []
        for _ in range(_SCAN_LIMIT):
            if len(out) >= limit:
                break
            if not folder.upcoming:
                if folder.at_end:
                    folder.done = not out  # else: done once these are spent
                    break
                batch = self.ns.listed_after(folder.prefix, folder.cursor, _BATCH)
                if batch is None:  # a loader that opens paths it knew before: list it
                    self._list_then_resume(folder)
                    break
                if not batch:
                    if folder.wrapped:
                        folder.at_end = True
                    folder.wrapped, folder.cursor = True, None
                    continue
                folder.upcoming.extend(batch)
                folder.cursor = batch[-1].name
            entry = folder.upcoming.popleft()
            if folder.wrapped and entry.name >= folder.stop_at:
                folder.at_end = True  # once round: what is still upcoming is all
                folder.upcoming.clear()
                continue
            if entry.is_dir or not 0 < entry.size <= self.max_file:
                continue
            oid = ObjectId(self.ns.location.bucket, folder.prefix + entry.name,
                           entry.etag, entry.size)
            if not self.reader.in_memory(oid, 0):
                out.append((entry, oid))
        return out

    def _note_fetch(self, oid: ObjectId) -> None:
        self._fetched[block_key(oid, 0, self.reader.block_size)] = None
        if len(self._fetched) > _USED_MEMORY:
            self._fetched.popitem(last=False)

    def _list_then_resume(self, folder: _Folder) -> None:
        """Have the folder listed; its credits are spent once the listing is in."""
        if folder.listing or self._nursery is None:
            return
        listed = self.ns.list_soon(folder.prefix)
        if listed is None:  # refused for now: asked again when a running listing ends,
            folder.unlisted = True  # or at the folder's next open (not at once: a spin)
            self._refused[folder.prefix] = folder
            if len(self._refused) > _MAX_FOLDERS:
                self._refused.popitem(last=False)
            if not self._retrying:
                self._retrying = True
                self._nursery.start_soon(self._retry_refused)
            return
        folder.listing = True
        self._nursery.start_soon(self._resume_after, folder, listed)

    def _queue(self, folder: _Folder) -> bool:
        """Queue *folder* for a scan when it has credits left and nothing holds it back
        (queued already, done, waiting for a listing or refused one); True if queued."""
        if folder.credits > 0 and not (folder.queued or folder.done or folder.listing
                                       or folder.unlisted):
            folder.queued = True
            self._ready.append(folder)
            return True
        return False

    async def _retry_refused(self) -> None:
        """Each time a background listing ends, queue the folders refused one meanwhile
        (one task for all of them; it waits for nothing else, so a mount on which no
        listing ever runs, as with --metadata-ttl 0, stays idle)."""
        try:
            while self._refused:
                await self.ns.listing_ended().wait()
                refused, self._refused = list(self._refused.values()), OrderedDict()
                for folder in refused:
                    folder.unlisted = False
                    if self._folders.get(folder.prefix) is folder:
                        self._queue(folder)
                self._pump()
        finally:
            self._retrying = False

    async def _resume_after(self, folder: _Folder, listed: trio.Event) -> None:
        try:
            await listed.wait()
        finally:
            folder.listing = False
        if self._queue(folder):
            self._pump()

    async def _fetch(self, oid: ObjectId, ask_peers: bool = True) -> None:
        try:
            with trio.move_on_after(self.reader.read_timeout) as scope:
                await self.reader.get_block(oid, 0, ask_peers=ask_peers)
                self._metric_fetched.inc()
            if scope.cancelled_caught:
                raise TimeoutError(f"no answer within {self.reader.read_timeout:g}s")
        except Exception as e:  # noqa: BLE001 - best effort: the reader's own open retries
            self._fetched.pop(block_key(oid, 0, self.reader.block_size), None)
            self._metric_failed.inc()
            log.debug("folder read-ahead of %s failed: %s", oid.key, e)
        finally:
            self._slots.release()
