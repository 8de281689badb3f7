"""Bring the node cache's index back into the page cache after the kernel dropped it.

Who calls it: the mount (``mount.py``) makes one ``IndexWarmer`` and starts a walk when it
starts; the reader (``reader.py``, a block looked up on the FUSE loop) and the namespace
(``namespace.py``, a name looked up in a listing) report how long each lookup in the
node cache took (``noticed``).

Data flow: a lookup slower than _SLOW on a thread that took a major page fault since
(``getrusage``) means LMDB read a B-tree page of the index (the block databases ``bmeta``
and ``boffs`` and the listing databases, not the blocks) from disk while the loop waited,
and every other request with it (a lookup that was slow waiting for the GIL, with no
fault, starts nothing): the node cache is opened
without read-ahead, so each such page is one 4 KiB read. The warmer then walks those
databases once, in _THREADS threads of its own, each over one range of the key space
(every key of these databases starts with a hash, so the ranges hold about as many
keys), so the pages are read several at a time while the loop serves requests. The
pages then stay wherever the kernel keeps them.

Why: after the page cache was dropped (a node whose memory went to other work since the
warm), a loader's first files each cost the loop several page faults in a row. Measured
on the 2-core bench VM (4,000 prefetched files of 110 KiB in 100 folders, a mount, the
page cache dropped, then 4 readers of 32 shuffled files each): 0.56-0.77 s for those 128
files, 0.40-0.56 s when a process had walked the index first (26-48 ms for its 12,000
keys), local disk 0.07-0.16 s (three rounds of a noisy evening).

Bounds: one walk at a time; after a walk, none for _COOLDOWN_FACTOR times as long as it
took (at least _COOLDOWN_MIN), so an index that does not stay in memory is not walked
over and over; at most _MAX_ENTRIES keys per database (about 100 MB of index); close()
stops a walk within _STOP_EVERY keys and waits for it. CPU: about 0.2 us a key.
"""

from __future__ import annotations

import logging
import resource
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

import lmdb

from fusecache.workers import name_os_thread

log = logging.getLogger(__name__)

_SLOW = 0.002  # a lookup that took this long read the disk (a page cache hit is ~10 us)
_COOLDOWN_MIN = 1.0
_COOLDOWN_FACTOR = 20
_THREADS = 8
_MAX_ENTRIES = 2_000_000
_STOP_EVERY = 1024


class IndexWarmer:
    """Walks *dbs* of *env* in the background when asked (``start``) or when a lookup
    was slow (``noticed``). Thread-safe; only ``close`` blocks."""

    def __init__(self, env: lmdb.Environment, dbs: Iterable[object]) -> None:
        self.env = env
        self.dbs = list(dbs)
        self.walks = 0
        self._lock = threading.Lock()
        self._running = False
        self._not_before = 0.0  # time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._faults_seen: dict[int, int] = {}  # thread -> its major faults when last seen

    def noticed(self, seconds: float) -> None:
        """A lookup in the index took *seconds* (on the calling thread): a slow one starts
        a walk if the thread has waited for the disk in a page fault since the last slow
        one (a slow lookup may also have waited for the GIL, which a walk does not help)."""
        if seconds < _SLOW:
            return
        faults = resource.getrusage(resource.RUSAGE_THREAD).ru_majflt
        seen = self._faults_seen.get(threading.get_ident())
        if len(self._faults_seen) > 64:  # the FUSE loop's thread calls it, a test's
            self._faults_seen.clear()
        self._faults_seen[threading.get_ident()] = faults
        if seen is not None and faults > seen:  # the first one sets where counting starts
            self.start()

    def start(self) -> bool:
        """Start a walk unless one runs or the last one ended too recently."""
        with self._lock:
            if self._running or self._stop.is_set() or time.monotonic() < self._not_before:
                return False
            self._running = True
        self._thread = threading.Thread(target=self._walk, name="fusecache-index-warm",
                                        daemon=True)
        self._thread.start()
        return True

    def close(self, timeout: float = 10.0) -> None:
        """Stop a walk and wait for it (between probes: at most one page read each), so
        the environment can be closed under no reader."""
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def _walk(self) -> None:
        name_os_thread()
        t0 = time.monotonic()
        keys = 0
        try:
            with ThreadPoolExecutor(_THREADS, thread_name_prefix="fusecache-index") as pool:
                for db in self.dbs:
                    keys += sum(pool.map(self._walk_range, [db] * _THREADS, range(_THREADS)))
            self.walks += 1
        except lmdb.Error as e:  # the environment is closing: the mount is going away
            log.debug("index walk stopped: %s", e)
        finally:
            took = time.monotonic() - t0
            log.debug("index walk: %d keys in %.3f s", keys, took)
            with self._lock:
                self._running = False
                self._not_before = time.monotonic() + max(_COOLDOWN_MIN,
                                                          _COOLDOWN_FACTOR * took)

    def _walk_range(self, db: object, part: int) -> int:
        """Reads the keys of *db* whose first byte is in range *part* of _THREADS."""
        low, high = part * 256 // _THREADS, (part + 1) * 256 // _THREADS
        done = 0
        with self.env.begin(buffers=True) as txn:
            cur = txn.cursor(db)
            if not cur.set_range(bytes((low,))):
                return 0
            for key in cur.iternext(keys=True, values=False):
                if key[0] >= high or done >= _MAX_ENTRIES // _THREADS:
                    break
                done += 1
                if done % _STOP_EVERY == 0 and self._stop.is_set():
                    break
        return done
