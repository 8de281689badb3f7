"""Real mounts over a real SeaweedFS: bytes, concurrency, sharing, bounds, freshness."""

from __future__ import annotations

import errno
import hashlib
import json
import mmap
import os
import random
import secrets
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from fusecache.locals3 import LocalS3
from fusecache.nodecache import _U64, NodeCache, ObjectId

from mounting import free_port, mounted, run_cli
from pagecache import evict_node_cache, resident_pages

pytestmark = [pytest.mark.fuse, pytest.mark.s3]

BIG = 200 << 20
N_SMALL = 2000


@pytest.fixture(scope="module")
def dataset(local_s3: LocalS3) -> dict:
    """One bucket: a 200 MiB object and 2000 small files in 4 directories."""
    c = local_s3.client()
    bucket = "ds-" + secrets.token_hex(4)
    c.create_bucket(Bucket=bucket)
    rnd = random.Random(1)
    big = rnd.randbytes(BIG)
    c.put_object(Bucket=bucket, Key="train/big.bin", Body=big)
    small = {f"train/shard{i % 4}/{i:05d}.jpg": rnd.randbytes(rnd.randrange(1, 20000))
             for i in range(N_SMALL)}
    with ThreadPoolExecutor(16) as ex:
        list(ex.map(lambda kv: c.put_object(Bucket=bucket, Key=kv[0], Body=kv[1]),
                    small.items()))
    return {"bucket": bucket, "big": big, "small": small}


def stats(cache: Path) -> dict:
    r = run_cli(["stats", "--cache-dir", str(cache), "--json"])
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_file(path: Path, chunk: int = 1 << 20) -> bytes:
    with open(path, "rb") as f:
        return b"".join(iter(lambda: f.read(chunk), b""))


def test_large_object_is_byte_exact(dataset, s3_env, tmp_path: Path) -> None:
    with mounted(f"s3://{dataset['bucket']}/train", tmp_path / "m", s3_env,
                 "--cache-dir", str(tmp_path / "c")) as mp:
        assert (mp / "big.bin").stat().st_size == BIG
        assert sha(read_file(mp / "big.bin")) == sha(dataset["big"])
        rnd = random.Random(2)
        fd = os.open(mp / "big.bin", os.O_RDONLY)
        try:
            for _ in range(200):
                off = rnd.randrange(0, BIG)
                n = rnd.choice([1, 4096, 65536, 1 << 20, 5 << 20])
                assert os.pread(fd, n, off) == dataset["big"][off:off + n]
            assert os.pread(fd, 100, BIG - 10) == dataset["big"][-10:]
            assert os.pread(fd, 100, BIG + 5) == b""
        finally:
            os.close(fd)


def test_thousands_of_small_files(dataset, s3_env, tmp_path: Path) -> None:
    with mounted(f"s3://{dataset['bucket']}", tmp_path / "m", s3_env,
                 "--cache-dir", str(tmp_path / "c")) as mp:
        assert sorted(os.listdir(mp / "train")) == ["big.bin", "shard0", "shard1", "shard2",
                                                   "shard3"]
        listed = {f"train/{d}/{n}" for d in ("shard0", "shard1", "shard2", "shard3")
                  for n in os.listdir(mp / "train" / d)}
        assert listed == set(dataset["small"])

        def check(key: str) -> None:
            assert (mp / key).read_bytes() == dataset["small"][key], key
        with ThreadPoolExecutor(4) as ex:
            list(ex.map(check, dataset["small"]))


def test_eight_concurrent_readers_fetch_once(dataset, s3_env, tmp_path: Path) -> None:
    cache = tmp_path / "c"
    with mounted(f"s3://{dataset['bucket']}/train", tmp_path / "m", s3_env,
                 "--cache-dir", str(cache)) as mp:
        with ThreadPoolExecutor(8) as ex:
            digests = list(ex.map(lambda _: sha(read_file(mp / "big.bin", 256 << 10)),
                                  range(8)))
    assert set(digests) == {sha(dataset["big"])}
    st = stats(cache)
    assert st["used_bytes"] == BIG
    assert BIG <= st["s3_bytes"] <= BIG * 1.05, "readers did not share GETs"


