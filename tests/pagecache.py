"""Test helper: push a node cache's bytes out of the kernel's page cache, so that the
next read of them has to wait for the disk (the remount-after-drop_caches case).

Eviction is only possible where the file lives on a disk: on tmpfs (a CI runner's
/tmp often is) the page cache *is* the file. ``disk_dir`` picks a directory whose
pages can be dropped, and ``evict_node_cache`` checks with mincore(2) that they were,
so a test of a cold read never passes or fails on a read that was not cold.

A read with RWF_NOWAIT of pages not in memory starts the kernel's read-ahead for them
before it answers EAGAIN; where the disk answers fast (a virtual disk over the host's
cache) and the reading thread is preempted in between, the pages can be in by the time
the kernel looks again, and the nowait read succeeds (seen in CI under load, and here
once in 40 under CPU and write load). ``slow_disk_reads`` closes that race: while it is
held, the calling thread's reads of the disk are throttled (a blkio cgroup), so the
read-ahead a nowait read starts cannot complete before it answers.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from fusecache import slots
from fusecache.nodecache import NodeCache, ObjectId

_MEMORY_FILE_SYSTEMS = {"tmpfs", "ramfs", "devtmpfs", "hugetlbfs"}
_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.mmap.restype = ctypes.c_void_p
_LIBC.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]
_LIBC.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_LIBC.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
_MAP_FAILED = ctypes.c_void_p(-1).value


def file_system_type(path: Path) -> str:
    """The type of the file system holding *path* (longest mount point in mountinfo)."""
    target, best, kind = str(path.resolve()), "", "unknown"
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            point = left.split()[4].replace("\\040", " ")
            inside = target == point or target.startswith(point.rstrip("/") + "/")
            if inside and len(point) >= len(best):
                best, kind = point, right.split()[0]
    return kind


def disk_dir(tmp_path: Path) -> Path:
    """*tmp_path* if it is on a disk, else a fresh directory beside the tests (the
    checkout), else skip: no directory here can show a read that waits for the disk."""
    if file_system_type(tmp_path) not in _MEMORY_FILE_SYSTEMS:
        return tmp_path
    beside = Path(__file__).resolve().parent.parent / ".pytest-disk" / uuid.uuid4().hex
    if file_system_type(beside.parent.parent) in _MEMORY_FILE_SYSTEMS:
        pytest.skip(f"{tmp_path} and {beside.parent.parent} are on "
                    f"{file_system_type(tmp_path)}: no disk-backed directory to drop pages of")
    beside.mkdir(parents=True)
    return beside


def resident_pages(path: Path, start: int = 0, length: int | None = None) -> int:
    """How many of the file's pages (of the pages holding bytes [start, start+length),
    all of them by default) are in the page cache (mincore of a fresh map, which
    faults nothing in)."""
    page = mmap.PAGESIZE
    end = path.stat().st_size if length is None else start + length
    first = start // page * page
    if end <= first:
        return 0
    fd = os.open(path, os.O_RDONLY)
    try:
        size = end - first
        addr = _LIBC.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, first)
        if addr in (None, _MAP_FAILED):
            raise OSError(ctypes.get_errno(), f"mmap {path}")
        try:
            vec = ctypes.create_string_buffer((size + page - 1) // page)
            if _LIBC.mincore(addr, size, vec) != 0:
                raise OSError(ctypes.get_errno(), f"mincore {path}")
            return sum(b & 1 for b in vec.raw)
        finally:
            _LIBC.munmap(addr, size)
    finally:
        os.close(fd)


def evict_node_cache(cache: NodeCache, cache_dir: Path) -> None:
    """Write the cache out and drop its files' pages (data.mdb and the slot file; pages
    this process has mapped are released first: mapped pages cannot be evicted); skip the
    test, naming the file system, if the kernel keeps them."""
    env_dir = cache_dir / "cache.lmdb"
    files = [f for f in (env_dir / "data.mdb", env_dir / slots.FILE_NAME) if f.exists()]
    cache.env.sync(True)
    left = -1
    for _ in range(20):
        cache._release_mapped_pages()
        left = 0
        for data in files:
            fd = os.open(data, os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
            left += resident_pages(data)
        if left == 0:
            return
        time.sleep(0.05)
    pytest.skip(f"{left} pages of {env_dir} stayed in memory after POSIX_FADV_DONTNEED "
                f"(file system {file_system_type(env_dir)}): a cold read cannot be made here")


def evict_block(cache: NodeCache, cache_dir: Path, oid: ObjectId, index: int) -> None:
    """Drop the node cache's pages, then page back in the B-tree pages the lookup of
    one block touches, so that only that block's bytes have to come from disk; skip the
    test, naming the file system, if the kernel keeps them or reads them back in.

    Were the B-tree pages left out, the lookup that precedes the block read would read
    them from disk right before it, and any read near the block could bring the block in
    with it (a CI run once found the block in memory at its read with the disk throttled;
    the cause was not pinned down). Only the block is left cold, and that is checked.
    (Dropping only the block's pages does not work here: a page of its range stayed,
    likely a large folio straddling the range's edge.)"""
    key = cache.block_key(oid, index)
    where = cache.block_location(oid, index)
    assert where is not None, f"block {index} of {oid} not held"
    data, off, length = where
    evict_node_cache(cache, cache_dir)
    with cache.env.begin() as txn:  # the lookup get_block makes, copied out of the map
        txn.get(key, db=cache._bmeta), txn.get(key, db=cache._bslot)
        txn.get(key, db=cache._boffs)
    cache._release_mapped_pages()
    left = resident_pages(data, off, length)
    if left:
        pytest.skip(f"{left} pages of a block in {data} came back into memory with the "
                    f"B-tree pages of its lookup (file system {file_system_type(data)}): "
                    f"a cold read of it cannot be made here")


_BLKIO = Path("/sys/fs/cgroup/blkio")  # cgroup v1's block I/O controller


def _whole_disk(path: Path) -> str | None:
    """'major:minor' of the disk holding *path* (a partition's parent disk: throttling
    applies per disk), or None when it is not a block device (overlay, tmpfs, ...)."""
    dev = os.stat(path).st_dev
    node = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}")
    if not node.exists():
        return None
    if (node / "partition").exists():
        node = node.resolve().parent
    try:
        return (node / "dev").read_text().strip()
    except OSError:
        return None


