"""The RAM tier: per-process, bounded in bytes, scan-resistant LRU.

Holds whole blocks keyed like the node cache. Two LRU segments share one bound:
blocks of *streamed* objects (large objects read through, e.g. shards) may use at
most ``stream_share`` of it, so a sequential pass over a shard larger than RAM
cannot evict the small hot files of the same job (measured in the bench: with
one LRU, a 512 MiB stream through a 256 MiB tier pushed 600 small files out and
their next pass fell from ~5,500 to ~3,500 files/s). Used from the trio thread
only, so it needs no lock. ``on_evict`` (set by the reader) sees each block the
bound pushes out, with its key: its buffer can serve the next block read from disk, and
a block fetched ahead that goes unread gives its read-ahead budget back.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable


class RamCache:
    def __init__(self, limit_bytes: int, stream_share: float = 0.5) -> None:
        self.on_evict: Callable[[bytes, bytes | bytearray], None] | None = None
        self.limit_bytes = limit_bytes
        self.stream_limit = int(limit_bytes * stream_share)
        self.used_bytes = 0
        self._stream_bytes = 0
        self._main: OrderedDict[bytes, bytes] = OrderedDict()
        self._stream: OrderedDict[bytes, bytes] = OrderedDict()

    def get(self, key: bytes) -> bytes | None:
        data = self._main.get(key)
        if data is not None:
            self._main.move_to_end(key)
            return data
        data = self._stream.get(key)
        if data is not None:
            self._stream.move_to_end(key)
        return data

    def __contains__(self, key: bytes) -> bool:
        return key in self._main or key in self._stream

    def put(self, key: bytes, data: bytes, stream: bool = False) -> None:
        """Insert a block; *stream* blocks live in the bounded stream segment."""
        if len(data) > (self.stream_limit if stream else self.limit_bytes):
            return
        self.discard(key)
        if stream:
            self._stream[key] = data
            self._stream_bytes += len(data)
            while self._stream_bytes > self.stream_limit:
                self._pop(self._stream, stream=True)
        else:
            self._main[key] = data
        self.used_bytes += len(data)
        while self.used_bytes > self.limit_bytes:
            # The stream segment gives way first: it is re-read from disk cheaply. But a
            # stream takes back the share plain blocks borrowed while no stream ran: with
            # the tier full of small files (an epoch over them), each block a shard's
            # reader had fetched ahead was pushed out by the next, before it was read.
            main_bytes = self.used_bytes - self._stream_bytes
            if self._stream and not (
                    stream and main_bytes > self.limit_bytes - self.stream_limit):
                self._pop(self._stream, stream=True)
            else:
                self._pop(self._main, stream=False)

    def _pop(self, segment: OrderedDict[bytes, bytes], stream: bool) -> None:
        key, evicted = segment.popitem(last=False)
        self.used_bytes -= len(evicted)
        if stream:
            self._stream_bytes -= len(evicted)
        if self.on_evict is not None:
            self.on_evict(key, evicted)

    def demote(self, key: bytes) -> None:
        """A streamed block its reader has read past goes first when room is needed:
        by access time alone, the blocks several readers of shards just read would stay
        and the blocks fetched ahead for them, older, would go before anyone read them."""
        if key in self._stream:
            self._stream.move_to_end(key, last=False)

    def discard(self, key: bytes) -> None:
        old = self._main.pop(key, None)
        if old is None:
            old = self._stream.pop(key, None)
            if old is not None:
                self._stream_bytes -= len(old)
        if old is not None:
            self.used_bytes -= len(old)

    def __len__(self) -> int:
        return len(self._main) + len(self._stream)
