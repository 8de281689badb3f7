"""glibc malloc settings for prefetchd's warm processes, which move 8 MiB blocks.

Who calls it: prefetchd's ``warm`` and ``run`` commands, once at start, before any
block is read. Nothing else: the settings are process-wide, so a library user of the
API keeps its own.

Data flow: none. Every block is an 8 MiB buffer (obstore's response body, LMDB's
copy of a block being stored). glibc maps a buffer that large afresh by default (or
after a free trims the heap under it), and each fresh 8 MiB mapping costs 2,048 page
faults and zeroed pages. With the threshold at glibc's largest (32 MiB) the buffers
come from the heap, and a freed one is reused by the next block; the heap is trimmed
only past 256 MiB free. One arena, so a buffer freed by one thread serves the next
allocation of another. Measured on the 2-core bench VM (512 MiB object, page cache
dropped): ``prefetchd warm`` 2.81-3.10 CPU-s -> 2.49-2.68 s.

Not for the mount: there, blocks live on in the RAM tier between small files' buffers,
and a later 8 MiB buffer no longer fits the holes they leave. Measured with these
settings in a mount (bench/run_bench.py, default sets): the heap grew by ~115 MiB in the
second sequential pass, peak RSS 455-498 MiB against 418 MiB before (limit 456). The
mount reuses its node-cache read buffers itself (``reader.BlockReader``) instead.
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
