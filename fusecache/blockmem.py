"""glibc malloc settings for the processes that move 8 MiB blocks.

Who calls it: ``mount.run_foreground`` (every ``fusecache mount``) and prefetchd's
``warm`` and ``run`` commands, once at start, before any block is read. Nothing else:
the settings are process-wide, so a library user of the API keeps its own.

Data flow: none. Every block is an 8 MiB buffer (obstore's response body, a block
read back from the node cache, LMDB's copy of a block being stored). glibc maps a
buffer that large afresh by default (or after a free trims the heap under it), and
each fresh 8 MiB mapping costs 2,048 page faults and zeroed pages. With the
threshold at glibc's largest (32 MiB) the buffers come from the heap, and a freed
one is reused by the next block; the heap is trimmed only past 256 MiB free (a peak
already reached). One arena, not one per thread, so a buffer freed by one thread
(the FUSE loop dropping a block from the RAM tier) serves the next allocation of
another (a GET's worker thread, the write-behind thread).

Measured on the 2-core bench VM (512 MiB object, page cache dropped): reading the
node cache back, ``NodeCache.get_block`` spent 0.71-0.85 CPU-s with fresh mappings
against 0.18-0.27 s with reused buffers; a cold read through a mount 2.2-2.5 CPU-s
against 1.4-1.6 s. The peak RSS of that cold read rose by 25-40 MiB with one arena
(50-60 MiB with two; with glibc's default of 8 per core it once reached 700 MiB
against a 256 MiB RAM tier).
"""

from __future__ import annotations

import ctypes

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
_MMAP_THRESHOLD = 32 << 20   # glibc's largest: an 8 MiB block buffer comes from the heap
_TRIM_THRESHOLD = 256 << 20


def reuse_block_buffers() -> bool:
    """Apply the settings above to this process; False where this is not glibc."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(_M_ARENA_MAX, 1)
                    and libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)
                    and libc.mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD))
    except (OSError, AttributeError):
        return False
