"""The RAM tier: per-process, LRU, bounded in bytes.

Holds whole blocks keyed like the node cache. Used from the trio thread only, so
it needs no lock.
"""

from __future__ import annotations

from collections import OrderedDict


class RamCache:
    def __init__(self, limit_bytes: int) -> None:
        self.limit_bytes = limit_bytes
        self.used_bytes = 0
        self._blocks: OrderedDict[bytes, bytes] = OrderedDict()

    def get(self, key: bytes) -> bytes | None:
        data = self._blocks.get(key)
        if data is not None:
            self._blocks.move_to_end(key)
        return data

    def __contains__(self, key: bytes) -> bool:
        return key in self._blocks

    def put(self, key: bytes, data: bytes) -> None:
        if len(data) > self.limit_bytes:
            return
        old = self._blocks.pop(key, None)
        if old is not None:
            self.used_bytes -= len(old)
        self._blocks[key] = data
        self.used_bytes += len(data)
        while self.used_bytes > self.limit_bytes:
            _, evicted = self._blocks.popitem(last=False)
            self.used_bytes -= len(evicted)

    def discard(self, key: bytes) -> None:
        old = self._blocks.pop(key, None)
        if old is not None:
            self.used_bytes -= len(old)

    def __len__(self) -> int:
        return len(self._blocks)
