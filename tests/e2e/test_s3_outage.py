"""S3 outages with real mounts and a real SeaweedFS that is stopped or hung (SIGSTOP).

- stale-if-error: a cached dataset whose metadata has expired reads byte-exact with S3
  stopped, with one warning and the metrics saying so; an uncached file fails fast;
  after S3 is back, reads resume with the right bytes;
- circuit breaker: with S3 hung, the first operation that needs S3 ends within
  --read-timeout, and the ones after it fail fast until S3 answers again;
- no widened access: two credentials; only the one S3 authorised for the bucket is
  served from the cache during the outage, and only within --offline-auth-max-age.

The timings printed (run with -s) are the measurements quoted in the report; the
assertions on time are only the bounds the behaviour promises, with wide margins.
"""

from __future__ import annotations

import errno
import os
import secrets
import signal
import socket
import time
import urllib.request
from pathlib import Path

import pytest

from fusecache.locals3 import LocalS3

from mounting import force_unmount, mounted, run_cli

pytestmark = [pytest.mark.fuse, pytest.mark.s3]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _refused(source: str, mountpoint: Path, env: dict[str, str], *extra: str) -> str:
    """Run a mount that must be refused; its stderr. Never leaves a mount behind."""
    mountpoint.mkdir(exist_ok=True)
    r = run_cli(["mount", source, str(mountpoint), *extra], env=env)
    if r.returncode == 0:
        force_unmount(mountpoint)
    assert r.returncode != 0, f"mount of {source} was accepted"
    return r.stderr