def test_writes_get_erofs(dataset, s3_env, tmp_path: Path) -> None:
    with mounted(f"s3://{dataset['bucket']}/train", tmp_path / "m", s3_env,
                 "--cache-dir", str(tmp_path / "c")) as mp:
        for action in (lambda: open(mp / "new.txt", "w"),
                       lambda: open(mp / "big.bin", "r+b"),
                       lambda: os.mkdir(mp / "d"),
                       lambda: os.unlink(mp / "big.bin"),
                       lambda: os.rename(mp / "big.bin", mp / "x")):
            with pytest.raises(OSError) as e:
                action()
            assert e.value.errno == errno.EROFS


def test_two_mounts_share_one_cache_dir(dataset, local_s3, s3_env, tmp_path: Path) -> None:
    other = "ds2-" + secrets.token_hex(4)
    c = local_s3.client()
    c.create_bucket(Bucket=other)
    payload = os.urandom(3 << 20)
    c.put_object(Bucket=other, Key="x.bin", Body=payload)
    cache = tmp_path / "c"
    args = ("--cache-dir", str(cache), "--metadata-ttl", "indefinite")
    with mounted(f"s3://{dataset['bucket']}/train/shard0", tmp_path / "a", s3_env, *args) as a, \
            mounted(f"s3://{other}", tmp_path / "b", s3_env, *args) as b:
        with ThreadPoolExecutor(2) as ex:
            fa = ex.submit(lambda: {n: (a / n).read_bytes() for n in os.listdir(a)})
            fb = ex.submit(lambda: (b / "x.bin").read_bytes())
            got_a, got_b = fa.result(), fb.result()
        assert got_b == payload
        assert all(dataset["small"][f"train/shard0/{n}"] == d for n, d in got_a.items())
    before = stats(cache)
    with mounted(f"s3://{dataset['bucket']}/train/shard0", tmp_path / "a2", s3_env,
                 *args) as a2:
        names = os.listdir(a2)
        assert {n: (a2 / n).read_bytes() for n in names} == got_a
    after = stats(cache)
    assert after["s3_bytes"] == before["s3_bytes"], "a cached dataset was fetched again"
    scoped = after["by_mount"][f"s3://{dataset['bucket']}/train/shard0/"]
    assert scoped["disk_hits"] >= len(names) and f"s3://{other}/" in after["by_mount"]
    assert after["disk_hits"] >= len(names)


def test_disk_cache_bound_holds_under_churn(dataset, s3_env, tmp_path: Path) -> None:
    cache = tmp_path / "c"
    limit = 64 << 20
    with mounted(f"s3://{dataset['bucket']}/train", tmp_path / "m", s3_env,
                 "--cache-dir", str(cache), "--disk-cache-size", "64MiB",
                 "--ram-cache-size", "16MiB") as mp:
        data = read_file(mp / "big.bin")
        assert sha(data) == sha(dataset["big"])
        evictions = (BIG - limit) // (8 << 20)  # 8 MiB blocks
        deadline = time.monotonic() + 60  # write-behind still filling: poll, with a deadline
        while (st := stats(cache))["evictions"] < evictions and time.monotonic() < deadline:
            time.sleep(0.05)
    assert st["used_bytes"] <= limit and st["limit_bytes"] == limit
    assert st["evictions"] >= evictions, st
    assert st["file_bytes"] <= limit + (16 << 20), "LMDB file grew past the bound"


