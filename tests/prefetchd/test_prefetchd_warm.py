"""warm / status / unpin against a real SeaweedFS and a real node cache dir."""

from __future__ import annotations

import json
import os

import pytest

import fusecache
from prefetchd import cli


def _put(local_s3, bucket: str, n: int, size: int, prefix: str = "ds/") -> dict[str, bytes]:
    c = local_s3.client()
    out = {}
    for i in range(n):
        key = f"{prefix}sub{i % 2}/f{i:03d}.bin"
        data = os.urandom(size)
        c.put_object(Bucket=bucket, Key=key, Body=data)
        out[key] = data
    return out


def warm_json(capsys, *argv: str) -> tuple[int, dict]:
    rc = cli.main(["warm", *argv, "--json"])
    out, _ = capsys.readouterr()
    return rc, (json.loads(out) if out.strip() else {})


def test_warm_fills_pins_lists_and_second_run_transfers_nothing(
    local_s3, s3_env, bucket, tmp_path, capsys
):
    data = _put(local_s3, bucket, 12, 150_000)
    cache_dir = str(tmp_path / "cache")
    rc, rep = warm_json(capsys, f"s3://{bucket}/ds/", "--cache-dir", cache_dir)
    assert rc == 0
    ds = rep["datasets"][0]
    assert ds["objects"] == 12 and ds["transferred"] == sum(len(v) for v in data.values())
    cache = fusecache.NodeCache.open(cache_dir)
    try:
        for key, body in data.items():
            oid = next(o for o in cache.iter_objects() if o.key == key)
            assert cache.contains_object(oid) and cache.is_pinned(oid)
            got = b"".join(
                cache.get_block(oid, i) for i in range(oid.block_count(cache.block_size))
            )
            assert got == body
        lc = fusecache.ListingCache(cache.env)
        rec = lc.get_dir(bucket, "ds/")
        assert rec is not None
        names = {e.name for e in lc.entries(bucket, "ds/", rec)}
        assert names == {"sub0", "sub1"}
        assert lc.get_dir(bucket, "ds/sub0/") is not None
    finally:
        cache.close()
    rc, rep = warm_json(capsys, f"s3://{bucket}/ds/", "--cache-dir", cache_dir)
    assert rc == 0 and rep["datasets"][0]["transferred"] == 0

    assert cli.main(["status", "--cache-dir", cache_dir, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["cached_objects"] == 12 and rows[0]["objects"] == 12 and rows[0]["pinned"]

    assert cli.main(["unpin", f"s3://{bucket}/ds/", "--cache-dir", cache_dir]) == 0
    capsys.readouterr()
    cache = fusecache.NodeCache.open(cache_dir)
    try:
        assert not any(cache.is_pinned(o) for o in cache.iter_objects())
    finally:
        cache.close()
    assert cli.main(["status", "--cache-dir", cache_dir, "--json"]) == 0
    assert not json.loads(capsys.readouterr().out)[0]["pinned"]


@pytest.mark.parametrize("pattern", ["ds/sub0/*", "ds/sub0/f{000..004}.bin"])
def test_unpin_of_a_pattern_drops_the_pins_its_warm_took(
    local_s3, s3_env, bucket, tmp_path, capsys, pattern
):
    """A warm of a pattern (``s3://b/ds/sub0/*``, what a volume's whole prefix becomes)
    pins its matches; unpinning it by the same URI dropped none of them (the pattern was
    taken for a literal prefix) and left them pinned for good. Objects beside it keep
    their pins."""
    _put(local_s3, bucket, 6, 20_000)
    cache_dir = str(tmp_path / "cache")
    assert warm_json(capsys, f"s3://{bucket}/ds/sub1/", "--cache-dir", cache_dir)[0] == 0
    rc, rep = warm_json(capsys, f"s3://{bucket}/{pattern}", "--cache-dir", cache_dir)
    assert rc == 0 and rep["datasets"][0]["objects"] == 3
    assert cli.main(["unpin", f"s3://{bucket}/{pattern}", "--cache-dir", cache_dir]) == 0
    capsys.readouterr()
    cache = fusecache.NodeCache.open(cache_dir)
    try:
        pinned = {o.key: cache.is_pinned(o) for o in cache.iter_objects()}
    finally:
        cache.close()
    assert pinned == {f"ds/sub{i % 2}/f{i:03d}.bin": i % 2 == 1 for i in range(6)}


def test_resume_transfers_only_the_rest(local_s3, s3_env, bucket, tmp_path, capsys):
    data = _put(local_s3, bucket, 10, 100_000)
    cache_dir = str(tmp_path / "cache")
    # a first run that stopped half way: only sub0 made it
    rc, rep = warm_json(capsys, f"s3://{bucket}/ds/sub0/", "--cache-dir", cache_dir)
    assert rc == 0
    first = rep["datasets"][0]["transferred"]
    rc, rep = warm_json(capsys, f"s3://{bucket}/ds/", "--cache-dir", cache_dir)
    assert rc == 0
    assert rep["datasets"][0]["transferred"] == sum(len(v) for v in data.values()) - first
    assert first > 0


def test_pin_ttl_expires(local_s3, s3_env, bucket, tmp_path, capsys, monkeypatch):
    _put(local_s3, bucket, 2, 1000)
    cache_dir = str(tmp_path / "cache")
    rc, _ = warm_json(capsys, f"s3://{bucket}/ds/", "--cache-dir", cache_dir, "--pin-ttl", "60")
    assert rc == 0
    # the cache's wall clock, moved by the test (not slept through): pinned until the ttl ends
    import time
    import types

    from fusecache import nodecache as nodecache_mod

    skew = [0]
    clock = types.SimpleNamespace(**{k: getattr(time, k) for k in dir(time)
                                     if not k.startswith("_")})
    clock.time_ns = lambda: time.time_ns() + skew[0]
    monkeypatch.setattr(nodecache_mod, "time", clock)
    cache = fusecache.NodeCache.open(cache_dir)
    try:
        objs = list(cache.iter_objects())
        assert len(objs) == 2
        assert all(cache.is_pinned(o) for o in objs), "the warm did not pin"
        skew[0] = 55 * 10**9
        assert all(cache.is_pinned(o) for o in objs), "a pin expired before --pin-ttl"
        skew[0] = 65 * 10**9
        assert not any(cache.is_pinned(o) for o in objs), "a pin outlived --pin-ttl"
    finally:
        cache.close()


def test_warm_pipeline_plan_order_and_dedup(local_s3, s3_env, bucket, tmp_path, capsys):
    c = local_s3.client()
    c.put_object(Bucket=bucket, Key="raw/a.bin", Body=b"a" * 5000)
    c.put_object(Bucket=bucket, Key="ref/labels.csv", Body=b"x,y\n")
    wf = tmp_path / "wf.yaml"
    wf.write_text(f"""apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata: {{generateName: t-}}
spec:
  entrypoint: main
  arguments: {{parameters: [{{name: src, value: 's3://{bucket}/raw/'}}]}}
  templates:
  - name: get
    container: {{image: x, command: [aws, s3, sync, '{{{{workflow.parameters.src}}}}', /data]}}
  - name: train
    container:
      image: x
      args: [--labels, 's3://{bucket}/ref/labels.csv', --data, '{{{{workflow.parameters.src}}}}']
  - name: main
    dag:
      tasks:
      - {{name: get, template: get}}
      - {{name: train, template: train, depends: get}}
""")
    cache_dir = str(tmp_path / "cache")
    rc, rep = warm_json(capsys, "--pipeline", str(wf), "--cache-dir", cache_dir)
    assert rc == 0
    assert [d["uri"] for d in rep["datasets"]] == [
        f"s3://{bucket}/raw/",
        f"s3://{bucket}/ref/labels.csv",
    ]
    assert sum(d["transferred"] for d in rep["datasets"]) == 5000 + 4


def test_missing_bucket_and_unreachable_endpoint_exit_2(s3_env, tmp_path, capsys):
    cache_dir = tmp_path / "cache"
    rc = cli.main(["warm", "s3://no-such-bucket-xyz/p/", "--cache-dir", str(cache_dir)])
    err = capsys.readouterr().err
    assert rc == 2 and "no-such-bucket-xyz" in err and len(err.strip().splitlines()) == 1
    assert not cache_dir.exists()  # nothing in the cache touched
    rc = cli.main(
        [
            "warm",
            "s3://bucket-x/p/",
            "--cache-dir",
            str(cache_dir),
            "--endpoint-url",
            "http://127.0.0.1:9",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "unreachable" in err and "Traceback" not in err
    assert not cache_dir.exists()


def test_an_unreachable_endpoint_is_one_line_on_stderr(s3_env, tmp_path):
    """As a user runs it (a process of its own): the circuit breaker's warning came before the
    error line (a new user's walkthrough, 2026-12-07); at --log-level info it is there."""
    import subprocess
    import sys

    argv = [sys.executable, "-m", "prefetchd.cli", "warm", "s3://bucket-x/p/", "--cache-dir",
            str(tmp_path / "cache"), "--endpoint-url", "http://127.0.0.1:9"]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=s3_env)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "prefetchd: error: s3://bucket-x: endpoint http://127.0.0.1:9 unreachable" in r.stderr
    r = subprocess.run([*argv, "--log-level", "info"], capture_output=True, text=True,
                       timeout=120, env=s3_env)
    assert r.returncode == 2 and "WARNING fusecache.circuit" in r.stderr


@pytest.mark.parametrize("uri", ["gs://b/k", "s3://", "/local/path"])
def test_bad_uri(uri, tmp_path, capsys):
    rc = cli.main(["warm", uri, "--cache-dir", str(tmp_path / "c")])
    assert rc == 2
    assert uri in capsys.readouterr().err


def test_watch_dir_once(local_s3, s3_env, bucket, tmp_path, capsys):
    local_s3.client().put_object(Bucket=bucket, Key="d/x.bin", Body=b"z" * 3000)
    wd = tmp_path / "watch"
    wd.mkdir()
    (wd / "p1.yaml").write_text(f"""apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata: {{name: w}}
spec:
  entrypoint: c
  templates:
  - name: c
    container: {{image: x, args: ['s3://{bucket}/d/']}}
""")
    local_s3.client().put_object(Bucket=bucket, Key="j/y.bin", Body=b"y" * 2000)
    (wd / "job.yaml").write_text(f"""apiVersion: batch/v1
kind: Job
metadata: {{name: j, namespace: ml}}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - {{name: c, image: x, args: ['--data', 's3://{bucket}/j/']}}
""")
    (wd / "junk.yaml").write_text("kind: [\n")
    # a Job suspended by hand holds nothing to warm now: handled, not a failure (blind job
    # round 52: it went to .failed/)
    (wd / "held.yaml").write_text((wd / "job.yaml").read_text().replace(
        "metadata: {name: j, namespace: ml}\nspec:\n",
        "metadata: {name: h, namespace: ml}\nspec:\n  suspend: true\n"))
    assert "suspend: true" in (wd / "held.yaml").read_text()
    cache_dir = str(tmp_path / "cache")
    capsys.readouterr()
    # a training job's manifest is warmed as warm --pipeline warms it; a bad file fails the
    # pass (exit 1, named), and the others are warmed all the same
    assert cli.main(["run", "--watch-dir", str(wd), "--cache-dir", cache_dir, "--once"]) == 1
    assert "1 of the files failed" in capsys.readouterr().err
    assert (wd / ".done" / "p1.yaml").exists() and (wd / ".done" / "job.yaml").exists()
    assert (wd / ".failed" / "junk.yaml").exists() and (wd / ".done" / "held.yaml").exists()
    cache = fusecache.NodeCache.open(cache_dir)
    try:
        assert sorted(o.key for o in cache.iter_objects()) == ["d/x.bin", "j/y.bin"]
    finally:
        cache.close()
    assert cli.main(["run", "--watch-dir", str(wd), "--cache-dir", cache_dir, "--once"]) == 0


def test_resume_after_kill(local_s3, s3_env, bucket, tmp_path, capsys):
    """SIGKILL a throttled warm part way; the rerun fetches only what is missing."""
    import signal
    import subprocess
    import sys
    import time

    data = _put(local_s3, bucket, 20, 100_000)
    total = sum(len(v) for v in data.values())
    cache_dir = str(tmp_path / "cache")
    cmd = [
        sys.executable,
        "-m",
        "prefetchd.cli",
        "warm",
        f"s3://{bucket}/ds/",
        "--cache-dir",
        cache_dir,
        "--bandwidth-limit",
        "400KB",
        "--concurrency",
        "2",
        "--json",
    ]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # until the first blocks are in the cache (a fixed sleep failed under load:
        # the process had not started fetching yet)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and p.poll() is None:
            if os.path.isdir(os.path.join(cache_dir, "cache.lmdb")):
                c = fusecache.NodeCache.open(cache_dir)
                try:
                    if c.stats().blocks > 0:
                        break
                finally:
                    c.close()
            time.sleep(0.05)
        assert p.poll() is None, "warm finished before it could be killed"
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    rc, rep = warm_json(capsys, f"s3://{bucket}/ds/", "--cache-dir", cache_dir)
    assert rc == 0
    again = rep["datasets"][0]["transferred"]
    assert 0 < again < total
    cache = fusecache.NodeCache.open(cache_dir)
    try:
        # every object whole and byte-exact after the kill and the rerun, the integrity
        # counters zero, the byte accounting the sum of what is there
        objs = list(cache.iter_objects())
        assert sorted(o.key for o in objs) == sorted(data)
        for o in objs:
            blocks = [cache.get_block(o, i) for i in range(o.block_count(cache.block_size))]
            assert all(b is not None for b in blocks), o.key
            assert b"".join(blocks) == data[o.key], o.key
        st = cache.stats()
        assert st.counters.get("integrity_errors", 0) == 0, st.counters
        assert st.used_bytes == total
    finally:
        cache.close()


def test_an_unexpected_failure_of_an_early_object_is_not_lost(
    local_s3, s3_env, bucket, tmp_path, capsys, monkeypatch
):
    """Finished fetches are pruned as the warm goes (bounded memory); one that failed with
    an error nobody expected (a disk error, a bug) must still end the warm with an error,
    not be dropped with the pruned ones and reported as a success."""
    _put(local_s3, bucket, 30, 1_000)
    real = fusecache.fetch_object

    def failing_once(store, cache, info, *a, **kw):
        if info.key.endswith("00.bin"):
            raise OSError("node cache disk gone")
        return real(store, cache, info, *a, **kw)
    monkeypatch.setattr(fusecache, "fetch_object", failing_once)
    cache_dir = str(tmp_path / "cache")
    try:
        rc, _ = warm_json(capsys, f"s3://{bucket}/ds/", "--cache-dir", cache_dir,
                          "--concurrency", "1")
    except OSError as e:
        assert "node cache disk gone" in str(e)
    else:
        assert rc != 0


def _status(capsys, cache_dir: str) -> dict[str, dict]:
    assert cli.main(["status", "--cache-dir", cache_dir, "--json"]) == 0
    return {r["uri"]: r for r in json.loads(capsys.readouterr().out)}


def test_status_counts_a_warmed_shard_pattern(local_s3, s3_env, bucket, tmp_path, capsys):
    """A new user's walkthrough (2026-12-07): a warmed `shard-{000000..000002}.tar` showed
    0/3 objects cached (status matched the pattern's text as a prefix)."""
    c = local_s3.client()
    for i in range(4):
        c.put_object(Bucket=bucket, Key=f"sh/shard-{i:06d}.tar", Body=b"s" * (1000 + i))
    uri = f"s3://{bucket}/sh/shard-{{000000..000002}}.tar"
    cache_dir = str(tmp_path / "cache")
    rc, rep = warm_json(capsys, uri, "--cache-dir", cache_dir)
    assert rc == 0 and rep["datasets"][0]["objects"] == 3
    row = _status(capsys, cache_dir)[uri]
    assert (row["cached_objects"], row["cached_bytes"]) == (3, 1000 + 1001 + 1002)


def test_a_rewarm_after_an_overwrite_moves_the_pin_to_the_new_version(
        local_s3, s3_env, bucket, tmp_path, capsys):
    """An object overwritten between two warms: status counted both versions (3/2 objects)
    and the old one stayed pinned beside the new one."""
    c = local_s3.client()
    c.put_object(Bucket=bucket, Key="ver/a.txt", Body=b"v1-aaaaaaaaaa")
    c.put_object(Bucket=bucket, Key="ver/b.txt", Body=b"b")
    cache_dir = str(tmp_path / "cache")
    uri = f"s3://{bucket}/ver/"
    assert warm_json(capsys, uri, "--cache-dir", cache_dir)[0] == 0
    c.put_object(Bucket=bucket, Key="ver/a.txt", Body=b"v2")
    assert warm_json(capsys, uri, "--cache-dir", cache_dir)[0] == 0
    row = _status(capsys, cache_dir)[uri]
    assert (row["objects"], row["cached_objects"], row["cached_bytes"]) == (2, 2, 3)
    cache = fusecache.NodeCache.open(cache_dir)
    try:
        versions = {o.size: cache.is_pinned(o) for o in cache.iter_objects(bucket, "ver/a.txt")}
    finally:
        cache.close()
    assert versions == {13: False, 2: True}


def test_a_warm_the_full_cache_cannot_take_says_so_and_is_partial(
        local_s3, s3_env, bucket, tmp_path, capsys):
    """Objects skipped because the node cache is full of pinned data: exit 0 and `status`
    said `warmed` (the walkthrough's D3); now exit 1, a line naming why, a partial record,
    and the bytes moved before the cache turned out full counted."""
    bs = 1 << 20
    cache_dir = str(tmp_path / "cache")
    fusecache.NodeCache.open(cache_dir, limit_bytes=10 * bs, block_size=bs).close()
    _put(local_s3, bucket, 6, 2 * bs, prefix="big/")  # 12 MiB, 8 MiB of room (10 less 2)
    rc = cli.main(["warm", f"s3://{bucket}/big/", "--cache-dir", cache_dir,
                   "--concurrency", "1"])
    out, err = capsys.readouterr()
    assert rc == 1
    assert "not warmed: the node cache is full of pinned data" in err
    assert "SKIPPED 2 objects" in out and f"transferred {8 * bs} bytes (4 objects)" in out
    row = _status(capsys, cache_dir)[f"s3://{bucket}/big/"]
    assert row["partial"] and row["cached_objects"] == 4


def test_a_dry_run_says_it_fetched_nothing(local_s3, s3_env, bucket, tmp_path, capsys):
    """`--dry-run` printed `transferred 0 bytes (0 objects)`, as a warm of a dataset cached
    already reads (a new user's walkthrough, 2026-12-07)."""
    _put(local_s3, bucket, 3, 1000, prefix="dry/")
    cache_dir = tmp_path / "cache"
    assert cli.main(["warm", f"s3://{bucket}/dry/", "--cache-dir", str(cache_dir),
                     "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.strip() == (f"s3://{bucket}/dry/: 3 objects, 3000 bytes (dry run: listed only, "
                           "nothing fetched or pinned)")


def test_status_counts_the_cached_blocks_of_a_partly_warmed_object(
        local_s3, s3_env, bucket, tmp_path, capsys):
    """An object larger than the room a full cache left, half warmed: `status` said 0 bytes
    cached (it counted whole objects only; blind FUSE round 3, M5). Now the blocks held."""
    bs = 1 << 20
    cache_dir = str(tmp_path / "cache")
    fusecache.NodeCache.open(cache_dir, limit_bytes=10 * bs, block_size=bs).close()
    _put(local_s3, bucket, 1, 16 * bs, prefix="huge/")
    assert cli.main(["warm", f"s3://{bucket}/huge/", "--cache-dir", cache_dir,
                     "--concurrency", "1"]) == 1
    capsys.readouterr()
    cache = fusecache.NodeCache.open(cache_dir)
    try:
        (oid,) = cache.iter_objects(bucket, "huge/")
        held = 16 - len(cache.missing_blocks(oid))
    finally:
        cache.close()
    assert 0 < held < 16
    row = _status(capsys, cache_dir)[f"s3://{bucket}/huge/"]
    assert row["partial"]
    assert (row["cached_objects"], row["cached_bytes"], row["bytes"]) == (0, held * bs, 16 * bs)


def test_a_warms_s3_bytes_are_counted_while_it_runs(local_s3, s3_env, bucket, tmp_path):
    """A blind test of the mount (M5): `fusecache stats` showed a running warm's S3 bytes
    only once it ended, and a killed warm's never. Now they are added every second."""
    import signal
    import subprocess
    import sys
    import time

    data = _put(local_s3, bucket, 20, 100_000)
    cache_dir = str(tmp_path / "cache")
    p = subprocess.Popen([sys.executable, "-m", "prefetchd.cli", "warm", f"s3://{bucket}/ds/",
                          "--cache-dir", cache_dir, "--bandwidth-limit", "300KB",
                          "--concurrency", "2"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        counted = 0
        while time.monotonic() < deadline and p.poll() is None and not counted:
            if os.path.isdir(os.path.join(cache_dir, "cache.lmdb")):
                c = fusecache.NodeCache.open(cache_dir)
                try:
                    counted = c.scoped_counters().get("prefetchd", {}).get("s3_bytes", 0)
                finally:
                    c.close()
            time.sleep(0.1)
        assert p.poll() is None, "the warm ended before its bytes were counted"
        assert counted > 0
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    c = fusecache.NodeCache.open(cache_dir)
    try:
        kept = c.scoped_counters()["prefetchd"]["s3_bytes"]
        assert counted <= kept <= c.stats().used_bytes < sum(len(v) for v in data.values())
    finally:
        c.close()