def _metrics(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
    out: dict[str, float] = {}
    for line in text.decode().splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def _read_all(mp: Path, names: list[str]) -> tuple[dict[str, bytes], float]:
    t = time.monotonic()
    got = {n: (mp / n).read_bytes() for n in names}
    return got, time.monotonic() - t


def _drop_page_cache() -> None:
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def _wait_past(t0: float, seconds: float) -> None:
    """Metadata expiry is a matter of time: wait until *seconds* have passed since t0."""
    left = t0 + seconds - time.monotonic()
    if left > 0:
        time.sleep(left)


def _restart(s3: LocalS3) -> None:
    """Start the stopped server again on the same data and S3 port."""
    s3.start()


def _read_until_ok(path: Path, want: bytes, timeout: float = 60.0) -> float:
    t = time.monotonic()
    while True:
        try:
            got = path.read_bytes()
        except OSError as e:
            if time.monotonic() - t > timeout:
                raise AssertionError(f"{path} still failing {timeout}s after S3 came back: "
                                     f"{e}") from None
            time.sleep(0.2)
            continue
        assert got == want
        return time.monotonic() - t


def test_stale_if_error_reads_cached_dataset_with_s3_stopped(private_s3: LocalS3,
                                                             tmp_path: Path) -> None:
    c = private_s3.client()
    c.create_bucket(Bucket="dset")
    files = {f"d/{i:03d}.bin": os.urandom(256 * 1024 + i) for i in range(40)}
    files["big.bin"] = os.urandom(24 << 20)
    uncached = {"d/zz-never-read.bin": os.urandom(300_000)}
    for k, v in {**files, **uncached}.items():
        c.put_object(Bucket="dset", Key=k, Body=v)
    names = sorted(files)
    nbytes = sum(len(v) for v in files.values())
    port = _free_port()
    log_file = tmp_path / "mount.log"
    ttl = 2.0
    with mounted("s3://dset", tmp_path / "m", private_s3.env(), "--cache-dir",
                 str(tmp_path / "c"), "--metadata-ttl", str(ttl), "--read-timeout", "30",
                 "--metrics-port", str(port), "--log-file", str(log_file),
                 "--folder-readahead", "0") as mp:  # zz-never-read.bin stays uncached
        listed = sorted(os.listdir(mp / "d"))
        got, cold = _read_all(mp, names)
        assert got == files
        t_cached = time.monotonic()
        # S3 up, metadata expired: every open revalidates with S3, blocks from the cache.
        _wait_past(t_cached, ttl + 0.5)
        _drop_page_cache()
        got, up = _read_all(mp, names)
        assert got == files
        t_up = time.monotonic()

        private_s3.stop()
        _wait_past(t_up, ttl + 0.5)
        _drop_page_cache()
        got, down = _read_all(mp, names)
        assert got == files
        assert sorted(os.listdir(mp / "d")) == listed
        # A second pass during the same outage, from a fresh page cache.
        _drop_page_cache()
        got, down2 = _read_all(mp, names)
        assert got == files

        t = time.monotonic()
        with pytest.raises(OSError) as e:
            (mp / "d/zz-never-read.bin").read_bytes()
        uncached_s = time.monotonic() - t
        assert e.value.errno == errno.EIO
        assert uncached_s < 10, f"uncached file took {uncached_s:.1f}s (read-timeout 30)"
        m = _metrics(port)
        assert m['fusecache_s3_unreachable'] == 1.0
        assert m['fusecache_s3_fast_failures_total'] > 0
        stale = sum(v for k, v in m.items() if k.startswith("fusecache_stale_served_total"))
        assert stale > 0
        warnings = [ln for ln in log_file.read_text().splitlines()
                    if "stale-if-error" in ln and "WARNING" in ln]
        assert len(warnings) == 1, warnings

        _restart(private_s3)
        back_s = _read_until_ok(mp / "d/zz-never-read.bin", uncached["d/zz-never-read.bin"])
        assert _metrics(port)['fusecache_s3_unreachable'] == 0.0
        got, again = _read_all(mp, names)
        assert got == files
    mb = nbytes / 1e6
    print(f"\n[outage] {len(names)} files, {mb:.1f} MB, metadata expired (ttl {ttl:g}s):"
          f" cold {mb / cold:.0f} MB/s; S3 up {mb / up:.0f} MB/s "
          f"({len(names) / up:.0f} files/s); S3 stopped {mb / down:.0f} MB/s "
          f"({len(names) / down:.0f} files/s), again {mb / down2:.0f} MB/s "
          f"({len(names) / down2:.0f} files/s); uncached file EIO after {uncached_s:.3f}s; "
          f"S3 back: reads ok after {back_s:.1f}s")


def test_hung_s3_bounded_then_fails_fast(private_s3: LocalS3, tmp_path: Path) -> None:
    c = private_s3.client()
    c.create_bucket(Bucket="hung")
    cached = os.urandom(3 << 20)
    others = {f"u{i}.bin": os.urandom(1 << 20) for i in range(5)}
    others["a-big.bin"] = os.urandom(40 << 20)  # first: a sequential read with read-ahead
    c.put_object(Bucket="hung", Key="cached.bin", Body=cached)
    for k, v in others.items():
        c.put_object(Bucket="hung", Key=k, Body=v)
    bound = 6.0
    assert private_s3.proc is not None
    pgid = private_s3.proc.pid
    with mounted("s3://hung", tmp_path / "m", private_s3.env(), "--cache-dir",
                 str(tmp_path / "c"), "--metadata-ttl", "1", "--read-timeout",
                 str(bound)) as mp:
        names = sorted(os.listdir(mp))
        assert (mp / "cached.bin").read_bytes() == cached
        t0 = time.monotonic()
        _wait_past(t0, 1.5)
        os.killpg(pgid, signal.SIGSTOP)
        took: list[float] = []
        try:
            for k in sorted(others):
                t = time.monotonic()
                with pytest.raises(OSError) as e:
                    (mp / k).read_bytes()
                took.append(time.monotonic() - t)
                assert e.value.errno == errno.EIO
            _drop_page_cache()
            t = time.monotonic()
            assert (mp / "cached.bin").read_bytes() == cached  # stale-if-error
            cached_s = time.monotonic() - t
            assert sorted(os.listdir(mp)) == names
        finally:
            os.killpg(pgid, signal.SIGCONT)
        # The first file waited for S3 once, for one bound (its lookup, which then
        # answered from the expired listing); every later one failed fast.
        assert took[0] < bound + 3, took
        assert all(s < 3 for s in took[1:]), took
        back = [_read_until_ok(mp / k, v) for k, v in sorted(others.items())]
    print(f"\n[hung] --read-timeout {bound:g}: uncached files (40 MiB, then 5 x 1 MiB) "
          f"EIO after "
          f"{', '.join(f'{s:.2f}' for s in took)} s; cached file (stale) {cached_s:.2f}s; "
          f"after SIGCONT first read ok in {back[0]:.1f}s")


def _identity(name: str, actions: list[str]) -> tuple[dict, dict[str, str]]:
    """A SeaweedFS identity of its own keys allowed *actions*, and the env of its keys."""
    key, secret = "fc" + secrets.token_hex(8), secrets.token_hex(20)
    ident = {"name": name, "credentials": [{"accessKey": key, "secretKey": secret}],
             "actions": actions}
    return ident, {"AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret}


def _other_identity() -> tuple[dict, dict[str, str]]:
    """A second SeaweedFS identity that may read only a bucket named 'elsewhere'."""
    return _identity("tenant-b", ["Read:elsewhere", "List:elsewhere"])


def _started_with_a_lister(tmp_path: Path, files: dict[str, bytes]
                           ) -> tuple[LocalS3, dict[str, str], dict[str, str]]:
    """A local S3 holding *files* in bucket 'tenant-a', and an identity allowed to list that
    bucket but not to read it: (server, owner's env, lister's env)."""
    lister, creds = _identity("lister", ["List:tenant-a"])
    s3 = LocalS3(data_dir=tmp_path / "s3", extra_identities=[lister])
    s3.start()
    c = s3.client()
    c.create_bucket(Bucket="tenant-a")
    for k, v in files.items():
        c.put_object(Bucket="tenant-a", Key=k, Body=v)
    env_a = s3.env()
    return s3, env_a, {**env_a, **creds}


def test_outage_never_widens_access(tmp_path: Path) -> None:
    ident_b, creds_b = _other_identity()
    s3 = LocalS3(data_dir=tmp_path / "s3", extra_identities=[ident_b])
    s3.start()
    try:
        _outage_never_widens_access(s3, creds_b, tmp_path)
    finally:
        s3.cleanup()


def _outage_never_widens_access(s3: LocalS3, creds_b: dict[str, str], tmp_path: Path) -> None:
    c = s3.client()
    c.create_bucket(Bucket="tenant-a")
    files = {f"x/{i}.bin": os.urandom(100_000 + i) for i in range(10)}
    for k, v in files.items():
        c.put_object(Bucket="tenant-a", Key=k, Body=v)
    env_a = s3.env()
    env_b = {**env_a, **creds_b}
    cache = tmp_path / "c"
    common = ["--cache-dir", str(cache), "--read-timeout", "5"]

    # S3 up: A caches everything; B is refused by S3 itself.
    with mounted("s3://tenant-a", tmp_path / "ma", env_a, *common) as mp:
        assert {k: (mp / k).read_bytes() for k in files} == files
    err = _refused("s3://tenant-a", tmp_path / "mb", env_b, *common)
    assert "access denied" in err.lower(), err

    # The shared cache holds no access key id, and the HMAC key is private.
    key_file = cache / "offline-auth.key"
    assert key_file.stat().st_mode & 0o077 == 0
    lmdb_bytes = b"".join(p.read_bytes() for p in cache.rglob("*.mdb"))
    assert env_a["AWS_ACCESS_KEY_ID"].encode() not in lmdb_bytes

    # A mount whose record will age past a 2 s bound during the outage.
    with mounted("s3://tenant-a", tmp_path / "ma2", env_a, *common,
                 "--offline-auth-max-age", "2s") as short:
        assert (short / "x/0.bin").read_bytes() == files["x/0.bin"]
        s3.stop()
        # B during the outage: refused, whatever the metadata TTL.
        for ttl in ("60", "indefinite"):
            err = _refused("s3://tenant-a", tmp_path / "mb", env_b, *common,
                           "--metadata-ttl", ttl)
            assert "never authorised" in err, err
        # A, freshly mounted during the outage, reads byte-exact.
        with mounted("s3://tenant-a", tmp_path / "ma", env_a, *common) as mp:
            assert {k: (mp / k).read_bytes() for k in files} == files
        # Past its --offline-auth-max-age, the short mount gets EACCES.
        deadline = time.monotonic() + 30
        while True:
            _drop_page_cache()
            try:
                (short / "x/1.bin").read_bytes()
            except PermissionError:
                break
            assert time.monotonic() < deadline, "no EACCES 30s into the outage"
            time.sleep(0.2)


def test_denial_by_s3_revokes_offline_access(tmp_path: Path) -> None:
    """A credential S3 authorised, then refused (access withdrawn), gets nothing from the
    cache in a later outage: the refusal deleted its record."""
    key, secret = "fcc" + secrets.token_hex(8), secrets.token_hex(20)
    ident = {"name": "tenant-c", "credentials": [{"accessKey": key, "secretKey": secret}],
             "actions": ["Read:revoked", "List:revoked"]}
    s3 = LocalS3(data_dir=tmp_path / "s3", extra_identities=[ident])
    s3.start()
    try:
        c = s3.client()
        c.create_bucket(Bucket="revoked")
        c.put_object(Bucket="revoked", Key="a.bin", Body=b"secret bytes")
        env_c = {**s3.env(), "AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret}
        common = ["--cache-dir", str(tmp_path / "c"), "--read-timeout", "5"]
        with mounted("s3://revoked", tmp_path / "m", env_c, *common) as mp:
            assert (mp / "a.bin").read_bytes() == b"secret bytes"
        s3.stop()
        ident["actions"] = ["Read:elsewhere", "List:elsewhere"]  # access withdrawn
        s3.start()
        err = _refused("s3://revoked", tmp_path / "m", env_c, *common)
        assert "access denied" in err.lower(), err
        s3.stop()
        err = _refused("s3://revoked", tmp_path / "m", env_c, *common)
        assert "never authorised" in err, err
    finally:
        s3.cleanup()


def test_access_withdrawn_under_a_running_mount_ends_its_opens(tmp_path: Path) -> None:
    """A blind test of the mount: with --metadata-ttl indefinite, a key whose access was
    withdrawn kept reading cached files through a running mount for 40 minutes, though the
    mount's own periodic check was refused (403) by S3. Now a refusal S3 gives this
    credential makes the next open in any folder ask S3 again."""
    ident, creds = _identity("tenant-d", ["Read:withdrawn", "List:withdrawn"])
    s3 = LocalS3(data_dir=tmp_path / "s3", extra_identities=[ident])
    s3.start()
    try:
        c = s3.client()
        c.create_bucket(Bucket="withdrawn")
        files = {"x/a.bin": os.urandom(70_000), "y/b.bin": os.urandom(90_000)}
        for k, v in files.items():
            c.put_object(Bucket="withdrawn", Key=k, Body=v)
        env_d = {**s3.env(), **creds}
        # --offline-auth-max-age 8s: the idle check every 2 s (a quarter), not 10 minutes
        with mounted("s3://withdrawn", tmp_path / "m", env_d, "--cache-dir",
                     str(tmp_path / "c"), "--read-timeout", "5", "--metadata-ttl",
                     "indefinite", "--offline-auth-max-age", "8") as mp:
            assert {k: (mp / k).read_bytes() for k in files} == files  # cached, authorised
            s3.stop()
            ident["actions"] = ["Read:elsewhere", "List:elsewhere"]  # access withdrawn
            _restart(s3)
            deadline = time.monotonic() + 30
            while True:
                try:
                    got = (mp / "x/a.bin").read_bytes()
                except PermissionError:
                    break
                assert got == files["x/a.bin"]
                assert time.monotonic() < deadline, "a withdrawn key still reads after 30 s"
                time.sleep(0.5)
            with pytest.raises(PermissionError):
                (mp / "y/b.bin").read_bytes()
    finally:
        s3.cleanup()


def test_cached_bytes_go_only_to_a_credential_s3_lets_read_them(tmp_path: Path) -> None:
    """A blind test of the mount (one node cache shared by tenants): a key S3 lets list a
    bucket but not read it got every file another tenant had cached, with no request to
    S3. Now the first open in a folder asks S3 (HEAD) with the mount's own credential."""
    files = {f"x/{i}.bin": os.urandom(50_000 + i) for i in range(3)}
    s3, env_a, env_l = _started_with_a_lister(tmp_path, files)
    try:
        common = ["--cache-dir", str(tmp_path / "c"), "--read-timeout", "5"]
        with mounted("s3://tenant-a", tmp_path / "ma", env_a, *common) as mp:
            assert {k: (mp / k).read_bytes() for k in files} == files  # all cached now
        with mounted("s3://tenant-a", tmp_path / "ml", env_l, *common) as mp:
            assert sorted(p.name for p in (mp / "x").iterdir()) == ["0.bin", "1.bin", "2.bin"]
            for k in files:
                with pytest.raises(PermissionError):
                    (mp / k).read_bytes()
        with mounted("s3://tenant-a", tmp_path / "ma", env_a, *common) as mp:
            assert {k: (mp / k).read_bytes() for k in files} == files  # the owner still reads
    finally:
        s3.cleanup()


def test_a_credential_that_may_list_but_not_read_gets_no_offline_record(tmp_path: Path) -> None:
    """A blind test of the mount: a list-only key's `prefetchd warm` of bytes another tenant
    had cached succeeded with no GET (pinned, 'warmed'), and the record it left let its mount
    serve them while S3 was down. Its warm is refused now, and it has no record."""
    import subprocess
    import sys

    s3, env_a, env_l = _started_with_a_lister(tmp_path, {"x/0.bin": b"tenant a's bytes"})
    try:
        common = ["--cache-dir", str(tmp_path / "c"), "--read-timeout", "5"]
        with mounted("s3://tenant-a", tmp_path / "ma", env_a, *common) as mp:
            assert (mp / "x/0.bin").read_bytes() == b"tenant a's bytes"
        r = subprocess.run([sys.executable, "-m", "prefetchd.cli", "warm", "s3://tenant-a/x/",
                            "--cache-dir", str(tmp_path / "c")], env={**os.environ, **env_l},
                           capture_output=True, text=True, timeout=120, check=False)
        assert r.returncode != 0 and "access denied" in r.stderr, (r.stdout, r.stderr)
        s3.stop()
        err = _refused("s3://tenant-a", tmp_path / "ml", env_l, *common)
        assert "never authorised" in err, err
    finally:
        s3.cleanup()
