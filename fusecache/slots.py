"""The node cache's slot file: the bytes of full blocks, written past the page cache.

Who calls it: ``nodecache.NodeCache`` only. Its LMDB environment records which slot holds
which block (``bslot``), which slots are free (``freeslots``) and how many exist
(``slots`` in ``meta``) and reads slots with the same preads as data.mdb (through
``read_fd``); this module opens ``slots.dat``, which lies beside ``data.mdb`` (so a cache
moved aside takes it along), and writes blocks into it.

Why: a full 8 MiB block stored as an LMDB value cost the thread that stores it a fresh
8 MiB buffer (LMDB copies a value into pages it mallocs, which the mount's malloc
settings map afresh: a page fault and a zeroed page per 4 KiB), a copy into it, a
second copy into the page cache at the commit, and a second transaction that touches
the value through the map to learn its offset. ``perf record`` of a mount during a cold
512 MiB read on loopback (2026-12-05): the write-behind thread took half the mount's
CPU samples, 54% of them copying into page-cache pages and 23% zeroing fresh pages; in
a script of its own, 64 such blocks cost 0.27-0.99 s of CPU through LMDB, 0.21-0.29 s
as plain pwrites and 0.01 s as O_DIRECT pwrites (the disk copies them by DMA).

Data flow. Write: the block's bytes are copied into one page-aligned staging buffer
(O_DIRECT needs aligned memory; blocks arrive in buffers malloc placed 16 bytes into a
page), a MiB at a time, and written with ``pwrite`` at ``slot * slot_size``, inside the LMDB write
transaction that records the slot, so that a process killed before the commit leaves
the slot free. Read (nodecache.py): a plain ``pread`` (the page cache keeps what is read
back, as for any file) into the caller's buffer; the CRC the caller has decides whether
the bytes are the block's (a slot freed and written again under a reader is caught there).

Who writes past the page cache: the mount (``NodeCache.open(direct_slot_writes=True)``),
whose CPU the training job on the node needs: a cold 512 MiB read on loopback moved
522-528 MB/s with O_DIRECT slot writes against 392-398 MB/s with plain pwrites (its
write-behind thread 0.15 against 0.65 s of CPU; two alternations, 2026-12-05).
``prefetchd warm`` and everything else write slots with plain pwrites: a warm is bound
by how many GETs it keeps in flight, and an O_DIRECT write makes the disk's time part of
each store (inside the write transaction) where the page cache would defer it: a warm
of a 512 MiB object moved 710-796 MB/s with O_DIRECT against 847-882 with plain pwrites
(799-844 before slots). Where the file system refuses O_DIRECT (tmpfs before Linux 6.6,
some overlays), the mount's writes are plain pwrites too.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import mmap
import os
import threading
from pathlib import Path

log = logging.getLogger(__name__)


def _load_fallocate() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64,
                                   ctypes.c_int64]
        return libc
    except (OSError, AttributeError):
        return None


_LIBC = _load_fallocate()
_PUNCH_HOLE, _KEEP_SIZE = 0x02, 0x01  # FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE
_PUNCH_OK = [True]

FILE_NAME = "slots.dat"
ALIGN = 4096  # O_DIRECT: offsets, lengths and memory aligned to the logical block
# A block is staged and written this much at a time: the staging buffer stays resident
# in every process that stores blocks (the mount's RSS bound), eight pwrites per 8 MiB
# block cost nothing next to the copy.
STAGE_BYTES = 1 << 20


class SlotFile:
    """``slots.dat`` of one cache, opened by one process. Thread-safe."""

    def __init__(self, path: Path, slot_size: int, write_fd: int, read_fd: int,
                 direct: bool) -> None:
        self.path = path
        self.slot_size = slot_size
        self.direct = direct
        self._write_fd = write_fd
        self.read_fd = read_fd  # nodecache reads and advises slots through it
        self._lock = threading.Lock()
        self._stage: mmap.mmap | None = None

    @classmethod
    def open(cls, env_dir: Path, slot_size: int, direct: bool) -> SlotFile | None:
        """The slot file in *env_dir*, created if missing, written past the page cache
        when *direct* and the file system allows it; None when slots of this size cannot
        meet O_DIRECT's alignment or the file cannot be opened (the caller then keeps
        every block in LMDB, as before slots)."""
        if slot_size <= 0 or slot_size % ALIGN:
            return None
        path = env_dir / FILE_NAME
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC
        try:
            write_fd = -1
            if direct:
                try:
                    write_fd = os.open(path, flags | os.O_DIRECT, 0o600)
                except OSError as e:
                    if e.errno != errno.EINVAL:
                        raise
                    direct = False
            if write_fd < 0:
                write_fd = os.open(path, flags, 0o600)
            try:
                read_fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                os.close(write_fd)
                raise
        except OSError as e:
            log.warning("cannot open %s (%s): full blocks stay in data.mdb", path, e.strerror)
            return None
        return cls(path, slot_size, write_fd, read_fd, direct)

    def close(self) -> None:
        with self._lock:
            for fd in (self._write_fd, self.read_fd):
                if fd >= 0:
                    os.close(fd)
            self._write_fd = self.read_fd = -1
            if self._stage is not None:
                self._stage.close()
                self._stage = None

    @property
    def can_release(self) -> bool:
        """Whether release() gives disk back here (libc and the file system can)."""
        return _PUNCH_OK[0] and _LIBC is not None

    def offset(self, slot: int) -> int:
        return slot * self.slot_size

    def write(self, slot: int, data: bytes | bytearray | memoryview) -> None:
        """Write one block of exactly ``slot_size`` bytes into *slot*; OSError if the
        disk refuses (full, I/O error) or takes only part of it."""
        if len(data) != self.slot_size:
            raise ValueError(f"{len(data)} bytes for a slot of {self.slot_size}")
        with self._lock:
            if self.direct:
                try:
                    self._write_direct(slot, data)
                    return
                except OSError as e:
                    if e.errno != errno.EINVAL:
                        raise
                    # the file system took the open but not the write: write through the
                    # page cache from now on
                    self._buffered_from_now("O_DIRECT write refused")
            n = os.pwrite(self._write_fd, data, self.offset(slot))
        if n != self.slot_size:
            raise OSError(errno.EIO, f"short write to {self.path}: {n} of "
                                     f"{self.slot_size} bytes")

    def release(self, slot: int) -> None:
        """Give a freed slot's disk back to the file system (a hole: the file keeps its
        size, reads of it give zeros, which no block's CRC matches). Without it the file
        kept its high-water mark: a blind test of the mount found 1.4-1.7x the bound on
        disk, and a full disk never given back. Called under LMDB's write lock for a slot
        a committed transaction freed (nodecache._release_slots)."""
        if not self.can_release:
            return
        with self._lock:
            if _LIBC.fallocate(self._write_fd, _PUNCH_HOLE | _KEEP_SIZE,
                               self.offset(slot), self.slot_size) != 0:
                err = ctypes.get_errno()
                if err in (errno.EOPNOTSUPP, errno.ENOSYS):
                    _PUNCH_OK[0] = False  # (this file system keeps what it has)
                    log.info("%s: the file system cannot punch holes; freed slots keep "
                             "their disk until written again", self.path)

    def _write_direct(self, slot: int, data: bytes | bytearray | memoryview) -> None:
        step = min(STAGE_BYTES, self.slot_size)
        if self._stage is None:
            self._stage = mmap.mmap(-1, step)
        src, base = memoryview(data), self.offset(slot)
        for pos in range(0, self.slot_size, step):
            chunk = src[pos:pos + step]
            stage = memoryview(self._stage)[:len(chunk)]
            stage[:] = chunk
            n = os.pwrite(self._write_fd, stage, base + pos)
            stage.release()
            if n != len(chunk):
                raise OSError(errno.EIO, f"short write to {self.path}: {n} of "
                                         f"{len(chunk)} bytes at {base + pos}")

    def _buffered_from_now(self, why: str) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        os.close(self._write_fd)
        self._write_fd, self.direct = fd, False
        if self._stage is not None:
            self._stage.close()
            self._stage = None
        log.info("%s for %s: writing it through the page cache", why, self.path)