def test_changed_object_seen_after_ttl(local_s3, s3_env, bucket, tmp_path: Path) -> None:
    c = local_s3.client()
    c.put_object(Bucket=bucket, Key="f.txt", Body=b"version one")
    with mounted(f"s3://{bucket}", tmp_path / "m", s3_env, "--cache-dir", str(tmp_path / "c"),
                 "--metadata-ttl", "1") as mp:
        assert (mp / "f.txt").read_bytes() == b"version one"
        c.put_object(Bucket=bucket, Key="f.txt", Body=b"version two, longer")
        c.put_object(Bucket=bucket, Key="new.txt", Body=b"n")
        time.sleep(2.5)
        assert (mp / "f.txt").read_bytes() == b"version two, longer"
        assert (mp / "new.txt").read_bytes() == b"n"
        assert "new.txt" in os.listdir(mp)


def test_metrics_endpoint(dataset, s3_env, tmp_path: Path) -> None:
    port = free_port()
    with mounted(f"s3://{dataset['bucket']}/train/shard1", tmp_path / "m", s3_env,
                 "--cache-dir", str(tmp_path / "c"), "--metrics-port", str(port),
                 "--folder-readahead", "0") as mp:  # 20 files read, 20 GETs
        for n in os.listdir(mp)[:20]:
            (mp / n).read_bytes()
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    for name in ("fusecache_cache_hits_total", "fusecache_cache_misses_total",
                 "fusecache_s3_bytes_total", "fusecache_s3_request_seconds_bucket",
                 "fusecache_cache_evictions_total", "fusecache_cache_bytes"):
        assert name in text, name
    assert 'fusecache_s3_requests_total{op="get"} 20.0' in text


def test_unchanged_file_is_re_read_from_the_page_cache(dataset, s3_env, tmp_path: Path) -> None:
    """keep_cache on a second open of an unchanged file: no FUSE reads reach the mount."""
    port = free_port()

    def block_reads() -> float:
        return _metric(port, ('fusecache_cache_hits_total{tier="ram"',
                              'fusecache_cache_misses_total{tier="ram"'))

    key = sorted(dataset["small"])[0]
    with mounted(f"s3://{dataset['bucket']}", tmp_path / "m", s3_env, "--cache-dir",
                 str(tmp_path / "c"), "--metrics-port", str(port),
                 "--metadata-ttl", "indefinite") as mp:
        assert (mp / key).read_bytes() == dataset["small"][key]
        assert (mp / key).read_bytes() == dataset["small"][key]  # second open: keep_cache
        before = block_reads()
        assert before > 0
        for _ in range(5):
            assert (mp / key).read_bytes() == dataset["small"][key]
        assert block_reads() == before, "re-reads of an unchanged file reached the mount"


def _metrics_text(port: int) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()


def _sum_samples(text: str, series: str | tuple[str, ...]) -> float:
    """The sum of the samples whose line starts with *series* (name and labels; a tuple:
    any of them)."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(series))


def _metric(port: int, series: str | tuple[str, ...]) -> float:
    """The sum of the mount's samples whose line starts with *series*."""
    return _sum_samples(_metrics_text(port), series)


