"""Model-based test of the fs core: random reads and remote mutations against a dict.

Hypothesis drives Namespace + BlockReader (with the RAM tier and a real node
cache) over a counting fake store, mutating "S3" between reads; after every step
the bytes read must equal the model's. TTL 0 means every access revalidates, so
a mutation must be visible at once and no stale block may ever be served.
"""

from __future__ import annotations

import shutil
import tempfile

import trio
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from fusecache import errors
from fusecache.config import S3Location
from fusecache.listings import ListingCache
from fusecache.metrics import Metrics
from fusecache.namespace import ROOT_INODE, Namespace
from fusecache.nodecache import NodeCache
from fusecache.ramcache import RamCache
from fusecache.reader import BlockReader, ReadState

from fakes import FakeStore, ramp

BS = 4096
NAMES = st.sampled_from(["a", "b", "c.bin"])


class FsCoreModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.mkdtemp(prefix="fc-model-")
        self.store = FakeStore()
        self.model: dict[str, bytes] = {}
        self.cache = NodeCache.open(self.tmp, limit_bytes=64 * BS, block_size=BS)
        self.ns = Namespace(self.store, ListingCache(self.cache.env), S3Location("fake", ""),
                            ttl=0)
        self.reader = BlockReader(self.store, RamCache(16 * BS), self.cache, Metrics(),
                                  block_size=BS, readahead_budget=4 * BS,
                                  readahead_max=4 * BS, max_connections=4, read_timeout=10)
        self.version = 0

    def teardown(self) -> None:
        self.cache.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _run(self, fn):
        async def main():
            async with trio.open_nursery() as n:
                await n.start(self.reader.run)
                try:
                    return await fn()
                finally:
                    n.cancel_scope.cancel()
        return trio.run(main)

    # A few sizes recur, so a new version often has the old one's size: only the
    # ETag then tells their blocks apart.
    @rule(name=NAMES, size=st.sampled_from([0, 7, BS - 1, BS, 2 * BS + 5, 3 * BS + 17]))
    def remote_put(self, name: str, size: int) -> None:
        self.version += 1
        data = ramp(f"{name}-{self.version}", size)  # every version has different bytes
        self.store.put(name, data)
        self.model[name] = data

    @rule(name=NAMES)
    def remote_delete(self, name: str) -> None:
        self.store.objects.pop(name, None)
        self.model.pop(name, None)

    @rule(name=NAMES, where=st.floats(0, 1.05), size=st.integers(1, 2 * BS + 3),
          sequential=st.booleans())
    def read(self, name: str, where: float, size: int, sequential: bool) -> None:
        offset = int(where * len(self.model.get(name, b"")))
        async def go():
            try:
                node = await self.ns.lookup(ROOT_INODE, name)
            except errors.ObjectNotFound:
                return None
            node = await self.ns.revalidate(node)
            state = ReadState() if sequential else None
            return bytes(await self.reader.read(self.ns.object_id(node), offset, size, state))
        got = self._run(go)
        if name not in self.model:
            assert got is None, f"{name} was deleted but still read"
        else:
            assert got == self.model[name][offset:offset + size]

    @invariant()
    def disk_cache_within_bound(self) -> None:
        assert self.cache.stats().used_bytes <= self.cache.limit_bytes


FsCoreModel.TestCase.settings = settings(max_examples=150, stateful_step_count=30,
                                         deadline=None)
test_fs_core_against_a_dict_model = FsCoreModel.TestCase


def test_same_size_new_version_is_never_served_stale() -> None:
    """Pinned regression: only the ETag tells these two versions' blocks apart."""
    m = FsCoreModel()
    try:
        m.remote_put("a", BS)
        m.read("a", 0.0, 100, False)
        m.remote_put("a", BS)
        m.read("a", 0.0, 100, True)
    finally:
        m.teardown()
