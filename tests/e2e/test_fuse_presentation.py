"""What a real mount shows of itself to other users and tools: owner and modes (--uid, --gid,
--file-mode, --dir-mode, as Mountpoint's), statfs (``df`` lists it), and a --block-size that
shares nothing with the node cache said on the terminal (a blind test of the mount found
each missing or only in the log)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from mounting import mounted, run_cli

pytestmark = [pytest.mark.fuse, pytest.mark.s3]


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A folder other users may pass through (pytest's own are root's, mode 0700)."""
    d = Path(tempfile.mkdtemp(prefix="fc-present-", dir="/tmp"))
    d.chmod(0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _as_nobody(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                           *argv], capture_output=True, text=True, timeout=30)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become nobody")
def test_owner_and_modes_decide_who_reads(local_s3, s3_env, bucket, open_dir: Path) -> None:
    c = local_s3.client()
    c.put_object(Bucket=bucket, Key="ds/a.txt", Body=b"alpha")
    cache = open_dir / "c"
    with mounted(f"s3://{bucket}", open_dir / "m1", s3_env, "--cache-dir", str(cache),
                 "--allow-other") as mp:
        st = os.stat(mp / "ds" / "a.txt")
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 0, 0o444)
        assert stat.S_IMODE(os.stat(mp / "ds").st_mode) == 0o555
        r = _as_nobody("cat", str(mp / "ds" / "a.txt"))
        assert (r.returncode, r.stdout) == (0, "alpha"), r.stderr
    with mounted(f"s3://{bucket}", open_dir / "m2", s3_env, "--cache-dir", str(cache),
                 "--allow-other", "--uid", "4242", "--gid", "4343", "--file-mode", "0440",
                 "--dir-mode", "0550") as mp:
        st = os.stat(mp / "ds" / "a.txt")
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (4242, 4343, 0o440)
        st = os.stat(mp / "ds")
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (4242, 4343, 0o550)
        r = _as_nobody("cat", str(mp / "ds" / "a.txt"))  # neither owner nor in its group
        assert r.returncode != 0 and "Permission denied" in r.stderr, r
        r = subprocess.run(["setpriv", "--reuid=4242", "--regid=4343", "--clear-groups",
                            "cat", str(mp / "ds" / "a.txt")], capture_output=True, text=True,
                           timeout=30)
        assert (r.returncode, r.stdout) == (0, "alpha"), r.stderr


def test_df_lists_the_mount(local_s3, s3_env, bucket, tmp_path: Path) -> None:
    local_s3.client().put_object(Bucket=bucket, Key="x", Body=b"x")
    with mounted(f"s3://{bucket}", tmp_path / "m", s3_env, "--cache-dir",
                 str(tmp_path / "c")) as mp:
        st = os.statvfs(mp)
        assert st.f_blocks > 0 and st.f_files > 0 and st.f_bavail == st.f_blocks
        assert st.f_flag & os.ST_RDONLY
        out = subprocess.run(["df", "-P"], capture_output=True, text=True, timeout=30).stdout
        assert any(line.split()[-1] == str(mp) for line in out.splitlines()[1:]), out


def test_a_block_size_the_node_cache_does_not_share_is_said(local_s3, s3_env, bucket,
                                                            tmp_path: Path) -> None:
    local_s3.client().put_object(Bucket=bucket, Key="x", Body=b"x")
    cache = tmp_path / "c"
    with mounted(f"s3://{bucket}", tmp_path / "m1", s3_env, "--cache-dir", str(cache)):
        pass  # (the cache made with its own block size, 8MiB)
    mp = tmp_path / "m2"
    mp.mkdir()
    r = run_cli(["mount", f"s3://{bucket}", str(mp), "--cache-dir", str(cache),
                 "--block-size", "4MiB"], env=s3_env)
    try:
        assert r.returncode == 0, r.stderr
        assert "--block-size 4194304 differs from the node cache's own (8388608)" in r.stderr
    finally:
        run_cli(["umount", str(mp)], env=s3_env)


def test_a_metrics_port_just_scraped_is_taken_again(local_s3, s3_env, bucket,
                                                    tmp_path: Path) -> None:
    """A remount on the port of a mount scraped a moment before: the scrape's TIME_WAIT
    made the port check refuse it ('Address already in use', exit 2) for a minute."""
    import urllib.request

    from mounting import free_port

    local_s3.client().put_object(Bucket=bucket, Key="x", Body=b"x")
    port = free_port()
    args = ("--cache-dir", str(tmp_path / "c"), "--metrics-port", str(port))
    with mounted(f"s3://{bucket}", tmp_path / "m1", s3_env, *args):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            assert b"fusecache" in r.read()
    with mounted(f"s3://{bucket}", tmp_path / "m2", s3_env, *args):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            assert r.status == 200
