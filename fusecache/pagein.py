"""A bound on bytes asked into the page cache ahead of an open that has not come yet.

Who calls it: the FUSE adapter (``fs.py``: a small file's node-cache bytes are asked in
at its LOOKUP) and folder read-ahead (``dirahead.py``: a folder's next held files). Each
asks ``room()`` before it gives ``POSIX_FADV_WILLNEED`` advice, ``add``s what it asked
for, and the adapter's OPEN calls ``opened`` with the file's block key.

Why: advice costs the disk a read whether or not the file is opened. A reader that opens
what it asked for keeps the pending bytes near zero and is never held back; one that
asks for far more than it opens (``stat`` over a whole prefetched tree, a shuffled epoch's
first opens paging in every folder's next files) fills the bound and stops, instead of
reading a dataset from disk nobody opens or queueing the readers' own reads behind it.
An entry is forgotten when it is opened, when it is ``max_age`` seconds old (its pages
may be gone, or its reader stopped), or when ``max_entries`` newer ones came after it,
so memory and the bound's hold both have limits.
"""

from __future__ import annotations

import time
from collections import OrderedDict


class PageInBudget:
    """Pending page-ins by block key, oldest first. Not thread-safe: one trio thread."""

    def __init__(self, max_bytes: int, *, max_age: float = 30.0,
                 max_entries: int = 8192) -> None:
        self.max_bytes = max_bytes
        self.max_age = max_age
        self.max_entries = max_entries
        self._pending: OrderedDict[bytes, tuple[int, float]] = OrderedDict()
        self.pending_bytes = 0

    def room(self) -> int:
        """Bytes that may be asked in now (after forgetting entries too old)."""
        too_old = time.monotonic() - self.max_age
        while self._pending and next(iter(self._pending.values()))[1] < too_old:
            self._forget_oldest()
        return max(0, self.max_bytes - self.pending_bytes)

    def add(self, key: bytes, size: int) -> None:
        if key in self._pending:
            return
        self._pending[key] = (size, time.monotonic())
        self.pending_bytes += size
        if len(self._pending) > self.max_entries:
            self._forget_oldest()

    def opened(self, key: bytes) -> None:
        entry = self._pending.pop(key, None)
        if entry is not None:
            self.pending_bytes -= entry[0]

    def __contains__(self, key: bytes) -> bool:
        return key in self._pending

    def _forget_oldest(self) -> None:
        self.pending_bytes -= self._pending.popitem(last=False)[1][0]
