"""The relay's record of what the kernel holds, from real FUSE wire layouts.

The byte layouts are the kernel's (include/uapi/linux/fuse.h): fuse_in_header,
fuse_entry_out (128 bytes, attr.mode at 100), fuse_direntplus, fuse_forget_in,
fuse_batch_forget_in. The end-to-end tests (test_csi_survival.py) show the result
through real mounts; this pins the parsing itself.
"""

from __future__ import annotations

import struct
from pathlib import Path

from fusecache import relay

S_IFDIR, S_IFREG = 0o040000, 0o100000


def request(opcode: int, unique: int, nodeid: int, body: bytes = b"") -> bytes:
    return relay.IN_HDR.pack(relay.IN_HDR.size + len(body), opcode, unique, nodeid,
                             0, 0, 0, 0, 0) + body


def entry_out(nodeid: int, mode: int) -> bytes:
    attr = struct.pack("<QQQQQQIIIIIIIIII", nodeid, 0, 0, 0, 0, 0, 0, 0, 0, mode,
                       1, 0, 0, 0, 0, 0)
    out = struct.pack("<QQQQII", nodeid, 0, 0, 0, 0, 0) + attr
    assert len(out) == relay.ENTRY_OUT_SIZE
    return out


def direntplus(nodeid: int, name: str, mode: int, off: int) -> bytes:
    raw = name.encode()
    rec = entry_out(nodeid, mode) + struct.pack("<QQII", nodeid, off, len(raw), 0) + raw
    return rec + b"\0" * (-len(rec) % 8)


def fresh() -> relay.Relay:
    return relay.Relay(-1, Path("/nonexistent"), 1.0)


def reply(r: relay.Relay, opcode: int, nodeid: int, body: bytes, name: str = "") -> list[int]:
    p = relay._Pending(opcode, nodeid, b"", 0.0, name=name)
    with r.state_lock:
        return r._record_reply(p, memoryview(body))


def test_lookups_readdirplus_and_forgets_are_counted_like_the_kernel() -> None:
    r = fresh()
    reply(r, relay.LOOKUP, 1, entry_out(10, S_IFDIR), name="dir")
    listing = (direntplus(1, ".", S_IFDIR, 1) + direntplus(10, "dir", S_IFDIR, 2)
               + direntplus(11, "a.txt", S_IFREG, 3) + direntplus(0, "skipped", S_IFREG, 4))
    assert reply(r, relay.READDIRPLUS, 1, listing) == [10, 11]
    assert r.table.nodes == {10: [1, "dir", True, 2], 11: [1, "a.txt", False, 1]}
    r._send = lambda data, unique: None  # no server in this test
    r._from_kernel(request(relay.FORGET, 1, 11, struct.pack("<Q", 1)))
    batch = struct.pack("<II", 1, 0) + struct.pack("<QQ", 10, 1)
    r._from_kernel(request(relay.BATCH_FORGET, 2, 0, batch))
    assert r.table.nodes == {10: [1, "dir", True, 1]}
    assert r.pending == {}  # forgets have no reply: nothing waits for one


def test_open_handles_are_recorded_until_release() -> None:
    r = fresh()
    r._send = lambda data, unique: None
    reply(r, relay.OPEN, 11, struct.pack("<QIi", 7, 0, 0))
    reply(r, relay.OPENDIR, 10, struct.pack("<QIi", 8, 0, 0))
    assert r.table.to_json()["files"] == [(7, 11)]
    assert r.table.to_json()["dirs"] == [(8, 10)]
    r._from_kernel(request(relay.RELEASE, 5, 11, struct.pack("<QIIQ", 7, 0, 0, 0)))
    r._from_kernel(request(relay.RELEASEDIR, 6, 10, struct.pack("<QIIQ", 8, 0, 0, 0)))
    assert r.table.files == {} and r.table.dirs == {}
    assert sorted(r.pending) == [5, 6]  # releases are answered: kept until then


def test_a_lookup_request_keeps_its_name_for_the_reply() -> None:
    r = fresh()
    r._send = lambda data, unique: None
    r._from_kernel(request(relay.LOOKUP, 9, 1, b"b.bin\0"))
    assert r.pending[9].name == "b.bin" and r.pending[9].nodeid == 1


def test_forgets_while_a_server_starts_are_kept_for_it() -> None:
    """A FORGET after the starting server's table was taken reaches that server once
    it is attached (its table does not have it); one before is in the table."""
    r = fresh()
    reply(r, relay.LOOKUP, 1, entry_out(10, S_IFREG), name="x")
    reply(r, relay.LOOKUP, 1, entry_out(10, S_IFREG), name="x")
    sent: list[bytes] = []
    r._send = lambda data, unique: sent.append(data)
    r.late_forgets = []  # what _spawn sets when it writes the table
    forget = request(relay.FORGET, 3, 10, struct.pack("<Q", 1))
    r._from_kernel(forget)
    assert r.late_forgets == [forget] and sent == []
    assert r.table.nodes[10][3] == 1
