"""HTTP faults of S3 x {a real ``fusecache mount``, ``prefetchd warm``}, end to end.

Each fault (500, 503 SlowDown, a reset in the body, a body shorter than its
Content-Length, a stall after the headers) is injected by the fault proxy between the
real process and SeaweedFS. A passing fault must leave exact bytes (sha256), exactly
one retry per spoiled request (the node cache's ``s3_retries`` counter, read with
``fusecache stats --json``) and one GET per block besides. A fault that persists must
end a FUSE read with EIO within ``--read-timeout`` (the whole bound) and cache nothing.
"""

from __future__ import annotations

import errno
import hashlib
import os
import signal
import time
from pathlib import Path

import pytest
from faultkit import BLOCK, Obj, cached_bytes, new_cache, put_object, run_warm, stats, wait_counter
from s3_fault_proxy import FaultProxy, Rule

from fusecache.locals3 import LocalS3

from mounting import force_unmount, free_port, mounted

pytestmark = [pytest.mark.s3]

# transient faults: each spoils the first two GETs of the object, then S3 is healthy
TRANSIENT = {
    "500": lambda key: Rule("status", key=key, status=500, times=2),
    "503-slowdown": lambda key: Rule("status", key=key, status=503, times=2),
    # (S3-compatible stores and gateways throttle with 429; it had failed at once: blind
    # FUSE round 5)
    "429-too-many": lambda key: Rule("status", key=key, status=429, times=2),
    "reset": lambda key: Rule("reset", key=key, after_bytes=1_000, times=2),
    "truncate": lambda key: Rule("truncate", key=key, after_bytes=1_000, times=2),
    # stalls 1 s after the headers, then the connection is closed (a short body)
    "stall": lambda key: Rule("stall", key=key, seconds=1.0, times=2),
}
# persistent faults: every GET of the object, for ever
PERSISTENT = {
    "500": lambda key: Rule("status", key=key, status=500, times=None),
    "503-slowdown": lambda key: Rule("status", key=key, status=503, times=None),
    "reset": lambda key: Rule("reset", key=key, after_bytes=1_000, times=None),
    "truncate": lambda key: Rule("truncate", key=key, after_bytes=1_000, times=None),
    "stall": lambda key: Rule("stall", key=key, seconds=None, times=None),
}
READ_TIMEOUT = 4.0
# What the process itself may add to the bound: the kernel's round trip and the
# scheduling of a loaded 2-core machine. Much less than the bound itself, so a read
# that waits for the bound twice (two requests, each given the whole timeout) fails.
EIO_SLACK = 1.5


def _mount_args(cache: Path, proxy: FaultProxy, read_timeout: float) -> list[str]:
    return ["--cache-dir", str(cache), "--endpoint-url", proxy.url,
            "--block-size", str(BLOCK), "--read-timeout", str(read_timeout)]


def _check_cached_exact(cache: Path, o: Obj) -> None:
    blocks = cached_bytes(cache, o)
    assert sorted(blocks) == list(range(o.blocks))
    assert hashlib.sha256(b"".join(blocks[i] for i in range(o.blocks))).hexdigest() == o.sha
    st = stats(cache)
    assert st["integrity_errors"] == 0
    assert st["used_bytes"] == len(o.data)


@pytest.mark.fuse
@pytest.mark.parametrize("fault", sorted(TRANSIENT))
def test_mount_rides_out_transient_fault(fault: str, local_s3: LocalS3, s3_env: dict,
                                         bucket: str, obj: Obj, proxy: FaultProxy,
                                         tmp_path: Path) -> None:
    cache = tmp_path / "c"
    with mounted(f"s3://{bucket}", tmp_path / "m", s3_env,
                 *_mount_args(cache, proxy, 30)) as mp:
        assert (mp / obj.key).stat().st_size == len(obj.data)
        proxy.add(TRANSIENT[fault](obj.key))
        got = (mp / obj.key).read_bytes()
        assert hashlib.sha256(got).hexdigest() == obj.sha
        assert proxy.spoiled(obj.key) == 2
        st = wait_counter(cache, "s3_retries", 2)
        assert st["s3_retries"] == 2, st
        # one GET per block, plus one per spoiled request
        gets = proxy.gets(obj.key)
        assert sorted(k for k in gets if k is not None) == [i * BLOCK for i in range(obj.blocks)]
        assert sum(gets.values()) == obj.blocks + 2, gets
    wait_counter(cache, "used_bytes", len(obj.data))
    _check_cached_exact(cache, obj)


