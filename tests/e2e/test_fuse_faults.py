"""Bad input and faults with real mounts: clear errors, EIO not hangs, cache recovery."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import time
from pathlib import Path

import pytest

from fusecache.locals3 import LocalS3
from fusecache.mount import is_mounted

from mounting import force_unmount, mount_pids, mounted, run_cli

# Markers per test (not per module): bad input and umount of a non-mount need no mount.


def env_of(s3: LocalS3) -> dict[str, str]:
    return s3.env()


@pytest.mark.fuse
@pytest.mark.s3
def test_remount_serves_cache_with_s3_stopped(private_s3: LocalS3, tmp_path: Path) -> None:
    c = private_s3.client()
    c.create_bucket(Bucket="keep")
    files = {f"d/{i}.bin": os.urandom(50_000 + i) for i in range(20)}
    files["big.bin"] = os.urandom(9 << 20)
    for k, v in files.items():
        c.put_object(Bucket="keep", Key=k, Body=v)
    cache = tmp_path / "c"
    env = env_of(private_s3)
    with mounted("s3://keep", tmp_path / "m", env, "--cache-dir", str(cache)) as mp:
        assert {k: (mp / k).read_bytes() for k in files} == files
        listed = sorted(os.listdir(mp / "d"))
    private_s3.stop()
    with mounted("s3://keep", tmp_path / "m", env, "--cache-dir", str(cache),
                 "--read-timeout", "5") as mp:
        assert sorted(os.listdir(mp / "d")) == listed == sorted(
            k[2:] for k in files if k.startswith("d/"))
        assert {k: (mp / k).read_bytes() for k in files} == files


@pytest.mark.fuse
@pytest.mark.s3
def test_read_returns_eio_in_bounded_time_when_s3_dies(private_s3: LocalS3,
                                                       tmp_path: Path) -> None:
    c = private_s3.client()
    c.create_bucket(Bucket="dies")
    c.put_object(Bucket="dies", Key="a.bin", Body=os.urandom(6 << 20))
    with mounted("s3://dies", tmp_path / "m", env_of(private_s3), "--cache-dir",
                 str(tmp_path / "c"), "--read-timeout", "4") as mp:
        assert (mp / "a.bin").stat().st_size == 6 << 20
        private_s3.stop()
        t = time.monotonic()
        with pytest.raises(OSError) as e:
            (mp / "a.bin").read_bytes()
        took = time.monotonic() - t
        assert e.value.errno == errno.EIO
        assert took < 15, f"EIO took {took:.1f}s"


@pytest.mark.fuse
@pytest.mark.s3
def test_killed_mount_leaves_no_half_written_block(private_s3: LocalS3,
                                                   tmp_path: Path) -> None:
    c = private_s3.client()
    c.create_bucket(Bucket="kill")
    payload = os.urandom(64 << 20)
    c.put_object(Bucket="kill", Key="big.bin", Body=payload)
    cache = tmp_path / "c"
    mp = tmp_path / "m"
    with mounted("s3://kill", mp, env_of(private_s3), "--cache-dir", str(cache)):
        fd = os.open(mp / "big.bin", os.O_RDONLY)
        os.read(fd, 20 << 20)
        # Kill while read-ahead and write-behind are busy, but only once the first
        # block has been committed (writes are asynchronous).
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            st = run_cli(["stats", "--cache-dir", str(cache), "--json"])
            if st.returncode == 0 and json.loads(st.stdout)["used_bytes"] > 0:
                break
            time.sleep(0.05)
        for pid in mount_pids(mp):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.close(fd)
        with pytest.raises(OSError) as e:
            os.listdir(mp)
        assert e.value.errno in (errno.ENOTCONN, errno.ECONNABORTED)  # the server is gone
        # mounting there again says what to do (a new user's walkthrough: "already mounted")
        r = run_cli(["mount", "s3://kill", str(mp), "--cache-dir", str(cache)],
                    env=env_of(private_s3))
        assert r.returncode == 2 and f"try: fusecache umount {mp}" in r.stderr, r.stderr
    assert not is_mounted(mp)
    private_s3.stop()  # only what the cache holds can be read now
    with mounted("s3://kill", mp, env_of(private_s3), "--cache-dir", str(cache),
                 "--read-timeout", "3") as m2:
        fd = os.open(m2 / "big.bin", os.O_RDONLY)
        good = 0
        try:
            for off in range(0, 64 << 20, 4 << 20):
                try:
                    block = os.pread(fd, 4 << 20, off)
                except OSError as err:
                    assert err.errno == errno.EIO
                    continue
                assert block == payload[off:off + (4 << 20)], f"wrong bytes at {off}"
                good += 1
        finally:
            os.close(fd)
        assert good >= 1, "nothing was cached before the kill"


@pytest.mark.fuse
@pytest.mark.s3
def test_cache_dir_unusable_still_serves_from_s3(local_s3, s3_env, bucket,
                                                 tmp_path: Path) -> None:
    local_s3.client().put_object(Bucket=bucket, Key="a", Body=b"abc")
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    mp = tmp_path / "m"
    mp.mkdir()
    r = run_cli(["mount", f"s3://{bucket}", str(mp), "--cache-dir", str(not_a_dir / "cache")],
                env=s3_env)
    try:
        assert r.returncode == 0, r.stderr
        # said on the terminal, not only in a log (a new user's walkthrough, 2026-12-07)
        assert "warning:" in r.stderr and "serving from S3 without the node cache on disk" \
            in r.stderr, r.stderr
        assert (mp / "a").read_bytes() == b"abc"
    finally:
        run_cli(["umount", str(mp)], env=s3_env)
        force_unmount(mp)


@pytest.mark.fuse
@pytest.mark.s3
def test_corrupt_cache_is_moved_aside_at_mount(local_s3, s3_env, bucket,
                                               tmp_path: Path) -> None:
    local_s3.client().put_object(Bucket=bucket, Key="a", Body=b"abc")
    cache = tmp_path / "c"
    (cache / "cache.lmdb").mkdir(parents=True)
    (cache / "cache.lmdb" / "data.mdb").write_bytes(os.urandom(100_000))
    with mounted(f"s3://{bucket}", tmp_path / "m", s3_env, "--cache-dir", str(cache)) as mp:
        assert (mp / "a").read_bytes() == b"abc"
    assert list(cache.glob("cache.lmdb.bad-*"))
    logs = "".join(p.read_text() for p in (cache / "logs").glob("*.log"))
    assert "corrupt or incompatible" in logs


@pytest.mark.s3
@pytest.mark.parametrize("case", [
    "bad-uri", "bad-bucket-name", "missing-bucket", "wrong-credentials", "unreachable",
    "no-mountpoint", "not-a-dir", pytest.param("already-mounted", marks=pytest.mark.fuse),
    "bad-size", "bad-ttl", "not-s3"])
def test_bad_input_fails_before_mounting(case: str, local_s3, s3_env, bucket,
                                         tmp_path: Path) -> None:
    mp = tmp_path / "m"
    mp.mkdir()
    env = dict(s3_env)
    args = [f"s3://{bucket}", str(mp), "--cache-dir", str(tmp_path / "c")]
    expect = ""
    if case == "bad-uri":
        args[0], expect = "http://nope", "invalid S3 URI"
    elif case == "bad-bucket-name":
        args[0], expect = "s3://A_B", "invalid bucket name"
    elif case == "missing-bucket":
        args[0], expect = "s3://no-such-bucket-xyz", "does not exist"
    elif case == "wrong-credentials":
        env["AWS_SECRET_ACCESS_KEY"] = "wrong-secret-value-123"
        expect = "access denied"
    elif case == "unreachable":
        env["AWS_ENDPOINT_URL"] = "http://127.0.0.1:9"
        expect = "cannot reach"
    elif case == "no-mountpoint":
        args[1], expect = str(tmp_path / "missing"), "does not exist"
    elif case == "not-a-dir":
        (tmp_path / "f").write_text("x")
        args[1], expect = str(tmp_path / "f"), "not a directory"
    elif case == "bad-size":
        args += ["--disk-cache-size", "12 parsecs"]
        expect = "invalid --disk-cache-size"
    elif case == "bad-ttl":
        args += ["--metadata-ttl", "soon"]
        expect = "invalid --metadata-ttl"
    elif case == "not-s3":  # an HTTP server that answers 404 pages (blind FUSE round 3)
        env["AWS_ENDPOINT_URL"] = _not_s3_endpoint()
        expect = "answered 404 without an S3 error; is it an S3 endpoint?"
    if case == "already-mounted":
        with mounted(f"s3://{bucket}", mp, s3_env, "--cache-dir", str(tmp_path / "c")):
            r = run_cli(["mount", *args], env=env)
        expect = "already mounted"
    else:
        t = time.monotonic()
        r = run_cli(["mount", *args], env=env, timeout=60)
        assert time.monotonic() - t < 45
        assert not is_mounted(mp)
    assert r.returncode != 0
    err = r.stderr.strip()
    assert expect in err, err
    if case == "unreachable":  # and why the node cache is no help (blind FUSE round 3)
        assert "the node cache holds no listing of" in err, err
    assert len(err.splitlines()) == 1, err
    assert "wrong-secret-value-123" not in err and s3_env["AWS_SECRET_ACCESS_KEY"] not in err


@pytest.mark.fuse
@pytest.mark.s3
def test_full_cache_disk_keeps_serving_from_s3(local_s3, s3_env, bucket, tmp_path: Path) -> None:
    """A cache dir on a 12 MiB tmpfs (its bound the default 20 GiB): reads go on, byte-exact,
    and the cache leaves the file system a tenth free (a blind test of the mount, M7: it
    took it whole, and kept it, so every other writer there got ENOSPC)."""
    import subprocess

    c = local_s3.client()
    payload = os.urandom(40 << 20)
    c.put_object(Bucket=bucket, Key="d/big.bin", Body=payload)
    small = {f"d/s{i}": os.urandom(30_000) for i in range(10)}
    for k, v in small.items():
        c.put_object(Bucket=bucket, Key=k, Body=v)
    cache = tmp_path / "tiny"
    cache.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=12m", "tmpfs", str(cache)], check=True)
    try:
        with mounted(f"s3://{bucket}", tmp_path / "m", s3_env, "--cache-dir", str(cache),
                     "--log-file", str(tmp_path / "mount.log")) as mp:
            assert (mp / "d" / "big.bin").read_bytes() == payload
            assert {f"d/{n}": (mp / "d" / n).read_bytes() for n in os.listdir(mp / "d")
                    if n != "big.bin"} == small
            assert (mp / "d" / "big.bin").read_bytes() == payload
            st = os.statvfs(cache)
            assert st.f_bavail * st.f_frsize >= st.f_blocks * st.f_frsize // 10 - (64 << 10)
        log = (tmp_path / "mount.log").read_text()
        assert "cannot write to the node cache" not in log, log  # (it kept within room)
    finally:
        subprocess.run(["umount", "-l", str(cache)], check=False)


def test_umount_refuses_what_is_not_a_fusecache_mount(tmp_path: Path) -> None:
    r = run_cli(["umount", str(tmp_path)])
    assert r.returncode != 0 and "is not mounted" in r.stderr
    r = run_cli(["umount", "/proc"])
    assert r.returncode != 0 and "is not a fusecache mount" in r.stderr
    r = run_cli(["stats", "--cache-dir", str(tmp_path / "none")])
    assert r.returncode != 0 and "no node cache in" in r.stderr


@pytest.mark.fuse
@pytest.mark.s3
def test_read_through_a_transient_s3_outage_fails_fast_then_recovers(
        private_s3: LocalS3, tmp_path: Path) -> None:
    """S3 goes away mid-read and comes back. The circuit breaker's contract: the read either
    completes with exact bytes (what was already fetched) or fails with EIO within seconds, not
    --read-timeout (90 s here); once S3 answers again, the same file reads byte-exact."""
    import threading

    c = private_s3.client()
    c.create_bucket(Bucket="blip")
    payload = os.urandom(48 << 20)
    c.put_object(Bucket="blip", Key="f.bin", Body=payload)
    with mounted("s3://blip", tmp_path / "m", env_of(private_s3), "--cache-dir",
                 str(tmp_path / "c"), "--read-timeout", "90") as mp:
        assert (mp / "f.bin").stat().st_size == len(payload)
        got: list[bytes] = []
        failed: list[tuple[int, float]] = []
        fd = os.open(mp / "f.bin", os.O_RDONLY)
        first = os.read(fd, 1 << 20)  # the mount has started fetching
        private_s3.stop()
        t0 = time.monotonic()

        def read_rest() -> None:
            try:
                got.append(first + b"".join(iter(lambda: os.read(fd, 1 << 20), b"")))
            except OSError as e:
                failed.append((e.errno, time.monotonic() - t0))

        reader = threading.Thread(target=read_rest)
        reader.start()
        reader.join(60)
        os.close(fd)
        assert not reader.is_alive(), "read hung"
        if failed:
            errno_, took = failed[0]
            assert errno_ == errno.EIO
            assert took < 30, f"EIO only after {took:.1f}s: the breaker did not fail fast"
        else:
            assert got[0] == payload, "wrong or short bytes during the outage"
        private_s3.start()  # same data dir and S3 port
        deadline = time.monotonic() + 60
        while True:  # the breaker's probe closes it once S3 answers
            try:
                data = (mp / "f.bin").read_bytes()
                break
            except OSError as e:
                assert e.errno == errno.EIO
                assert time.monotonic() < deadline, "no recovery after S3 came back"
                time.sleep(0.5)
        assert data == payload, "wrong bytes after the outage"


def _not_s3_endpoint() -> str:
    """The URL of an HTTP server (a daemon thread for the rest of the test process) that
    answers every request with a 404 HTML page, as a web server that is no S3 service."""
    import http.server
    import threading

    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the handler's name
            body = b"<html><body>Not Found</body></html>"
            self.send_response(404)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_HEAD = do_GET

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"
