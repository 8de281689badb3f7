"""The outage parts without FUSE: circuit breaker, offline-authorisation records and gate,
and the namespace's stale-if-error over the FakeStore."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import trio

from fusecache import errors
from fusecache.circuit import CircuitBreaker
from fusecache.cliargs import parse_duration
from fusecache.config import S3Location
from fusecache.listings import ListingCache
from fusecache.namespace import ROOT_INODE, Namespace
from fusecache.nodecache import NodeCache
from fusecache.offline_auth import OfflineAuth, OfflineGate, load_key

from fakes import FakeStore


def _wait(cond, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def test_breaker_fails_fast_until_probe_answers() -> None:
    answering = threading.Event()
    probes = []
    events = []

    def probe() -> None:
        probes.append(1)
        if not answering.is_set():
            raise ConnectionError("refused")

    b = CircuitBreaker(probe, probe_interval=0.01, on_event=events.append)
    b.check()  # closed: no error
    b.trip("ConnectTimeoutError")
    b.trip("again")  # idempotent
    with pytest.raises(errors.StoreUnavailable, match="failing fast"):
        b.check("GET x")
    _wait(lambda: len(probes) >= 3)
    assert b.is_open
    answering.set()
    _wait(lambda: not b.is_open)
    b.check()
    _wait(lambda: "close" in events)  # the probe thread reports it just after closing
    assert events.count("open") == 1 and events.count("close") == 1
    assert "fast_fail" in events
    b.trip("second outage")  # a new probe thread starts
    _wait(lambda: not b.is_open)
    b.shutdown()


def test_offline_auth_records_by_keyed_hash(tmp_path: Path) -> None:
    cache = NodeCache.open(tmp_path, limit_bytes=1 << 26)
    try:
        key = load_key(tmp_path)
        assert load_key(tmp_path) == key and len(key) == 32
        assert (tmp_path / "offline-auth.key").stat().st_mode & 0o777 == 0o600
        now = [1000.0]
        auth = OfflineAuth(cache.env, key, clock=lambda: now[0])
        a, b = auth.tag("AKIA-A"), auth.tag("AKIA-B")
        assert a != b and b"AKIA" not in a
        assert OfflineAuth(cache.env, bytes(32)).tag("AKIA-A") != a  # keyed
        # another S3 service's bucket of the same name is another bucket (a new user's
        # walkthrough: a mount with no endpoint served a local MinIO's cached copy as AWS's)
        minio = auth.tag("AKIA-A", "http://127.0.0.1:9000")
        assert minio not in (a, b) and auth.tag("AKIA-A", "http://127.0.0.1:9000/") == minio
        auth.record(minio, "bkt", "data/", 950.0)
        assert OfflineGate(auth, "AKIA-A", "bkt", "data/", max_age=1e9, clock=lambda: now[0],
                           endpoint="http://127.0.0.1:9000").age() == 50.0
        with pytest.raises(errors.AccessDenied, match="never authorised"):
            OfflineGate(auth, "AKIA-A", "bkt", "data/", max_age=1e9, clock=lambda: now[0],
                        endpoint="https://s3.amazonaws.com").check()
        auth.record(a, "bkt", "data/", 900.0)
        assert auth.authorised_at(a, "bkt", "data/") == 900.0
        assert auth.authorised_at(a, "bkt", "data/train/") == 900.0  # below it
        assert auth.authorised_at(a, "bkt", "") is None             # not above it
        assert auth.authorised_at(a, "other", "data/") is None
        assert auth.authorised_at(b, "bkt", "data/") is None
        auth.record(a, "bkt", "data/", 800.0)  # older never replaces newer
        assert auth.authorised_at(a, "bkt", "data/") == 900.0

        gate_a = OfflineGate(auth, "AKIA-A", "bkt", "data/train/", max_age=150,
                             clock=lambda: now[0])
        gate_a.check()  # 100 s old, bound 150
        now[0] = 1100.0
        with pytest.raises(errors.AccessDenied, match="200s ago"):
            gate_a.check()
        gate_b = OfflineGate(auth, "AKIA-B", "bkt", "data/train/", max_age=150,
                             clock=lambda: now[0])
        with pytest.raises(errors.AccessDenied, match="never authorised"):
            gate_b.check()
        with pytest.raises(errors.AccessDenied, match="no credential"):
            OfflineGate(auth, None, "bkt", "data/", max_age=150).check()

        # The gate records the store's successes, and a denial revokes.
        gate_a.sync(authorised_at=1090.0, denied_at=0.0)
        gate_a.check()
        gate_a.sync(authorised_at=1090.0, denied_at=1095.0)
        assert auth.authorised_at(a, "bkt", "data/") is None
        with pytest.raises(errors.AccessDenied):
            gate_a.check()
    finally:
        cache.close()


def test_parse_duration() -> None:
    assert parse_duration("90", "--x") == 90
    assert parse_duration("30m", "--x") == 1800
    assert parse_duration("24h", "--x") == 86400
    for bad in ("0", "-5", "1w", "soon", "inf"):
        with pytest.raises(ValueError, match="--x"):
            parse_duration(bad, "--x")


def test_namespace_stale_if_error_and_gate(tmp_path: Path) -> None:
    """Expired metadata + S3 unreachable: answers from the last known state, fast, once
    authorised; with the gate refusing, AccessDenied."""
    store = FakeStore("bkt")
    store.put("d/a.bin", b"a" * 10)
    cache = NodeCache.open(tmp_path, limit_bytes=1 << 26)
    now = [1000.0]
    clock = lambda: now[0]  # noqa: E731
    listings = ListingCache(cache.env, clock=clock)
    down = [False]

    def probe() -> None:
        if down[0]:
            raise ConnectionError("down")

    breaker = CircuitBreaker(probe, probe_interval=0.01)
    allowed = [True]

    class Gate:
        def check(self) -> None:
            if not allowed[0]:
                raise errors.AccessDenied("not authorised")

    stale: list[str] = []
    ns = Namespace(store, listings, S3Location("bkt", ""), ttl=10, clock=clock,
                   breaker=breaker, offline=Gate(), op_timeout=5, on_stale=stale.append)

    async def main() -> None:
        d = await ns.lookup(ROOT_INODE, "d")
        await ns.ensure_listing(d)
        f = await ns.lookup(d.ino, "a.bin")
        assert f.size == 10
        now[0] += 60  # everything expired
        down[0] = True
        breaker.trip("test")
        calls = dict(store.calls)
        rec = await ns.ensure_listing(d)
        assert rec.count == 1
        assert (await ns.revalidate(f)).size == 10
        assert (await ns.lookup(d.ino, "a.bin")).etag == f.etag
        assert dict(store.calls) == calls  # nothing asked S3: the breaker is open
        assert set(stale) == {"listing", "lookup", "attributes"}
        with pytest.raises(errors.ObjectNotFound):  # the last listing says so
            await ns.lookup(d.ino, "unknown.bin")
        with pytest.raises(errors.StoreUnavailable):  # nothing known: cannot say
            await ns.lookup(ROOT_INODE, "never-seen")
        allowed[0] = False
        with pytest.raises(errors.AccessDenied):
            await ns.revalidate(f)
        with pytest.raises(errors.AccessDenied):
            await ns.lookup(d.ino, "a.bin")

    try:
        trio.run(main)
    finally:
        breaker.shutdown()
        cache.close()
