"""The peer protocol's block replies in protobuf wire format, without protobuf.

Who calls it: the peer server (``encode_response``, its GetBlock reply; ``encode_chunks``,
its ReadBlock replies; ``encode_batch``, its GetBlocks reply) and the peer client
(``decode_response``, ``decode_batch``). The messages are ``GetBlockResponse`` and
``GetBlocksResponse`` of ``fusecache/proto/peer.proto``; requests stay ordinary protobuf
messages.

Why by hand: protobuf copies a block into its message and again when it serialises
(server), and returns a new copy of ``data`` at every attribute access (client). Per
8 MiB block that measured 27 ms of serialising on a busy core. Here the server copies the
block once (header + data joined into the reply) and the client takes ``data`` as a view
of the received bytes. The bytes on the wire are the same protobuf message, so stock
protobuf peers (older servers, the tests' fakes) still interoperate.
"""

from __future__ import annotations

from collections.abc import Iterator

_CRC = 0x10   # field 2, varint
_KEY = 0x1A   # field 3, length-delimited
_DATA = 0x0A  # field 1, length-delimited
_BLOCKS = 0x0A  # GetBlocksResponse.blocks: field 1, length-delimited


class WireError(ValueError):
    """A reply that is not a well-formed GetBlockResponse."""


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _head(data: bytes | memoryview, crc: int, key: bytes) -> bytes:
    """A GetBlockResponse up to its data: fields crc32, block_key, then data's tag and
    length (any order of fields is valid)."""
    return b"".join((bytes((_CRC,)), _varint(crc), bytes((_KEY,)), _varint(len(key)), key,
                     bytes((_DATA,)), _varint(len(data))))


def encode_response(data: bytes, crc: int, key: bytes) -> bytes:
    """A GetBlockResponse."""
    return b"".join((_head(data, crc, key), data))


def encode_chunks(data: bytes, crc: int, key: bytes, chunk: int) -> Iterator[bytes]:
    """ReadBlock's replies for a block: GetBlockResponse messages of at most *chunk* bytes
    of data, crc32 and block_key in the first only (one message for an empty block)."""
    view = memoryview(data)
    yield b"".join((_head(view[:chunk], crc, key), view[:chunk]))
    for pos in range(chunk, len(view), chunk):
        part = view[pos:pos + chunk]
        yield b"".join((bytes((_DATA,)), _varint(len(part)), part))


def encode_batch(blocks: list[tuple[bytes, int, bytes] | None]) -> bytes:
    """A GetBlocksResponse: one GetBlockResponse per (data, crc, key), an empty one for
    None (not cached); the blocks' bytes are copied once, into the reply."""
    parts: list[bytes] = []
    for item in blocks:
        if item is None:
            parts.append(bytes((_BLOCKS, 0)))
            continue
        data, crc, key = item
        head = _head(data, crc, key)
        parts += (bytes((_BLOCKS,)), _varint(len(head) + len(data)), head, data)
    return b"".join(parts)


def decode_batch(raw: bytes) -> list[tuple[memoryview, int, bytes] | None]:
    """The answers of a GetBlocksResponse in order, None for an empty one (not cached
    there); each block's data is a view of *raw*. WireError when malformed."""
    view = memoryview(raw)
    out: list[tuple[memoryview, int, bytes] | None] = []
    pos, n = 0, len(raw)
    while pos < n:
        tag, pos = _read_varint(raw, pos)
        if tag != _BLOCKS:
            raise WireError(f"unexpected field tag {tag} in a GetBlocksResponse")
        size, pos = _read_varint(raw, pos)
        if pos + size > n:
            raise WireError("answer runs past the end of the reply")
        data, crc, key = decode_response(view[pos:pos + size])
        out.append(None if not key and not len(data) else (data, crc, key))
        pos += size
    return out


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise WireError("truncated varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7


def decode_response(raw: bytes | memoryview) -> tuple[memoryview, int, bytes]:
    """(data, crc32, block_key) of a GetBlockResponse; ``data`` is a view of *raw*.

    Unknown fields are skipped, as protobuf does; WireError when *raw* is malformed.
    """
    view = memoryview(raw)
    data, crc, key = view[0:0], 0, b""
    pos, n = 0, len(raw)
    while pos < n:
        tag, pos = _read_varint(raw, pos)
        kind = tag & 7
        if kind == 0:
            value, pos = _read_varint(raw, pos)
            if tag == _CRC:
                crc = value & 0xFFFFFFFF
        elif kind == 2:
            size, pos = _read_varint(raw, pos)
            if pos + size > n:
                raise WireError("field runs past the end of the reply")
            if tag == _DATA:
                data = view[pos:pos + size]
            elif tag == _KEY:
                key = bytes(view[pos:pos + size])
            pos += size
        elif kind == 5:
            pos += 4
        elif kind == 1:
            pos += 8
        else:
            raise WireError(f"unsupported wire type {kind}")
    if pos != n:
        raise WireError("field runs past the end of the reply")
    return data, crc, key
