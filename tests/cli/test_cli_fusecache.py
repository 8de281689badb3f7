"""The ``fusecache`` command line as a user runs it: bad arguments, warnings, stats, s3.

Real processes throughout: ``python -m fusecache.cli``, a real SeaweedFS, real FUSE mounts.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from fusecache.mount import is_mounted

from mounting import FUSECACHE, mounted, run_cli

pytestmark = [pytest.mark.s3]


def _one_line_usage_error(r: subprocess.CompletedProcess, names: str) -> None:
    err = r.stderr.strip()
    assert r.returncode == 2, (r.returncode, err)
    assert len(err.splitlines()) == 1, err
    assert names in err, err
    assert "Traceback" not in err


@pytest.mark.fuse
@pytest.mark.parametrize("extra, names", [
    (["--endpoint-url", "127.0.0.1:34318"], "--endpoint-url"),
    (["--endpoint-url", "http://127.0.0.1:99999"], "--endpoint-url"),
    # (the password would be logged; a path made a missing bucket of a wrong URL)
    (["--endpoint-url", "http://ak:hunter2@127.0.0.1:9000"], "with credentials before the host"),
    (["--endpoint-url", "http://127.0.0.1:9000/s3"], "with no path (/s3)"),
    (["--metrics-port", "99999"], "--metrics-port"),
    (["--metrics-port", "0"], "--metrics-port"),
    (["--disk-cache-size", "0"], "--disk-cache-size"),
    (["--read-timeout", "-5"], "--read-timeout"),
    (["--metadata-ttl", "-1"], "--metadata-ttl"),
    (["--log-level", "loud"], "log level"),
    (["--block-size", "1KiB"], "--block-size"),
    (["--folder-readahead", "-1"], "--folder-readahead"),
    (["--folder-readahead", "many"], "--folder-readahead"),
    (["--max-connections", "0"], "--max-connections"),
    (["--max-connections", "many"], "--max-connections"),
    (["--uid", "-1"], "--uid"),
    (["--gid", "root"], "--gid"),
    (["--file-mode", "0644"], "invalid --file-mode '0644': the mount is read-only, so no "
                              "write bits (such as 0444)"),
    (["--dir-mode", "0o7555"], "--dir-mode"),
    (["--log-file", "/"], "--log-file /: is a directory"),  # (was a traceback's name, exit 1)
    (["--log-file", "/nonexistent-fc/d/x.log"], "no such directory /nonexistent-fc/d"),
])
def test_bad_mount_arguments_are_one_line_and_exit_2(s3_env, bucket, tmp_path: Path,
                                                     extra: list[str], names: str) -> None:
    mp = tmp_path / "m"
    mp.mkdir()
    r = run_cli(["mount", f"s3://{bucket}", str(mp), "--cache-dir", str(tmp_path / "c"),
                 *extra], env=s3_env, timeout=60)
    _one_line_usage_error(r, names)
    assert "hunter2" not in r.stderr + r.stdout
    assert not is_mounted(mp)


@pytest.mark.fuse
def test_one_connection_serves_a_folder_read_by_four_threads(local_s3, s3_env, bucket,
                                                             tmp_path: Path) -> None:
    """--max-connections 1: the readers and folder read-ahead share one GET at a time,
    and every file still reads back whole."""
    c = local_s3.client()
    want = {f"f{i:02d}.bin": bytes([i]) * (1000 + 37 * i) for i in range(24)}
    for name, body in want.items():
        c.put_object(Bucket=bucket, Key=f"ds/{name}", Body=body)
    mp = tmp_path / "m"
    mp.mkdir()
    with mounted(f"s3://{bucket}", mp, s3_env, "--cache-dir", str(tmp_path / "c"),
                 "--max-connections", "1"), ThreadPoolExecutor(4) as pool:
        got = dict(zip(want, pool.map(lambda n: (mp / "ds" / n).read_bytes(), want),
                       strict=True))
    assert got == want


@pytest.mark.fuse
def test_endpoint_without_scheme_in_the_environment(s3_env, bucket, tmp_path: Path) -> None:
    mp = tmp_path / "m"
    mp.mkdir()
    env = dict(s3_env, AWS_ENDPOINT_URL=s3_env["AWS_ENDPOINT_URL"].split("://", 1)[1])
    r = run_cli(["mount", f"s3://{bucket}", str(mp), "--cache-dir", str(tmp_path / "c")],
                env=env, timeout=60)
    _one_line_usage_error(r, "AWS_ENDPOINT_URL")
    assert not is_mounted(mp)


@pytest.mark.fuse
def test_metrics_port_in_use_is_refused_before_mounting(s3_env, bucket, tmp_path: Path) -> None:
    mp = tmp_path / "m"
    mp.mkdir()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = run_cli(["mount", f"s3://{bucket}", str(mp), "--cache-dir", str(tmp_path / "c"),
                     "--metrics-port", str(port)], env=s3_env, timeout=60)
    _one_line_usage_error(r, f"--metrics-port {port}")
    assert not is_mounted(mp)


@pytest.mark.fuse
def test_nonempty_mountpoint_needs_nonempty(local_s3, s3_env, bucket, tmp_path: Path) -> None:
    local_s3.client().put_object(Bucket=bucket, Key="a.txt", Body=b"from s3")
    mp = tmp_path / "m"
    mp.mkdir()
    (mp / "mine.txt").write_text("local file")
    r = run_cli(["mount", f"s3://{bucket}", str(mp), "--cache-dir", str(tmp_path / "c")],
                env=s3_env, timeout=60)
    _one_line_usage_error(r, "not empty")
    assert "--nonempty" in r.stderr and not is_mounted(mp)
    with mounted(f"s3://{bucket}", mp, s3_env, "--cache-dir", str(tmp_path / "c"),
                 "--nonempty"):
        assert (mp / "a.txt").read_bytes() == b"from s3"
    assert (mp / "mine.txt").read_text() == "local file"


@pytest.mark.fuse
def test_unmounting_a_busy_mount_says_how(local_s3, s3_env, bucket, tmp_path: Path) -> None:
    """A file open on the mount: umount fails, and says to close it or use --lazy (a new
    user's walkthrough: only fusermount3's "Device or resource busy")."""
    local_s3.client().put_object(Bucket=bucket, Key="a.txt", Body=b"from s3")
    mp = tmp_path / "m"
    with mounted(f"s3://{bucket}", mp, s3_env, "--cache-dir", str(tmp_path / "c")):
        with open(mp / "a.txt", "rb"):
            r = run_cli(["umount", str(mp)], env=s3_env, timeout=60)
            assert r.returncode == 1 and "fusecache umount --lazy" in r.stderr, r.stderr
            assert is_mounted(mp)


@pytest.mark.fuse
@pytest.mark.parametrize("what", ["object", "typo", "empty-bucket"])
def test_source_without_objects_gets_a_warning(local_s3, s3_env, bucket, tmp_path: Path,
                                               what: str) -> None:
    c = local_s3.client()
    if what != "empty-bucket":
        c.put_object(Bucket=bucket, Key="ds/train/a.bin", Body=b"x" * 10)
    source = {"object": f"s3://{bucket}/ds/train/a.bin", "typo": f"s3://{bucket}/ds/trian",
              "empty-bucket": f"s3://{bucket}"}[what]
    mp = tmp_path / "m"
    mp.mkdir()
    r = run_cli(["mount", source, str(mp), "--cache-dir", str(tmp_path / "c")], env=s3_env)
    try:
        assert r.returncode == 0, r.stderr
        err = r.stderr.strip()
        assert err.startswith("fusecache: warning: ") and len(err.splitlines()) == 1, err
        expect = {"object": "is an object, not a folder", "typo": "misspelled prefix",
                  "empty-bucket": "is empty"}[what]
        assert expect in err, err
    finally:
        run_cli(["umount", str(mp)], env=s3_env)


@pytest.mark.fuse
def test_source_with_objects_mounts_quietly(local_s3, s3_env, bucket, tmp_path: Path) -> None:
    local_s3.client().put_object(Bucket=bucket, Key="ds/a.bin", Body=b"x")
    mp = tmp_path / "m"
    mp.mkdir()
    r = run_cli(["mount", f"s3://{bucket}/ds", str(mp), "--cache-dir", str(tmp_path / "c")],
                env=s3_env)
    try:
        assert r.returncode == 0 and r.stderr.strip() == "", r.stderr
    finally:
        run_cli(["umount", str(mp)], env=s3_env)


def _stats(cache: Path) -> dict:
    r = run_cli(["stats", "--cache-dir", str(cache), "--json"])
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.fuse
def test_mount_keeps_the_node_caches_bound_unless_asked(s3_env, bucket, tmp_path: Path) -> None:
    cache = tmp_path / "c"
    with mounted(f"s3://{bucket}", tmp_path / "m", s3_env, "--cache-dir", str(cache),
                 "--disk-cache-size", "1GiB"):
        pass
    assert _stats(cache)["limit_bytes"] == 1 << 30
    with mounted(f"s3://{bucket}", tmp_path / "m", s3_env, "--cache-dir", str(cache)):
        pass
    assert _stats(cache)["limit_bytes"] == 1 << 30
    with mounted(f"s3://{bucket}", tmp_path / "m", s3_env, "--cache-dir", str(cache),
                 "--disk-cache-size", "2GiB"):
        pass
    assert _stats(cache)["limit_bytes"] == 2 << 30


@pytest.mark.fuse
def test_stats_counts_a_read_at_once(local_s3, s3_env, bucket, tmp_path: Path) -> None:
    body = os.urandom(3 << 20)
    local_s3.client().put_object(Bucket=bucket, Key="f.bin", Body=body)
    cache = tmp_path / "c"
    with mounted(f"s3://{bucket}", tmp_path / "m", s3_env, "--cache-dir", str(cache)) as mp:
        assert (mp / "f.bin").read_bytes() == body
        st = _stats(cache)  # right after the read, the mount still running
        assert st["s3_gets"] >= 1
        assert st["s3_bytes"] >= len(body)


def test_stats_into_a_closed_pipe_has_no_traceback(s3_env, tmp_path: Path) -> None:
    from fusecache.nodecache import NodeCache

    NodeCache.open(tmp_path / "c").close()
    p = subprocess.Popen([*FUSECACHE, "stats", "--cache-dir", str(tmp_path / "c")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout is not None and p.stderr is not None
    p.stdout.close()  # like `| head -0`: the reader is gone before anything is written
    err = p.stderr.read().decode()
    assert p.wait(timeout=60) == 0
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_stats_of_a_missing_cache_dir_is_exit_2(tmp_path: Path) -> None:
    r = run_cli(["stats", "--cache-dir", str(tmp_path / "nope")])
    _one_line_usage_error(r, "--cache-dir")
    assert not (tmp_path / "nope").exists()


def _weed_pids(data_dir: Path) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                argv = (d / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if "weed" in argv and f"-dir={data_dir}" in argv:
                out.append(int(d.name))
    return out


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_fusecache_s3_serves_then_stops_everything(sig: signal.Signals) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    p = subprocess.Popen([*FUSECACHE, "s3", "--bucket", "demo"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
    assert p.stdout is not None
    exports: dict[str, str] = {}
    first = ""
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = p.stdout.readline()
            if not line or line.startswith("# Ctrl-C"):
                break
            first = first or line
            m = re.fullmatch(r"export (\w+)=(\S+)\n", line)
            if m:
                exports[m.group(1)] = m.group(2)
        assert {"AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID",
                "AWS_SECRET_ACCESS_KEY"} <= exports.keys(), first
        data_dir = Path(re.search(r"data in (\S+)", first).group(1))  # type: ignore[union-attr]
        assert (data_dir / "s3.json").exists() and _weed_pids(data_dir)
        code = ("import boto3, os; c = boto3.client('s3'); "
                "c.put_object(Bucket='demo', Key='k', Body=b'v'); "
                "print(c.get_object(Bucket='demo', Key='k')['Body'].read().decode())")
        r = subprocess.run([sys.executable, "-c", code], env={**env, **exports},
                           capture_output=True, text=True, timeout=60)
        assert r.stdout.strip() == "v", r.stderr
    finally:
        p.send_signal(sig)
        rc = p.wait(timeout=60)
    err = p.stderr.read() if p.stderr else ""
    assert rc == 0, err
    assert "Traceback" not in err
    assert not _weed_pids(data_dir)
    assert not data_dir.exists()


@pytest.mark.parametrize("name", ["Bad_Bucket", "ab", "-demo", "a..b"])
def test_fusecache_s3_refuses_a_bucket_name_s3_would(tmp_path: Path, name: str) -> None:
    """Blind job round 36: `--bucket Bad_Bucket` warned that the bucket was not created and
    served on; the name is refused (exit 2) before SeaweedFS starts."""
    data = tmp_path / "s3data"
    p = subprocess.Popen([*FUSECACHE, "s3", "--data-dir", str(data), "--bucket", "demo",
                          f"--bucket={name}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:  # (the old behaviour: serving) stop it and its weed cleanly
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=60)
    _one_line_usage_error(subprocess.CompletedProcess(p.args, p.returncode, out, err),
                          f"invalid bucket name {name!r}")
    assert "--bucket" in err and not data.exists() and not _weed_pids(data)


def test_fusecache_s3_keeps_a_given_data_dir_but_not_its_keys(tmp_path: Path) -> None:
    data = tmp_path / "s3data"
    for run in range(2):  # the second finds the bucket it asks for kept: no warning about it
        p = subprocess.Popen([*FUSECACHE, "s3", "--data-dir", str(data), "--bucket", "mydata"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert p.stdout is not None and p.stderr is not None
        try:
            for line in p.stdout:
                if line.startswith("export AWS_SECRET_ACCESS_KEY"):
                    break
            assert (data / "s3.json").exists()
        finally:
            p.send_signal(signal.SIGTERM)
            assert p.wait(timeout=60) == 0
        err = p.stderr.read()
        assert "not created" not in err, (run, err)
        assert data.is_dir() and not (data / "s3.json").exists() and not _weed_pids(data)


@pytest.mark.fuse
def test_a_source_with_an_empty_segment_after_the_bucket_is_refused(s3_env, bucket,
                                                                     tmp_path: Path) -> None:
    """``s3://b//k`` was mounted as ``s3://b/k``, another folder, without a word (a blind test
    of the mount); keys that start with '/' cannot be mounted."""
    mp = tmp_path / "m"
    mp.mkdir()
    r = run_cli(["mount", f"s3://{bucket}//k", str(mp), "--cache-dir", str(tmp_path / "c")],
                env=s3_env, timeout=60)
    _one_line_usage_error(r, f"did you mean s3://{bucket}/k?")
    assert not is_mounted(mp)