def test_open_prefill_hands_cached_small_files_to_the_page_cache(dataset, s3_env,
                                                                 tmp_path: Path) -> None:
    """A remount over a warm node cache: each small file's bytes go to the kernel with its
    first OPEN (counted), only files up to --open-prefill, and every byte read back is S3's,
    whole, at an offset and through mmap; with --open-prefill 0 none is handed over."""
    prefix = "train/shard2/"
    files = {k[len(prefix):]: v for k, v in dataset["small"].items() if k.startswith(prefix)}
    src, cache = f"s3://{dataset['bucket']}/{prefix}", str(tmp_path / "c")
    with mounted(src, tmp_path / "m", s3_env, "--cache-dir", cache) as mp:
        for name, data in files.items():  # warm the node cache
            assert (mp / name).read_bytes() == data

    def read_all(mp: Path, names: list[str]) -> None:
        def check(name: str) -> None:
            assert (mp / name).read_bytes() == files[name], name
        with ThreadPoolExecutor(4) as ex:
            list(ex.map(check, names))

    names = sorted(files)
    port = free_port()
    with mounted(src, tmp_path / "m", s3_env, "--cache-dir", cache, "--metrics-port",
                 str(port), "--open-prefill", "8KiB") as mp:
        read_all(mp, names)
        small = [n for n in names if len(files[n]) <= 8192]
        assert 0 < len(small) < len(names)
        assert _metric(port, "fusecache_open_prefilled_files_total ") == len(small)
        for name in names[:20]:  # pages handed over are the file's: offsets and mmap
            data = files[name]
            with open(mp / name, "rb") as f:
                assert os.pread(f.fileno(), 100, len(data) // 2) == data[len(data) // 2:][:100]
                with mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as m:
                    assert m[:] == data
        assert _metric(port, 'fusecache_s3_requests_total{op="get"}') == 0
    port = free_port()
    with mounted(src, tmp_path / "m", s3_env, "--cache-dir", cache, "--metrics-port",
                 str(port), "--open-prefill", "0") as mp:
        read_all(mp, names[:50])
        assert _metric(port, "fusecache_open_prefilled_files_total ") == 0


def test_lookup_of_a_cached_small_file_asks_its_bytes_in_before_its_open(
        local_s3, s3_env, bucket, disk_tmp_path: Path) -> None:
    """A remount over a warm node cache whose pages were dropped (a prefetched dataset's
    first epoch): a file's LOOKUP (here a stat, which opens nothing) starts the disk
    read of its bytes, so its OPEN finds them in memory; files nobody looked up stay on
    disk. Read back whole afterwards, every byte is S3's."""
    c = local_s3.client()
    rnd = random.Random(7)
    files = {f"cls/{i:03d}.jpg": rnd.randbytes(48 * 1024 + i) for i in range(24)}
    for key, data in files.items():
        c.put_object(Bucket=bucket, Key=key, Body=data)
    cache = disk_tmp_path / "c"
    opts = ("--cache-dir", str(cache), "--folder-readahead", "0")
    with mounted(f"s3://{bucket}/", disk_tmp_path / "m", s3_env, *opts) as mp:
        for key, data in files.items():
            assert (mp / key).read_bytes() == data
    nc = NodeCache.open(cache)
    spans = {}
    with nc.env.begin() as txn:
        for key in files:
            head = c.head_object(Bucket=bucket, Key=key)
            o = ObjectId(bucket, key, head["ETag"].strip('"'), head["ContentLength"])
            raw = txn.get(nc.block_key(o, 0), db=nc._boffs)
            assert raw is not None, key
            spans[key] = (_U64.unpack(raw)[0], o.size)
    evict_node_cache(nc, cache)
    nc.close()
    data_file = cache / "cache.lmdb" / "data.mdb"

    def in_memory(key: str) -> bool:
        off, size = spans[key]
        pages = (off + size - 1) // mmap.PAGESIZE - off // mmap.PAGESIZE + 1
        return resident_pages(data_file, off, size) == pages

    looked, others = sorted(files)[::4], sorted(files)[1::4]
    with mounted(f"s3://{bucket}/", disk_tmp_path / "m", s3_env, *opts) as mp:
        for key in looked:
            assert (mp / key).stat().st_size == len(files[key])
        deadline = time.monotonic() + 10
        while not all(in_memory(k) for k in looked):
            assert time.monotonic() < deadline, [k for k in looked if not in_memory(k)]
            time.sleep(0.02)
        assert sum(in_memory(k) for k in others) < len(others) / 2
        for key, data in files.items():
            assert (mp / key).read_bytes() == data, key


def test_prefilled_pages_are_dropped_when_the_object_changes(local_s3, s3_env, bucket,
                                                            tmp_path: Path) -> None:
    """Pages handed to the kernel at open belong to that ETag: after the object changes,
    the next open (past the TTL) reads the new bytes, not the prefilled ones."""
    c = local_s3.client()
    c.put_object(Bucket=bucket, Key="g.txt", Body=b"version one")
    cache = str(tmp_path / "c")
    with mounted(f"s3://{bucket}", tmp_path / "m", s3_env, "--cache-dir", cache) as mp:
        assert (mp / "g.txt").read_bytes() == b"version one"  # now in the node cache
    port = free_port()
    with mounted(f"s3://{bucket}", tmp_path / "m", s3_env, "--cache-dir", cache,
                 "--metadata-ttl", "1", "--metrics-port", str(port)) as mp:
        f = open(mp / "g.txt", "rb")  # held open: the kernel keeps the inode and its pages
        assert f.read() == b"version one"
        assert _metric(port, "fusecache_open_prefilled_files_total ") == 1
        c.put_object(Bucket=bucket, Key="g.txt", Body=b"version two, longer")
        time.sleep(2.5)
        assert (mp / "g.txt").read_bytes() == b"version two, longer"
        f.close()


def test_queued_requests_are_served_without_a_scheduler_pass(dataset, s3_env,
                                                             tmp_path: Path) -> None:
    """The mount's request loop (fusecache/fuseloop.py): 8 readers of 500 small files keep
    requests queued; some are taken at once, some through trio, every byte is S3's, and
    the mount unmounts cleanly after. With FUSECACHE_FUSE_LOOP=trio pyfuse3's own loop
    serves the same bytes (and there are no such counts)."""
    prefix = "train/shard1/"
    files = {k[len(prefix):]: v for k, v in dataset["small"].items() if k.startswith(prefix)}
    src = f"s3://{dataset['bucket']}/{prefix}"

    def read_all(mp: Path) -> None:
        def check(name: str) -> None:
            assert (mp / name).read_bytes() == files[name], name
        with ThreadPoolExecutor(8) as ex:
            list(ex.map(check, sorted(files)))

    for env, counted in ((s3_env, True), ({**s3_env, "FUSECACHE_FUSE_LOOP": "trio"}, False)):
        port = free_port()
        with mounted(src, tmp_path / "m", env, "--cache-dir", str(tmp_path / "c"),
                     "--metrics-port", str(port)) as mp:
            read_all(mp)  # from S3 (the first mount) or the node cache
            read_all(mp)  # from the RAM tier and the kernel's page cache
            text = _metrics_text(port)
        waits = {how: _sum_samples(text, f'fusecache_fuse_request_waits_total{{how="{how}"}}')
                 for how in ("at_once", "scheduled")}
        if counted:
            assert waits["at_once"] > 0 and waits["scheduled"] > 0, waits
        else:
            assert "fusecache_fuse_request_waits" not in text


def test_the_next_epoch_after_the_ttl_lists_each_folder_once(dataset, s3_env,
                                                              tmp_path: Path) -> None:
    """An epoch that starts after --metadata-ttl (the default 60 s is shorter than most
    epochs): opening the files of a folder again lists the folder once, instead of a HEAD
    and a LIST per file, and every byte is still S3's."""
    prefix = "train/shard3/"
    files = {k[len(prefix):]: v for k, v in dataset["small"].items() if k.startswith(prefix)}
    names = sorted(files)[:200]
    src = f"s3://{dataset['bucket']}/train/"
    port = free_port()
    with mounted(src, tmp_path / "m", s3_env, "--cache-dir", str(tmp_path / "c"),
                 "--metrics-port", str(port), "--metadata-ttl", "2") as mp:
        folder = mp / "shard3"
        assert sorted(os.listdir(folder))[:200] == names
        for name in names:
            assert (folder / name).read_bytes() == files[name]
        before = {op: _metric(port, f'fusecache_s3_requests_total{{op="{op}"}}')
                  for op in ("head", "list")}
        time.sleep(2.5)  # the listing and every name are past the TTL now
        rnd = random.Random(5)
        for name in rnd.sample(names, len(names)):
            assert (folder / name).read_bytes() == files[name], name
        after = {op: _metric(port, f'fusecache_s3_requests_total{{op="{op}"}}')
                 for op in ("head", "list")}
    assert after["head"] - before["head"] == 0, (before, after)
    # the folder and its parent, again each time the TTL passes during the epoch
    assert 1 <= after["list"] - before["list"] <= 6, (before, after)
