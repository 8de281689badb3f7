"""glibc malloc settings for the processes that move blocks, and the buffers blocks live in.

Who calls it: prefetchd's ``warm`` and ``run`` commands (``reuse_block_buffers``) and
the mount (``tune_for_mount``), each once at start; the settings are process-wide, so a
library user of the API keeps its own. ``block_buffer``: the mount's reader, for every
new buffer a block is read into, and the cache group's client, for a block a peer sent
when it was lent no buffer (``peer_client._kept``).

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
against the 456 MiB bound). So every buffer of 1 MiB or more is mapped, and returned to
the system when freed; the reader reuses the buffers of blocks its RAM tier lets go
itself (reader.BlockReader._recycle). What that costs: LMDB's copy of each block it
stores is a fresh 8 MiB mapping, 2,049 page faults.

Tried and not kept (2026-12-05): glibc's malloc on transparent huge pages for the mount
(``GLIBC_TUNABLES=glibc.malloc.hugetlb=1`` in its environment at start; THP mode
"madvise"): a fresh 8 MiB buffer costs ~1,000 page faults instead of ~4,100 and was
filled at 2.6-2.7 GB/s instead of 0.9-1.0 in a loop, and a cold 512 MiB read through the
mount in bench/run_pair_bench.py (four rounds alternated) took 0.81-1.52 s of mount CPU
instead of 1.08-2.31 s. But in bench/run_bench.py, after the other readers had filled the
page cache, the same read took 2.31-2.64 s against 1.78-2.42 s (not looked into; the
kernel finding free huge pages in a full page cache is a guess) at 211-241 against
226-301 MB/s, and the mount's VmHWM rose to
442-449 MiB from 429-431, within 7 MiB of the bound (two runs each, alternated).

Tried and not kept (2026-12-05): the threshold just above one block as LMDB stores it
(block + 8 KiB, heap trimmed past block + 4 MiB free, one block per write transaction,
and the RAM tier's buffers mapped apart by asking for at least the threshold), so that
LMDB's copy reused the last one's heap memory. Cold 512 MiB read through the mount, 16
rounds alternated on 2 shared cores (12 of them bench/run_pair_bench.py): page faults
per pass 186-209 -> 63-88 thousand, mount CPU lower in 12 of 16 rounds, MB/s per round
0.66-1.61x (median 1.13x). But the mount's VmHWM rose by 9-17 MiB in every benchmark, to
within 5 MiB of the bound: bench/run_storm_bench.py's fill 432-437 -> 443-451 MiB,
1,500-file folders 428 -> 443, run_bench.py 429-430 -> 438-439;
bench/run_group_bench.py's mount reading from peers 417-418 -> 424-435 (block-sized gRPC
messages in the heap too).
"""

from __future__ import annotations

import ctypes

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
_MMAP_THRESHOLD = 32 << 20   # glibc's largest: an 8 MiB block buffer comes from the heap
_TRIM_THRESHOLD = 256 << 20
_MOUNT_MMAP_THRESHOLD = 1 << 20  # the mount: a buffer of 1 MiB or more is a mapping

# A bytearray whose bytes are not initialised: malloc only, so a fresh 8 MiB buffer is
# not zeroed page by page while the caller holds the GIL (bytearray(n) would); the read
# into it fills it with the GIL released. Never handed out unless filled whole.
_new_bytearray = ctypes.pythonapi.PyByteArray_FromStringAndSize
_new_bytearray.argtypes = [ctypes.c_char_p, ctypes.c_ssize_t]
_new_bytearray.restype = ctypes.py_object


def reuse_block_buffers() -> bool:
    """prefetchd's settings (above) for this process; False where this is not glibc."""
    return _mallopt((_M_ARENA_MAX, 1), (_M_MMAP_THRESHOLD, _MMAP_THRESHOLD),
                    (_M_TRIM_THRESHOLD, _TRIM_THRESHOLD))


def tune_for_mount() -> bool:
    """The mount's settings (above): two arenas (with glibc's default, a thread's arena
    hoarded freed blocks: RSS 700 MiB with a 256 MiB RAM tier, 348 MiB with two) and
    every allocation of 1 MiB or more mapped. False where this is not glibc."""
    return _mallopt((_M_ARENA_MAX, 2), (_M_MMAP_THRESHOLD, _MOUNT_MMAP_THRESHOLD))


def _mallopt(*settings: tuple[int, int]) -> bool:
    """glibc's mallopt for each (parameter, value), in order, until one is refused."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        return all(libc.mallopt(param, value) for param, value in settings)
    except (OSError, AttributeError):
        return False


def block_buffer(n: int) -> bytearray:
    """An uninitialised buffer of *n* bytes (in a mount, one of 1 MiB or more is a mapping
    of its own: returned whole to the system when the RAM tier lets it go)."""
    return _new_bytearray(None, n)
