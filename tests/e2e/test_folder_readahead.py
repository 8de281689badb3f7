"""Folder read-ahead through a real mount over SeaweedFS: a folder read file by file in
shuffled order is fetched ahead with no file fetched twice; a job that opens a few files
of a big folder fetches at most --folder-readahead more per file; folders, large files
and files already cached are never fetched ahead (their node-cache pages are asked for
instead); every byte is the object's."""

from __future__ import annotations

import os
import random
import re
import secrets
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from fusecache.locals3 import LocalS3

from mounting import free_port, mount_pids, mounted

pytestmark = [pytest.mark.fuse, pytest.mark.s3]

N_FILES = 240
BIG = 3 << 20  # over the 2 MiB limit of a file fetched ahead


@pytest.fixture(scope="module")
def dataset(local_s3: LocalS3) -> dict:
    """Folder 'imgs/': 240 small files, one 3 MiB file and a subfolder with 5 files."""
    c = local_s3.client()
    bucket = "fra-" + secrets.token_hex(4)
    c.create_bucket(Bucket=bucket)
    rnd = random.Random(7)
    objs = {f"imgs/{i:04d}.jpg": rnd.randbytes(rnd.randrange(2000, 60000))
            for i in range(N_FILES)}
    objs["imgs/big.bin"] = rnd.randbytes(BIG)
    objs.update({f"imgs/sub/{i}.jpg": rnd.randbytes(5000) for i in range(5)})
    with ThreadPoolExecutor(16) as ex:
        list(ex.map(lambda kv: c.put_object(Bucket=bucket, Key=kv[0], Body=kv[1]),
                    objs.items()))
    return {"bucket": bucket, "objs": objs}


def metrics(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    out = {}
    for m in re.finditer(r'^fusecache_s3_requests_total\{op="get"\} (\S+)$', text, re.M):
        out["gets"] = float(m.group(1))
    for m in re.finditer(r'^fusecache_s3_bytes_total (\S+)$', text, re.M):
        out["s3_bytes"] = float(m.group(1))
    for m in re.finditer(r'^fusecache_folder_readahead_files_total\{result="(\w+)"\} (\S+)$',
                         text, re.M):
        out[m.group(1)] = float(m.group(2))
    return out


def small_names(dataset: dict) -> list[str]:
    return sorted(k for k in dataset["objs"] if k.count("/") == 1 and k.endswith(".jpg"))


def test_a_folder_read_in_shuffled_order_is_fetched_ahead_once(dataset, s3_env,
                                                               tmp_path: Path) -> None:
    port = free_port()
    with mounted(f"s3://{dataset['bucket']}", tmp_path / "m", s3_env,
                 "--cache-dir", str(tmp_path / "c"), "--metrics-port", str(port)) as mp:
        names = small_names(dataset)
        assert sorted(f"imgs/{n}" for n in os.listdir(mp / "imgs") if n.endswith(".jpg")) \
            == names
        order = list(names)
        random.Random(3).shuffle(order)

        def check(key: str) -> None:
            with open(mp / key, "rb", buffering=0) as f:
                assert f.readall() == dataset["objs"][key], key
        with ThreadPoolExecutor(4) as ex:
            list(ex.map(check, order))
        m = metrics(port)
    # Every small file fetched exactly once (ahead or by its reader); the big file and
    # the subfolder's files were never read, so never fetched.
    assert m["gets"] == N_FILES, m
    assert m["s3_bytes"] == sum(len(dataset["objs"][k]) for k in names), m
    assert m["fetched"] >= N_FILES // 2, m  # most of the folder came ahead of its reader
    assert m["used"] >= m["fetched"] * 0.9, m
    assert m.get("failed", 0) == 0, m


def test_a_few_files_of_a_big_folder_cost_at_most_per_open_more(dataset, s3_env,
                                                                tmp_path: Path) -> None:
    per_open, opened = 3, 10
    names = small_names(dataset)[::17][:opened]
    for setting, most in ((str(per_open), opened + per_open * (opened - 1)), ("0", opened)):
        port = free_port()
        with mounted(f"s3://{dataset['bucket']}", tmp_path / f"m{setting}", s3_env,
                     "--cache-dir", str(tmp_path / f"c{setting}"), "--metrics-port",
                     str(port), "--folder-readahead", setting) as mp:
            os.listdir(mp / "imgs")
            for key in names:
                assert (mp / key).read_bytes() == dataset["objs"][key]
            m = metrics(port)
        assert opened <= m["gets"] <= most, (setting, m)
        if setting == "0":
            assert m.get("fetched", 0) == 0, m
        else:
            assert m["fetched"] > 0, m
        big = dataset["objs"]["imgs/big.bin"]
        assert m["s3_bytes"] < len(big), "the big file was fetched ahead"


def test_files_already_cached_are_not_fetched_again(dataset, s3_env, tmp_path: Path) -> None:
    cache = tmp_path / "c"
    names = small_names(dataset)
    for run in (1, 2):
        port = free_port()
        with mounted(f"s3://{dataset['bucket']}", tmp_path / "m", s3_env,
                     "--cache-dir", str(cache), "--metrics-port", str(port)) as mp:
            os.listdir(mp / "imgs")
            for key in (names if run == 1 else random.Random(5).sample(names, 80)):
                assert (mp / key).read_bytes() == dataset["objs"][key]
            m = metrics(port)
        if run == 1:
            assert m["gets"] == N_FILES, m
    # Run 1 left the folder in the node cache: the remount fetches nothing, ahead or not;
    # the folder's next files are found held and asked into the page cache instead, within
    # the same bound of --folder-readahead (4) files per file opened.
    assert m.get("gets", 0) == 0, m
    assert m.get("fetched", 0) == 0, m
    assert 0 < m.get("paged_in", 0) <= m.get("held", 0) <= 4 * 80, m


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_with_no_listing_allowed_an_idle_mount_stays_idle(dataset, s3_env,
                                                         tmp_path: Path) -> None:
    """--metadata-ttl 0: no listing is kept, so folder read-ahead cannot list a folder
    opened by path. After three files of one folder are read, the mount must go quiet;
    the code before asked for the listing again and again on its loop (a whole core: 7.8 s
    of CPU in 10 idle seconds)."""
    names = small_names(dataset)[:3]
    with mounted(f"s3://{dataset['bucket']}", tmp_path / "m", s3_env,
                 "--cache-dir", str(tmp_path / "c"), "--metadata-ttl", "0") as mp:
        for key in names:  # by path, no listing: a loader with its own index
            assert (mp / key).read_bytes() == dataset["objs"][key]
        [pid] = mount_pids(mp)
        before = _cpu_seconds(pid)
        time.sleep(4)
        idle_cpu = _cpu_seconds(pid) - before
    assert idle_cpu < 1.0, f"the idle mount used {idle_cpu:.2f} s of CPU in 4 s"
