"""glibc malloc settings for the processes that move blocks, and the buffers blocks live in.

Who calls it: prefetchd's ``warm`` and ``run`` commands (``reuse_block_buffers``) and
the mount (``tune_for_mount``), each once at start; the settings are process-wide, so a
library user of the API keeps its own. ``block_buffer``: the mount's reader, for every
buffer a block is read into, and the cache group's client for every block a peer sent.

Data flow: none. Blocks are 8 MiB buffers by default. glibc maps a buffer that large
afresh (its mmap threshold), and each fresh 8 MiB mapping costs 2,048 page faults and
zeroed pages; one below the threshold comes from the heap, where a freed one is reused
by the next.

prefetchd: the threshold at glibc's largest (32 MiB), so every block buffer (obstore's
response body, LMDB's copy of a block being stored) comes from the heap; the heap is
trimmed only past 256 MiB free. One arena, so a buffer freed by one thread serves the
next allocation of another. Measured on the 2-core bench VM (512 MiB object, page cache
dropped): ``prefetchd warm`` 2.81-3.10 CPU-s -> 2.49-2.68 s.

The mount: blocks live on in the RAM tier between small files' buffers, and a later
8 MiB buffer no longer fits the holes they leave (with prefetchd's settings the heap
grew by ~115 MiB in bench/run_bench.py's second sequential pass, peak RSS 455-498 MiB
against the 456 MiB bound). So what the RAM tier keeps is mapped, and returned to the
system when it lets the block go: ``block_buffer`` asks for at least the threshold
and shrinks the buffer to its length (CPython keeps the allocation; glibc shrinks a
mapping in place). What is freed soon after use comes from the heap: the threshold
is just above one block and LMDB's page header, so the copy LMDB makes of each block
it stores (the write-behind thread, one block per write transaction) reuses the last
one's memory. Measured with bench/run_pair_bench.py (cold 512 MiB read through the mount,
page cache dropped, 12 rounds alternated, 2 shared cores): page faults per pass 186-209 ->
63-88 thousand; MB/s per round new/old 0.66-1.61x (median 1.13x: the host's noise is
larger than the gain); VmHWM 398-417 -> 413-433 MiB (the kept copy, and the heap above it
up to the trim threshold).
"""

from __future__ import annotations

import ctypes

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
_MMAP_THRESHOLD = 32 << 20   # glibc's largest: an 8 MiB block buffer comes from the heap
_TRIM_THRESHOLD = 256 << 20
_PAGE = 4096
# A buffer at least this long is one block_buffer maps apart (when the mount is tuned):
# smaller ones are small files' blocks, which the heap serves well.
_MAPPED_FROM = 1 << 20
# What the mount's threshold was set to (None: not tuned, every buffer plain malloc).
_map_at: int | None = None

# A bytearray whose bytes are not initialised: malloc only, so a fresh 8 MiB buffer is
# not zeroed page by page while the caller holds the GIL (bytearray(n) would); the read
# into it fills it with the GIL released. Never handed out unless filled whole.
_new_bytearray = ctypes.pythonapi.PyByteArray_FromStringAndSize
_new_bytearray.argtypes = [ctypes.c_char_p, ctypes.c_ssize_t]
_new_bytearray.restype = ctypes.py_object


def reuse_block_buffers() -> bool:
    """prefetchd's settings (above) for this process; False where this is not glibc."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(_M_ARENA_MAX, 1)
                    and libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)
                    and libc.mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD))
    except (OSError, AttributeError):
        return False


def tune_for_mount(block_size: int, peers: bool = False) -> bool:
    """The mount's settings (see above) for blocks of *block_size*: two arenas (with
    glibc's default, a thread's arena hoarded freed blocks: RSS 700 MiB with a 256 MiB
    RAM tier, 348 MiB with two), the mmap threshold just above a block as LMDB stores it,
    the heap trimmed past one block and 4 MiB free.

    False, and every buffer of 1 MiB or more mapped (LMDB's copies included), where this
    is not glibc, where a block is too large for the heap (past 32 MiB), and in a mount
    of a cache group (*peers*): there blocks also arrive as gRPC messages of a block's
    size, which would come from the heap too, several at once. Measured with
    bench/run_group_bench.py (the mount reading 256 MiB from peers, RAM tier 256 MiB):
    VmHWM 424 and 435 MiB with the heap settings, 417 and 418 with large buffers mapped
    (398, 405 and 412 before, when blocks from peers never became spare buffers). A
    group file that appears after the mount started leaves the heap settings: within
    the bound still, by those figures."""
    global _map_at
    threshold = block_size + 2 * _PAGE
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(_M_ARENA_MAX, 2)
        if not peers and threshold <= _MMAP_THRESHOLD \
                and libc.mallopt(_M_MMAP_THRESHOLD, threshold) \
                and libc.mallopt(_M_TRIM_THRESHOLD, block_size + (4 << 20)):
            _map_at = threshold
            return True
        libc.mallopt(_M_MMAP_THRESHOLD, _MAPPED_FROM)
    except (OSError, AttributeError):
        pass
    _map_at = None
    return False


def block_buffer(n: int) -> bytearray:
    """An uninitialised buffer of *n* bytes, mapped apart from the heap when it is 1 MiB
    or more in a mount (``tune_for_mount``): one the RAM tier keeps, returned whole to the
    system when it is let go."""
    if _map_at is None or n < _MAPPED_FROM:
        return _new_bytearray(None, n)
    buf = _new_bytearray(None, max(n, _map_at) + _PAGE)
    del buf[n:]
    return buf
