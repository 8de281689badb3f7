"""Helpers of the fault tests: an object to read, ``prefetchd warm`` and ``fusecache
stats`` as processes, and the node cache's view of an object's blocks."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from fusecache import nodecache
from fusecache.locals3 import LocalS3
from fusecache.nodecache import NodeCache, ObjectId

BLOCK = 1 << 20


@dataclass
class Obj:
    bucket: str
    key: str
    data: bytes
    etag: str

    @property
    def sha(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @property
    def blocks(self) -> int:
        return (len(self.data) + BLOCK - 1) // BLOCK

    @property
    def oid(self) -> ObjectId:
        return ObjectId(self.bucket, self.key, self.etag, len(self.data))


def put_object(s3: LocalS3, bucket: str, key: str, size: int) -> Obj:
    data = os.urandom(size)
    r = s3.client().put_object(Bucket=bucket, Key=key, Body=data)
    return Obj(bucket, key, data, r["ETag"].strip('"'))


def new_cache(path: Path) -> Path:
    """Create a node cache with 1 MiB blocks (warm then uses the cache's own size)."""
    NodeCache.open(path, limit_bytes=1 << 30, block_size=BLOCK).close()
    return path


def run_warm(uri: str, cache: Path, endpoint: str, env: dict[str, str],
             *extra: str, timeout: float = 180) -> subprocess.CompletedProcess:
    full = dict(os.environ)
    full.pop("AWS_CA_BUNDLE", None)
    full.update(env)
    return subprocess.run([sys.executable, "-m", "prefetchd.cli", "warm", uri,
                           "--cache-dir", str(cache), "--endpoint-url", endpoint,
                           "--json", *extra],
                          env=full, capture_output=True, text=True, timeout=timeout)


def stats(cache: Path) -> dict:
    r = subprocess.run([sys.executable, "-m", "fusecache.cli", "stats", "--cache-dir",
                        str(cache), "--json"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def wait_counter(cache: Path, name: str, at_least: int, timeout: float = 20) -> dict:
    """Poll ``fusecache stats --json`` until counter *name* reaches *at_least*."""
    deadline = time.monotonic() + timeout
    while True:
        st = stats(cache)
        if st[name] >= at_least or time.monotonic() > deadline:
            return st
        time.sleep(0.2)


def cached_bytes(cache: Path, o: Obj) -> dict[int, bytes]:
    """The blocks of *o* the node cache holds (verified reads), by index."""
    c = NodeCache.open(cache)
    try:
        out = {}
        for i in range(o.oid.block_count(c.block_size)):
            b = c.get_block(o.oid, i)
            if b is not None:
                out[i] = b
        return out
    finally:
        c.close()


def check_cache(cache_dir: Path, objs: dict[str, Obj]) -> int:
    """Every block exact or absent; bookkeeping exact. Returns the live blocks."""
    c = NodeCache.open(cache_dir)
    try:
        with c.env.begin() as txn:
            def keys(db: object) -> set[bytes]:
                return set(txn.cursor(db=db).iternext(keys=True, values=False))
            blocks, bmeta, boffs = keys(c._blocks), keys(c._bmeta), keys(c._boffs)
            slot_of = {k: nodecache._U64.unpack(v)[0]
                       for k, v in txn.cursor(db=c._bslot).iternext()}
            free = {nodecache._SLOT.unpack(k)[0] for k in keys(c._freeslots)}
            raw_slots = txn.get(b"slots", db=c._meta)
            n_slots = nodecache._U64.unpack(raw_slots)[0] if raw_slots else 0
            lru = {k[8:] for k in keys(c._lru)}
            objects = keys(c._objects)
            used = nodecache._U64.unpack(txn.get(b"used", db=c._meta))[0]
            metas = [bytes(txn.get(k, db=c._bmeta)) for k in bmeta]
            lengths = sum(nodecache._BMETA.unpack_from(m)[1] for m in metas)
            for m in metas:  # its granules' crc32s: all of them, or none (a small block)
                n = nodecache._BMETA.unpack_from(m)[1]
                want = 4 * -(-n // nodecache.GRANULE) if n > nodecache.GRANULE else 0
                assert len(m) == nodecache._BMETA.size + want, "granule checksums cut short"
            n_lru = txn.stat(c._lru)["entries"]
        assert not blocks & set(slot_of), "a block both in data.mdb and in a slot"
        assert blocks | set(slot_of) == bmeta, "blocks without metadata or metadata without block"
        held = list(slot_of.values())
        assert len(set(held)) == len(held), "two blocks in one slot"
        assert set(held) | free == set(range(n_slots)) and not set(held) & free, \
            f"slots: {sorted(held)} held, {sorted(free)} free, {n_slots} in all"
        assert lru == bmeta and n_lru == len(bmeta), "LRU order disagrees with the blocks"
        assert boffs <= bmeta, "an offset recorded for a block that is not there"
        assert objects == {k[:16] for k in bmeta}, "object records disagree with the blocks"
        assert used == lengths, f"used {used} != sum of live blocks {lengths}"
        live = 0
        for o in objs.values():
            for i in range(o.blocks):
                got = c.get_block(o.oid, i)
                if got is not None:
                    live += 1
                    assert got == o.data[i * BLOCK:(i + 1) * BLOCK], f"wrong bytes {o.key}#{i}"
        assert live == len(bmeta)
        assert c.stats().counters["integrity_errors"] == 0
        return live
    finally:
        c.close()
