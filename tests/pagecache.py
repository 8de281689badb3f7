"""Test helper: push a node cache's bytes out of the kernel's page cache, so that the
next read of them has to wait for the disk (the remount-after-drop_caches case).

Eviction is only possible where the file lives on a disk: on tmpfs (a CI runner's
/tmp often is) the page cache *is* the file. ``disk_dir`` picks a directory whose
pages can be dropped, and ``evict_node_cache`` checks with mincore(2) that they were,
so a test of a cold read never passes or fails on a read that was not cold.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import time
import uuid
from pathlib import Path

import pytest

from fusecache.nodecache import NodeCache

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


def resident_pages(path: Path) -> int:
    """How many of the file's pages are in the page cache (mincore of a fresh map,
    which faults nothing in)."""
    size = path.stat().st_size
    if size == 0:
        return 0
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _LIBC.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, _MAP_FAILED):
            raise OSError(ctypes.get_errno(), f"mmap {path}")
        try:
            vec = ctypes.create_string_buffer((size + mmap.PAGESIZE - 1) // mmap.PAGESIZE)
            if _LIBC.mincore(addr, size, vec) != 0:
                raise OSError(ctypes.get_errno(), f"mincore {path}")
            return sum(b & 1 for b in vec.raw)
        finally:
            _LIBC.munmap(addr, size)
    finally:
        os.close(fd)


def evict_node_cache(cache: NodeCache, cache_dir: Path) -> None:
    """Write the cache out and drop its data file's pages (pages this process has mapped
    are released first: mapped pages cannot be evicted); skip the test, naming the file
    system, if the kernel keeps them."""
    data = cache_dir / "cache.lmdb" / "data.mdb"
    cache.env.sync(True)
    left = -1
    for _ in range(20):
        cache._release_mapped_pages()
        fd = os.open(data, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        left = resident_pages(data)
        if left == 0:
            return
        time.sleep(0.05)
    pytest.skip(f"{left} pages of {data} stayed in memory after POSIX_FADV_DONTNEED "
                f"(file system {file_system_type(data)}): a cold read cannot be made here")