@pytest.mark.fuse
@pytest.mark.parametrize("fault", sorted(PERSISTENT))
def test_mount_read_fails_with_eio_within_read_timeout(
        fault: str, local_s3: LocalS3, s3_env: dict, bucket: str, obj: Obj,
        proxy: FaultProxy, tmp_path: Path) -> None:
    cache = tmp_path / "c"
    port = free_port()
    with mounted(f"s3://{bucket}", tmp_path / "m", s3_env,
                 *_mount_args(cache, proxy, READ_TIMEOUT), "--metrics-port", str(port)) as mp:
        fd = os.open(mp / obj.key, os.O_RDONLY)
        try:
            proxy.add(PERSISTENT[fault](obj.key))
            t = time.monotonic()
            with pytest.raises(OSError) as e:
                # the first block's last bytes, which no fault lets through: bytes that
                # came before a body broke off are served (they are the object's), so a
                # read of the head of a truncated block succeeds, or comes back short
                os.pread(fd, 1000, BLOCK - 1000)
            took = time.monotonic() - t
        finally:
            os.close(fd)
        print(f"EIO after {took:.2f}s ({fault}, --read-timeout {READ_TIMEOUT:g})")
        assert e.value.errno == errno.EIO
        assert proxy.spoiled(obj.key) >= 1
        assert took <= READ_TIMEOUT + EIO_SLACK, (
            f"{fault}: EIO after {took:.2f}s, beyond --read-timeout {READ_TIMEOUT:g}s")
        if fault != "stall":  # a stalled request never ends within the bound: no retry
            st = wait_counter(cache, "s3_retries", 1)
            assert st["s3_retries"] >= 1
            # (it stayed 0 through every failure: blind FUSE round 5, F9)
            assert _metric(port, "fusecache_s3_errors_total") >= 1
        cached = cached_bytes(cache, obj)
        assert {i: b == obj.data[i * BLOCK:(i + 1) * BLOCK] for i, b in cached.items()} == {}
        assert stats(cache)["used_bytes"] == 0
        # S3 healthy again: the same mount serves exact bytes (no poisoned block)
        proxy.clear()
        deadline = time.monotonic() + 30
        while True:
            try:
                got = (mp / obj.key).read_bytes()
                break
            except OSError:
                # a failed block fails fast for a few seconds (the reader's memory of it)
                assert time.monotonic() < deadline
                time.sleep(0.5)
        assert hashlib.sha256(got).hexdigest() == obj.sha


@pytest.mark.parametrize("fault", sorted(TRANSIENT))
def test_warm_rides_out_transient_fault(fault: str, local_s3: LocalS3, s3_env: dict,
                                        bucket: str, obj: Obj, proxy: FaultProxy,
                                        tmp_path: Path) -> None:
    cache = new_cache(tmp_path / "c")
    proxy.add(TRANSIENT[fault](obj.key))
    r = run_warm(f"s3://{bucket}/data/", cache, proxy.url, s3_env, "--concurrency", "4")
    assert r.returncode == 0, r.stderr
    assert proxy.spoiled(obj.key) == 2
    assert stats(cache)["s3_retries"] == 2
    gets = proxy.gets(obj.key)
    assert sorted(gets) == [i * BLOCK for i in range(obj.blocks)]
    assert sum(gets.values()) == obj.blocks + 2, gets
    _check_cached_exact(cache, obj)


