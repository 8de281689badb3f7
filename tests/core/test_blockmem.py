"""blockmem's malloc settings, each checked in a process of its own (they are
process-wide): in a mount, a block's buffer is a mapping of its own, returned whole to the
system when the RAM tier lets it go; in prefetchd, block buffers come from the heap, where
a freed one serves the next."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

_PROBE = r"""
import ctypes, json, sys
from fusecache import blockmem

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
        "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2
assert (blockmem.tune_for_mount() if sys.argv[1] == "mount"
        else blockmem.reuse_block_buffers())
out = {}
for n in (8 << 20, 3 << 20, 100 << 10):
    before = libc.mallinfo2().hblkhd
    buf = blockmem.block_buffer(n)
    out[n] = [len(buf), libc.mallinfo2().hblkhd - before]
    del buf
    out[n].append(libc.mallinfo2().hblkhd - before)
print(json.dumps(out))
"""


def _probe(settings: str) -> dict[int, list[int]]:
    r = subprocess.run([sys.executable, "-c", _PROBE, settings], capture_output=True,
                       text=True, timeout=60, cwd=Path(__file__).resolve().parents[2])
    assert r.returncode == 0, r.stderr
    return {int(k): v for k, v in json.loads(r.stdout).items()}


def test_a_mount_maps_large_buffers_apart_and_returns_them() -> None:
    got = _probe("mount")
    for n, (length, mapped, after_free) in got.items():
        assert length == n
        assert mapped >= n if n >= 1 << 20 else mapped == 0, (n, mapped)
        assert after_free == 0, (n, after_free)


def test_prefetchd_takes_block_buffers_from_the_heap() -> None:
    got = _probe("prefetchd")
    for n, (length, mapped, _) in got.items():
        assert length == n
        assert mapped == 0, (n, mapped)
