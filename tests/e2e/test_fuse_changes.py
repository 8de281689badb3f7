"""Objects that change in S3 under a real mount: one version per open file, --metadata-ttl as
a bound, and a change the mount saw leading to the new version (a blind test of the mount
against POSIX found each of these broken)."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import pytest

from mounting import mounted

pytestmark = [pytest.mark.fuse, pytest.mark.s3]


def _read_all(fd: int) -> bytes:
    out = []
    while chunk := os.read(fd, 1 << 20):
        out.append(chunk)
    return b"".join(out)


@pytest.mark.parametrize("new_size", [2_000_000, 3_500_000])
def test_an_open_file_whose_object_changed_reads_estale_never_short(
        local_s3, s3_env, bucket, tmp_path: Path, new_size: int) -> None:
    """A file open while its object is overwritten: once the mount has the new version's size
    (an fstat past the TTL), the old handle's reads fail with ESTALE; they returned the old
    bytes cut at the new size (or short of it), with no error: a truncated file to tar or
    a checksum."""
    c = local_s3.client()
    c.put_object(Bucket=bucket, Key="s", Body=b"A" * 3_000_000)
    with mounted(f"s3://{bucket}", tmp_path / "m", s3_env, "--cache-dir", str(tmp_path / "c"),
                 "--metadata-ttl", "1") as mp:
        fd = os.open(mp / "s", os.O_RDONLY)
        try:
            assert os.read(fd, 4) == b"AAAA"
            c.put_object(Bucket=bucket, Key="s", Body=b"B" * new_size)
            time.sleep(1.5)
            assert os.fstat(fd).st_size == new_size
            os.lseek(fd, 0, os.SEEK_SET)
            with pytest.raises(OSError) as e:
                _read_all(fd)
            assert e.value.errno == errno.ESTALE
        finally:
            os.close(fd)
        assert (mp / "s").read_bytes() == b"B" * new_size  # a new open: the new version


def test_a_listing_served_late_is_trusted_only_to_its_own_ttl(local_s3, s3_env, bucket,
                                                              tmp_path: Path) -> None:
    """An ``ls`` near the end of the TTL handed the kernel entries for a whole new TTL, and
    the mount trusted them as confirmed then: a deleted object stayed readable and an
    overwritten one read old bytes for up to twice the TTL."""
    ttl = 4.0
    c = local_s3.client()
    for key in ("gone", "changed", "keep"):
        c.put_object(Bucket=bucket, Key=f"d/{key}", Body=b"old-bytes")
    with mounted(f"s3://{bucket}", tmp_path / "m", s3_env, "--cache-dir", str(tmp_path / "c"),
                 "--metadata-ttl", f"{ttl:g}") as mp:
        d = mp / "d"
        assert sorted(os.listdir(d)) == ["changed", "gone", "keep"]
        listed = time.monotonic()
        assert (d / "gone").read_bytes() == (d / "changed").read_bytes() == b"old-bytes"
        c.delete_object(Bucket=bucket, Key="d/gone")
        c.put_object(Bucket=bucket, Key="d/changed", Body=b"NEW-version-bytes")
        time.sleep(max(0.0, listed + ttl - 1.0 - time.monotonic()))
        os.listdir(d)  # late in the TTL: from the listing taken at `listed`
        time.sleep(max(0.0, listed + ttl + 0.6 - time.monotonic()))
        assert time.monotonic() < listed + 2 * ttl
        with pytest.raises(FileNotFoundError):
            (d / "gone").read_bytes()
        assert (d / "changed").read_bytes() == b"NEW-version-bytes"


@pytest.mark.parametrize("ttl", ["60", "indefinite"])
def test_a_change_the_mount_saw_is_read_at_the_next_open(local_s3, s3_env, bucket,
                                                        tmp_path: Path, ttl: str) -> None:
    """A read that found the object changed on the server (HTTP 412) fails with ESTALE; the
    next open reads the new version. Every open failed until the TTL ran out, for ever
    with ``indefinite``."""
    c = local_s3.client()
    c.put_object(Bucket=bucket, Key="sz/grow", Body=b"version-1\n")
    with mounted(f"s3://{bucket}", tmp_path / "m", s3_env, "--cache-dir", str(tmp_path / "c"),
                 "--metadata-ttl", ttl) as mp:
        assert os.stat(mp / "sz" / "grow").st_size == 10  # metadata only: no byte cached
        c.put_object(Bucket=bucket, Key="sz/grow", Body=b"version-2 longer\n")
        with pytest.raises(OSError) as e:
            (mp / "sz" / "grow").read_bytes()
        assert e.value.errno == errno.ESTALE
        assert (mp / "sz" / "grow").read_bytes() == b"version-2 longer\n"
        assert os.stat(mp / "sz" / "grow").st_size == 17


def test_an_object_deleted_while_open_reads_estale_and_is_gone_at_the_next_open(
        local_s3, s3_env, bucket, tmp_path: Path) -> None:
    """read(2) of a file whose object was deleted after its open gave ENOENT, an errno no
    reader expects of a read; it is ESTALE now, and the name is gone at once."""
    c = local_s3.client()
    c.put_object(Bucket=bucket, Key="d/big", Body=b"A" * 3_000_000)
    with mounted(f"s3://{bucket}", tmp_path / "m", s3_env, "--cache-dir", str(tmp_path / "c"),
                 "--metadata-ttl", "60") as mp:
        fd = os.open(mp / "d" / "big", os.O_RDONLY)
        try:
            c.delete_object(Bucket=bucket, Key="d/big")
            with pytest.raises(OSError) as e:
                _read_all(fd)
            assert e.value.errno == errno.ESTALE
        finally:
            os.close(fd)
        with pytest.raises(FileNotFoundError):
            (mp / "d" / "big").read_bytes()


def test_a_cached_object_deleted_while_open_reads_estale_past_its_ttl(
        local_s3, s3_env, bucket, tmp_path: Path) -> None:
    """Blind FUSE round 3: a file read whole (cached), then deleted in S3, gave read(2)
    ENOENT once its attributes expired: the kernel asks for them before it reads, and the
    object was gone. ESTALE, as for an object deleted before it was read."""
    c = local_s3.client()
    c.put_object(Bucket=bucket, Key="d/small", Body=b"B" * 200_000)
    with mounted(f"s3://{bucket}", tmp_path / "m", s3_env, "--cache-dir", str(tmp_path / "c"),
                 "--metadata-ttl", "1") as mp:
        fd = os.open(mp / "d" / "small", os.O_RDONLY)
        try:
            assert _read_all(fd) == b"B" * 200_000
            c.delete_object(Bucket=bucket, Key="d/small")
            time.sleep(2.5)
            with pytest.raises(OSError) as e:
                os.lseek(fd, 0, os.SEEK_SET)
                _read_all(fd)
            assert e.value.errno == errno.ESTALE
        finally:
            os.close(fd)
        with pytest.raises(FileNotFoundError):
            (mp / "d" / "small").read_bytes()