@pytest.mark.slow
def test_warm_reports_a_persistent_fault_and_caches_nothing_of_it(
        local_s3: LocalS3, s3_env: dict, bucket: str, obj: Obj, proxy: FaultProxy,
        tmp_path: Path) -> None:
    """warm has no --read-timeout: a request is retried for the store's 60 s deadline."""
    cache = new_cache(tmp_path / "c")
    proxy.add(PERSISTENT["503-slowdown"](obj.key))
    t = time.monotonic()
    r = run_warm(f"s3://{bucket}/data/", cache, proxy.url, s3_env, "--concurrency", "4")
    took = time.monotonic() - t
    print(f"warm gave up after {took:.1f}s")
    assert r.returncode == 1
    assert "1 objects failed" in r.stderr
    assert cached_bytes(cache, obj) == {}
    st = stats(cache)
    assert st["used_bytes"] == 0 and st["integrity_errors"] == 0
    assert st["s3_retries"] == proxy.spoiled(obj.key) - obj.blocks > 0


def test_delay_below_read_timeout_is_not_a_fault(local_s3: LocalS3, s3_env: dict,
                                                 bucket: str, obj: Obj, proxy: FaultProxy,
                                                 tmp_path: Path) -> None:
    cache = new_cache(tmp_path / "c")
    proxy.add(Rule("delay", key=obj.key, seconds=1.0, times=None))
    r = run_warm(f"s3://{bucket}/data/", cache, proxy.url, s3_env, "--concurrency", "4")
    assert r.returncode == 0, r.stderr
    assert proxy.spoiled(obj.key) == obj.blocks
    assert stats(cache)["s3_retries"] == 0
    _check_cached_exact(cache, obj)


def test_a_request_answered_late_within_the_bound_is_waited_for(
        local_s3: LocalS3, s3_env: dict, bucket: str, obj: Obj, proxy: FaultProxy,
        tmp_path: Path) -> None:
    """Blind FUSE round 3: a fixed 20 s per-request timeout made every answer later than 20 s
    a failure (EIO for a mount, whatever --read-timeout said); a request now waits as long
    as the operation's bound (60 s by default)."""
    cache = new_cache(tmp_path / "c")
    proxy.add(Rule("delay", key=obj.key, seconds=22.0, times=1))
    t = time.monotonic()
    r = run_warm(f"s3://{bucket}/data/", cache, proxy.url, s3_env, "--concurrency", "1")
    assert r.returncode == 0, r.stderr
    assert time.monotonic() - t >= 22
    _check_cached_exact(cache, obj)


@pytest.mark.fuse
def test_every_connection_reset_is_an_outage_not_a_minute_of_retries(
        local_s3: LocalS3, s3_env: dict, bucket: str, obj: Obj, proxy: FaultProxy,
        tmp_path: Path) -> None:
    """Blind FUSE round 3: a load balancer with no backend resets every connection; each
    read took the whole bound (60 s) with 17-19 retries, as if S3 answered. Ten requests in
    a row over 5 s with no answer open the breaker: the read fails soon after, then fast."""
    with mounted(f"s3://{bucket}", tmp_path / "m", s3_env, "--cache-dir", str(tmp_path / "c"),
                 "--endpoint-url", proxy.url, "--block-size", str(BLOCK)) as mp:
        fd = os.open(mp / obj.key, os.O_RDONLY)
        try:
            proxy.add(Rule("reset", key=None, after_bytes=0, times=None))
            t = time.monotonic()
            with pytest.raises(OSError) as e:
                os.pread(fd, 1000, 0)
            took = time.monotonic() - t
        finally:
            os.close(fd)
        print(f"EIO after {took:.1f}s")
        assert e.value.errno == errno.EIO and took < 20, took


