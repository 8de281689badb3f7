"""blockmem's malloc settings for the mount, each checked in a process of its own (the
settings are process-wide): LMDB's copy of a stored block reuses heap memory instead of
mapping (and faulting in) a fresh 8 MiB, while the buffers the RAM tier keeps are mapped
apart from the heap, so that letting one go returns its memory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BS = 8 << 20

_PROBE = r"""
import ctypes, json, resource, sys
from fusecache import blockmem
from fusecache.nodecache import NodeCache, ObjectId

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
        "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2
mode, cache_dir, bs = sys.argv[1], sys.argv[2], int(sys.argv[3])
if mode == "tuned":
    assert blockmem.tune_for_mount(bs)
elif mode == "peers":  # a node of a cache group keeps every large buffer mapped
    assert not blockmem.tune_for_mount(bs, peers=True)
else:  # the mount's settings before: every allocation of 1 MiB or more mapped
    libc.mallopt(-8, 2)
    libc.mallopt(-3, 1 << 20)

def mapped() -> int:
    return libc.mallinfo2().hblkhd

out = {}
for n in (bs, 3 << 20, 100 << 10):
    before = mapped()
    buf = blockmem.block_buffer(n)
    out[f"len_{n}"] = len(buf)
    out[f"mapped_{n}"] = mapped() - before
    del buf
    out[f"mapped_after_del_{n}"] = mapped() - before

disk = NodeCache.open(cache_dir, limit_bytes=64 * bs, block_size=bs)
block = blockmem.block_buffer(bs)
for i in range(0, bs, 1 << 16):  # filled piecewise: no block-sized temporary in the heap
    block[i:i + (1 << 16)] = bytes([i >> 16 & 255]) * (1 << 16)
faults = []
for i in range(12):
    oid = ObjectId("b", f"k{i}", "e", bs)
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    assert disk.put_blocks([(oid, 0, block)]) == [True]
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
    assert disk.get_block(oid, 0, into=blockmem.block_buffer(bs)) == block
info = libc.mallinfo2()
out["faults"] = faults
out["heap_free"] = info.fordblks
disk.close()
print(json.dumps(out))
"""


def _probe(mode: str, tmp_path: Path) -> dict:
    r = subprocess.run([sys.executable, "-c", _PROBE, mode, str(tmp_path / mode), str(BS)],
                       capture_output=True, text=True, timeout=120,
                       cwd=Path(__file__).resolve().parents[2])
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_a_tuned_mount_stores_blocks_in_reused_heap_memory(tmp_path: Path) -> None:
    """Storing an 8 MiB block: LMDB copies it into pages it mallocs. With every 1 MiB
    mapped (the mount's settings before), each store mapped a fresh 8 MiB: 2,049 page
    faults per block. Tuned, the copy reuses the heap memory the last one freed."""
    tuned, before = _probe("tuned", tmp_path), _probe("untuned", tmp_path)
    assert min(before["faults"][2:]) >= 2048, before["faults"]
    assert max(tuned["faults"][2:]) < 1024, tuned["faults"]
    # and the heap keeps no more than one block's copy for the next (glibc trims the
    # heap's free top past a block and 4 MiB)
    assert tuned["heap_free"] <= BS + (4 << 20), tuned["heap_free"]


def test_a_tuned_mount_maps_large_buffers_apart_and_returns_them(tmp_path: Path) -> None:
    """What the RAM tier keeps (a block, a 3 MiB file) is a mapping of its own, of the
    length asked for, gone when let go; a small file's buffer comes from the heap."""
    got = _probe("tuned", tmp_path)
    for n in (BS, 3 << 20, 100 << 10):
        assert got[f"len_{n}"] == n
        assert got[f"mapped_after_del_{n}"] == 0
    assert got[f"mapped_{BS}"] >= BS
    assert 3 << 20 <= got[f"mapped_{3 << 20}"] < BS  # shrunk to its length
    assert got[f"mapped_{100 << 10}"] == 0


def test_a_cache_group_mount_keeps_large_buffers_mapped(tmp_path: Path) -> None:
    """In a mount of a cache group, block-sized gRPC messages would share the heap with
    LMDB's copies (several in flight: a higher peak), so every buffer of 1 MiB or more
    stays a mapping of its own, LMDB's copies included, as before the tuning."""
    got = _probe("peers", tmp_path)
    assert min(got["faults"][2:]) >= 2048, got["faults"]
    assert got[f"mapped_{3 << 20}"] >= 3 << 20