def _blkio_group() -> Path | None:
    """The blkio cgroup directory this thread is in (None without cgroup v1's blkio)."""
    try:
        lines = Path("/proc/thread-self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, where = line.split(":", 2)
        if "blkio" in controllers.split(","):
            home = _BLKIO / where.lstrip("/")
            return home if (home / "tasks").exists() else None
    return None


@contextlib.contextmanager
def slow_disk_reads(path: Path, bytes_per_s: int = 1 << 20) -> Iterator[bool]:
    """While inside, the calling thread's reads of the disk holding *path* go at most
    *bytes_per_s* (its thread is moved into a throttled blkio cgroup), so that a read
    the kernel starts for it (RWF_NOWAIT's read-ahead) is still on its way when the
    nowait read answers. Yields False, changing nothing, where this cannot be done (no
    cgroup v1 blkio hierarchy, no block device, not allowed). On the way out the throttle
    is lifted (pages still queued behind it come in at once) and every thread in the
    group, this one and any it started inside, goes back where this one was."""
    disk = _whole_disk(path)
    home = _blkio_group()
    group = _BLKIO / f"fusecache-test-{os.getpid()}"
    tid = threading.get_native_id()
    if disk is None or home is None:
        yield False
        return
    try:
        group.mkdir(exist_ok=True)
        (group / "blkio.throttle.read_bps_device").write_text(f"{disk} {bytes_per_s}")
        (group / "tasks").write_text(str(tid))
    except OSError:
        with contextlib.suppress(OSError):
            group.rmdir()
        yield False
        return
    try:
        yield True
    finally:
        (group / "blkio.throttle.read_bps_device").write_text(f"{disk} 0")
        # with the threads it started meanwhile (trio's worker threads start in it)
        for task in {str(tid), *(group / "tasks").read_text().split()}:
            with contextlib.suppress(OSError):  # one that has ended since
                (home / "tasks").write_text(task)
        for _ in range(50):  # busy while the kernel still winds the group down
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.02)