@pytest.mark.fuse
@pytest.mark.parametrize("reader", ["obstore", "boto3"])
def test_an_answer_of_an_earlier_version_is_never_served_or_cached(
        reader: str, local_s3: LocalS3, s3_env: dict, bucket: str, obj: Obj,
        proxy: FaultProxy, tmp_path: Path) -> None:
    """A blind test of the mount (round 5, F1): a replaying middlebox (or a server that
    ignores If-Match) answered GETs of a replaced object with the old version's 206; the
    mount served those bytes, a file of two versions, and cached them under the new ETag.
    Now an answer whose ETag is not the one asked for is a changed object: never served,
    never stored."""
    env = {**s3_env, "FUSECACHE_S3_DATA_PLANE": reader} if reader == "boto3" else s3_env
    with mounted(f"s3://{bucket}", tmp_path / "m1", env,
                 *_mount_args(tmp_path / "c1", proxy, 30)) as mp:
        assert hashlib.sha256((mp / obj.key).read_bytes()).hexdigest() == obj.sha
    new = put_object(local_s3, bucket, obj.key, len(obj.data))  # replaced: a new ETag
    proxy.add(Rule("replay", key=obj.key, times=None))
    cache = tmp_path / "c2"
    with mounted(f"s3://{bucket}", tmp_path / "m2", env,
                 *_mount_args(cache, proxy, 30)) as mp:
        try:
            got = (mp / obj.key).read_bytes()
        except OSError as e:
            assert e.errno in (errno.EIO, errno.ESTALE), e
        else:
            raise AssertionError(f"read {len(got)} bytes of answers of another version")
        assert proxy.spoiled(obj.key) > 0
        proxy.clear()
        assert hashlib.sha256((mp / obj.key).read_bytes()).hexdigest() == \
            hashlib.sha256(new.data).hexdigest()
    _check_cached_exact(cache, new)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_warm_stopped_while_s3_leaves_its_gets_hanging_ends_at_once(
        sig: int, local_s3: LocalS3, s3_env: dict, bucket: str, obj: Obj,
        proxy: FaultProxy, tmp_path: Path) -> None:
    """A blind test of the mount (round 5, F4): with GETs stalled, SIGTERM or Ctrl-C of
    `prefetchd warm` took 56 s (the requests' deadline), where the docs say a second. Now
    the GETs under way are left behind after STOP_GRACE: exit 130, recorded partial."""
    import subprocess
    import sys

    cache = new_cache(tmp_path / "c")
    proxy.add(Rule("stall", key=obj.key, seconds=None, times=None))
    full = {**os.environ, **s3_env}
    full.pop("AWS_CA_BUNDLE", None)
    p = subprocess.Popen([sys.executable, "-m", "prefetchd.cli", "warm", f"s3://{bucket}/data/",
                          "--cache-dir", str(cache), "--endpoint-url", proxy.url,
                          "--concurrency", "2"], env=full, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while proxy.spoiled(obj.key) < 2:  # both fetchers inside a hanging GET
            assert p.poll() is None and time.monotonic() < deadline, p.poll()
            time.sleep(0.1)
        t = time.monotonic()
        p.send_signal(sig)
        out, err = p.communicate(timeout=30)
        took = time.monotonic() - t
    finally:
        if p.poll() is None:
            p.kill()
    print(f"stopped {took:.2f}s after {signal.Signals(sig).name}")
    assert p.returncode == 130, (out, err)
    assert took < 5, f"{took:.1f}s to stop"
    assert "interrupted" in err and "partial" in err
    assert cached_bytes(cache, obj) == {}  # nothing of the object served half
    assert stats(cache)["integrity_errors"] == 0


@pytest.mark.fuse
def test_a_mount_signalled_during_a_hanging_read_stops_within_seconds(
        local_s3: LocalS3, s3_env: dict, bucket: str, obj: Obj, proxy: FaultProxy,
        tmp_path: Path) -> None:
    """A blind test of the mount (round 5, F5): SIGTERM to a `--foreground` mount while a
    read waited on a stalled GET ended it 57 s later (the rest of --read-timeout), past a
    pod's default 30 s grace period. Now requests under way are cancelled STOP_GRACE after
    the signal: the reader gets an error, the process exits 0, nothing is left mounted."""
    import subprocess
    import sys
    import threading

    mp = tmp_path / "m"
    mp.mkdir()
    full = {**os.environ, **s3_env}
    full.pop("AWS_CA_BUNDLE", None)
    proc = subprocess.Popen([sys.executable, "-m", "fusecache.cli", "mount", f"s3://{bucket}",
                             str(mp), "--foreground", *_mount_args(tmp_path / "c", proxy, 60),
                             "--log-file", str(tmp_path / "mount.log")],
                            env=full, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    errs: list[BaseException] = []
    try:
        deadline = time.monotonic() + 60
        while not os.path.ismount(mp):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        assert (mp / obj.key).stat().st_size == len(obj.data)
        proxy.add(Rule("stall", key=obj.key, seconds=None, times=None))

        def read() -> None:
            try:
                (mp / obj.key).read_bytes()
            except OSError as e:
                errs.append(e)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        while proxy.spoiled(obj.key) < 1:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        t = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=30)
        took = time.monotonic() - t
        reader.join(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
        force_unmount(mp)
    print(f"exited {took:.2f}s after SIGTERM, rc {rc}, reader: {errs}")
    assert rc == 0 and took < 10, (rc, took)
    assert not reader.is_alive() and errs, "the reader still waits"
    assert not os.path.ismount(mp)


def _metric(port: int, name: str) -> float:
    import urllib.request

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
    for line in text.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"no {name} in the metrics")


@pytest.mark.fuse
def test_a_throttling_burst_at_mount_time_is_ridden_out(
        local_s3: LocalS3, s3_env: dict, bucket: str, obj: Obj, proxy: FaultProxy,
        tmp_path: Path) -> None:
    """A blind test of the mount (round 5, F8): three 503 SlowDowns to the bucket check
    failed the mount in 0.34 s with exit 2 (bad input), where reads ride such bursts out.
    An S3 that answers but refuses for now gets the store's deadline at mount time too."""
    proxy.add(Rule("status", key="", status=503, times=4))
    with mounted(f"s3://{bucket}", tmp_path / "m", s3_env,
                 *_mount_args(tmp_path / "c", proxy, 30)) as mp:
        assert hashlib.sha256((mp / obj.key).read_bytes()).hexdigest() == obj.sha
    assert proxy.spoiled("") == 4


@pytest.mark.fuse
def test_a_slow_link_that_delivers_is_no_outage(
        local_s3: LocalS3, s3_env: dict, bucket: str, obj: Obj, proxy: FaultProxy,
        tmp_path: Path) -> None:
    """A blind test of the mount (round 5, F2): on an 8 Mbit/s link that delivered all
    along, a read timed out and the circuit breaker opened ('S3 unreachable'), so every
    other operation then failed at once. A read that times out while S3 sends body bytes
    is still EIO within --read-timeout, but no outage: other files read on."""
    other = put_object(local_s3, bucket, "data/other.bin", 200_000)
    port = free_port()
    with mounted(f"s3://{bucket}", tmp_path / "m", s3_env,
                 *_mount_args(tmp_path / "c", proxy, READ_TIMEOUT),
                 "--metrics-port", str(port)) as mp:
        assert (mp / obj.key).stat().st_size == len(obj.data)
        assert (mp / other.key).stat().st_size == len(other.data)
        proxy.add(Rule("trickle", key=obj.key, after_bytes=100_000, times=None))
        with pytest.raises(OSError) as e:  # 1 MiB blocks at 100 kB/s: 10 s each
            with open(mp / obj.key, "rb") as f:
                f.read(BLOCK)
        assert e.value.errno == errno.EIO
        assert _metric(port, "fusecache_s3_unreachable") == 0
        assert hashlib.sha256((mp / other.key).read_bytes()).hexdigest() == other.sha
