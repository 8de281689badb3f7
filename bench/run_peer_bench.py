#!/usr/bin/env python3
"""Cache-group peer reads against cold S3 and local disk, side by side, on one machine.

Run as root (it drops the page cache and mounts FUSE):

    source scripts/setup.sh && python bench/run_peer_bench.py [--size-mib 256] [--small-files 600]

One run, one SeaweedFS on 127.0.0.1 (``fusecache.locals3``), the dataset of
``bench/run_bench.py`` (one large object, small files of 60-160 KiB), and two node caches:

1. **local**: the files read from local disk (the reference).
2. **cold S3**: ``fusecache mount`` on an empty cache dir A reads everything from S3; then
   ``prefetchd warm`` makes sure A holds every block.
3. **peer (mTLS)**: ``fusecache peer-serve`` serves A with mutual TLS (a CA and node
   certificates made with the ``openssl`` CLI); a mount on an empty cache dir B, whose group
   file names A, reads everything. S3 GETs of B (``fusecache stats``) must be 0. Then the
   same with A's block lane (``--lane-listen``, named as A's ``lane`` in B's group file):
   single blocks over HTTP/1.1 with the same mutual TLS, batches still over gRPC.
4. **peer client**: ``PeerClient.fetch`` of every block of the large object from A, in this
   process, 1 and 4 in flight: the transfer without FUSE and without the mount's reader,
   first with A's LMDB file read from disk (page cache dropped), then with it in A's
   page cache ("hot": the transfer alone); then ``fetch_first_blocks`` of every small file,
   20 a call from 4 threads, hot: the GetBlocks calls of folder read-ahead alone.
5. With ``--plaintext``: passes 3-4 again without TLS (``--peer-insecure``), to show what
   TLS costs.

Each pass drops the page cache first (A's LMDB file is read from disk by the server), reads
the large object with 1 MiB reads and the small files with 4 threads (``run_bench.py``'s
readers, which verify bytes and sizes). MB/s = 10^6 bytes/s. The 1-minute load average is
recorded before every pass (other work on the machine shows in it). Prints a table and one
JSON object; every process and the scratch dir are removed at the end (``--keep`` keeps the
scratch dir).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from _common import PROCS, drop_caches, log, minor_faults, start_run, stop_proc
from _mounts import (
    Remote,
    cleanup_all,
    mount_fusecache,
    spawn,
    start_pyspy,
    stop_pyspy,
    unmount_and_stop,
)
from run_bench import (
    BIG_KEY,
    BUCKET,
    RssSampler,
    cpu_seconds,
    fingerprint_big,
    make_dataset,
    seq_read,
    small_read,
    upload,
)

FUSECACHE = [sys.executable, "-m", "fusecache.cli"]
PREFETCHD = [sys.executable, "-m", "prefetchd.cli"]


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=120)


def make_pki(d: Path, nodes: list[str]) -> dict[str, dict[str, str]]:
    """A CA and one certificate per node (CN and DNS SAN = the node's name)."""
    d.mkdir(parents=True)
    ca, ca_key = d / "ca.crt", d / "ca.key"
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl("req", "-x509", *ec, "-keyout", str(ca_key), "-out", str(ca),
             "-subj", "/CN=fcpeer-bench-ca", "-days", "1")
    out = {}
    for n in nodes:
        key, csr, crt, ext = (d / f"{n}.{s}" for s in ("key", "csr", "crt", "ext"))
        ext.write_text(f"subjectAltName=DNS:{n}\nextendedKeyUsage=serverAuth,clientAuth\n")
        _openssl("req", *ec, "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={n}")
        _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
                 "-CAcreateserial", "-out", str(crt), "-days", "1", "-extfile", str(ext))
        out[n] = {"ca": str(ca), "cert": str(crt), "key": str(key)}
    return out


def write_group(path: Path, me: str, endpoints: dict[str, str], tls: dict | None,
                lanes: dict[str, str] | None = None) -> None:
    doc: dict = {"self": me, "members": [
        {"name": n, "endpoint": ep, "buckets": [BUCKET], "datasets": [f"s3://{BUCKET}/"],
         **({"lane": lanes[n]} if lanes and n in lanes else {})}
        for n, ep in endpoints.items()]}
    if tls is not None:
        doc["tls"] = tls
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)


def node_stats(cache: Path) -> dict:
    r = subprocess.run([*FUSECACHE, "stats", "--cache-dir", str(cache), "--json"],
                       capture_output=True, text=True, timeout=120, check=True)
    return json.loads(r.stdout)


def start_peer_serve(cache: Path, work: Path, tag: str, insecure: bool, lane: bool = False
                     ) -> tuple[subprocess.Popen, int, int]:
    """peer-serve on A: (process, gRPC port, block lane port or 0)."""
    out = work / f"peer-serve-{tag}.out"
    cmd = [*FUSECACHE, "peer-serve", "--cache-dir", str(cache), "--listen", "127.0.0.1:0"]
    if insecure:
        cmd.append("--peer-insecure")
    if lane:
        cmd += ["--lane-listen", "127.0.0.1:0"]
    p = spawn(cmd, out)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        lines = out.read_text(errors="replace").splitlines()
        port = next((int(ln.rsplit(":", 1)[1]) for ln in lines
                     if ln.startswith("listening on 127.0.0.1:")), None)
        lane_port = next((int(ln.rsplit(":", 1)[1]) for ln in lines
                          if ln.startswith("block lane on 127.0.0.1:")), 0)
        if port is not None and (lane_port or not lane):
            return p, port, lane_port
        if p.poll() is not None:
            raise RuntimeError(f"peer-serve exited: {out.read_text()[-2000:]}")
        time.sleep(0.1)
    raise RuntimeError("peer-serve did not start within 60 s")


def reads(mp: Path, ds: dict, expect: list, threads: int, pids: dict[str, int] | None = None
          ) -> dict:
    """Both workloads; with *pids*, each process's CPU seconds and minor page faults per
    GB read in each."""
    load = os.getloadavg()[0]
    pids = pids or {}
    out: dict = {"load_1min": round(load, 2)}
    for what, run, nbytes in (("seq", lambda: seq_read(mp, ds, expect), ds["big_bytes"]),
                              ("small", lambda: small_read(mp, ds, threads),
                               ds["small_bytes"])):
        before = {k: (cpu_seconds(v) or 0.0, minor_faults(v) or 0) for k, v in pids.items()}
        out[what] = run()
        for k, v in pids.items():
            used = (cpu_seconds(v) or 0.0) - before[k][0]
            out[what][f"{k}_cpu_s_per_gb"] = round(used / (nbytes / 1e9), 2)
            out[what][f"{k}_faults_per_gb"] = round(((minor_faults(v) or 0) - before[k][1])
                                                   / (nbytes / 1e9))
    log(f"    seq {out['seq']['MB_s']} MB/s, small {out['small']['files_s']} files/s "
        f"(verified {out['seq']['verified'] and out['small']['verified']}, load {load:.1f})")
    return out


def client_pass(group_file: Path, insecure: bool, s3, in_flight: tuple[int, ...]) -> dict:
    """PeerClient.fetch of every block of the large object (no FUSE, no reader)."""
    from fusecache.group import GroupWatcher
    from fusecache.nodecache import DEFAULT_BLOCK_SIZE, ObjectId
    from fusecache.peer_client import PeerClient

    h = s3.client().head_object(Bucket=BUCKET, Key=BIG_KEY)
    oid = ObjectId(BUCKET, BIG_KEY, h["ETag"].strip('"'), h["ContentLength"])
    bs = DEFAULT_BLOCK_SIZE
    n = oid.block_count(bs)
    client = PeerClient(GroupWatcher(group_file), insecure=insecure, timeout=10)
    out = {}
    try:
        for k in in_flight:
            # first with A's LMDB file on disk (as after a drop), then again with it in
            # A's page cache: the transfer alone
            for hot in (False, True):
                if not hot:
                    drop_caches()
                load = os.getloadavg()[0]
                t0 = time.perf_counter()
                with ThreadPoolExecutor(k) as pool:
                    got = list(pool.map(lambda i: client.fetch(oid, i, bs, budget=60),
                                        range(n)))
                dt = time.perf_counter() - t0
                ok = all(g is not None and len(g) == oid.block_span(i, bs)[1] - i * bs
                         for i, g in enumerate(got))
                name = f"in_flight_{k}" + ("_hot" if hot else "")
                out[name] = {"MB_s": round(oid.size / dt / 1e6, 1), "verified": ok,
                             "load_1min": round(load, 2)}
                log(f"    peer client, {k} in flight{', server hot' if hot else ''}: "
                    f"{out[name]['MB_s']} MB/s (all blocks {ok}, load {load:.1f})")
        out["batches"] = batch_pass(client, s3, bs)
    finally:
        client.close()
    return out


def batch_pass(client, s3, bs: int, per_call: int = 20, threads: int = 4) -> dict:
    """``PeerClient.fetch_first_blocks`` of every small file, *per_call* files a call
    (the size of a folder read-ahead batch) from *threads* threads, A's cache hot: the
    transport of small files (GetBlocks over gRPC), with this process's CPU per file."""
    from fusecache.nodecache import ObjectId

    oids = [ObjectId(BUCKET, o["Key"], o["ETag"].strip('"'), o["Size"])
            for page in s3.client().get_paginator("list_objects_v2").paginate(
                Bucket=BUCKET, Prefix="small-") for o in page.get("Contents", [])]
    calls = [oids[i:i + per_call] for i in range(0, len(oids), per_call)]
    client.fetch_first_blocks(calls[0], bs, budget=60)  # connections up
    load = os.getloadavg()[0]
    cpu0, t0 = time.process_time(), time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        got = sum(len(g) for g in pool.map(
            lambda c: client.fetch_first_blocks(c, bs, budget=60), calls))
    dt, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    out = {"files_s": round(len(oids) / dt), "client_cpu_ms_per_file":
           round(cpu / len(oids) * 1000, 3), "verified": got == len(oids),
           "load_1min": round(load, 2)}
    log(f"    peer client, small files {per_call} a call, {threads} threads: "
        f"{out['files_s']} files/s, {out['client_cpu_ms_per_file']} ms CPU/file "
        f"(all {got == len(oids)}, load {load:.1f})")
    return out


def peer_passes(tag: str, work: Path, remote: Remote, ds: dict, expect: list, a, s3,
                cache_a: Path, pki: dict | None, lane: bool = False) -> dict:
    """peer-serve on A; a mount on a fresh cache dir reading through A; its S3 GETs.
    *lane*: A also serves the block lane, and B's group file names it."""
    insecure = pki is None
    write_group(cache_a / "group.json", "node-a",
                {"node-a": "127.0.0.1:1", "node-b": "127.0.0.1:1"},
                None if insecure else pki["node-a"])
    server, port, lane_port = start_peer_serve(cache_a, work, tag, insecure, lane)
    try:
        cache_b = work / f"cache-b-{tag}"
        cache_b.mkdir()
        write_group(cache_b / "group.json", "node-b",
                    {"node-a": f"127.0.0.1:{port}", "node-b": "127.0.0.1:1"},
                    None if insecure else pki["node-b"],
                    {"node-a": f"127.0.0.1:{lane_port}"} if lane_port else None)
        extra = ["--peer-timeout", str(a.peer_timeout)] + (["--peer-insecure"] if insecure
                                                          else [])
        p, mp, cmd = mount_fusecache(remote, BUCKET, work, cache_b, a.ram_cache_size,
                                     f"peer-{tag}", extra)
        spies = []
        if a.profile:
            a.profile.mkdir(parents=True, exist_ok=True)
            spies = [start_pyspy(pid, a.profile / f"{what}-{tag}.txt", work)
                     for what, pid in (("mount", p.pid), ("server", server.pid))]
        rss = RssSampler(p.pid)
        try:
            out = reads(mp, ds, expect, a.threads, {"mount": p.pid, "server": server.pid})
        finally:
            hwm = rss.stop()["vmhwm_mib"]
            for spy in spies:
                stop_pyspy(spy)
            unmount_and_stop(mp, p)
        st = node_stats(cache_b)
        out["mount_vmhwm_mib"] = hwm
        out["mount_command"] = remote.mask(cmd)
        out["s3_gets"], out["peer_hits"] = st["s3_gets"], st["peer_hits"]
        out["peer_fallbacks"] = st.get("peer_fallbacks", 0)
        log(f"    node B: {st['s3_gets']} S3 GETs, {st['peer_hits']} blocks from the peer")
        out["client"] = client_pass(cache_b / "group.json", insecure, s3, (1, 4))
    finally:
        stop_proc(server)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size-mib", type=int, default=256)
    p.add_argument("--small-files", type=int, default=600)
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--ram-cache-size", default="256MiB")
    p.add_argument("--peer-timeout", type=float, default=5.0,
                   help="the mount's --peer-timeout (generous: a busy machine must not "
                        "turn a slow block into an S3 GET)")
    p.add_argument("--plaintext", action="store_true", help="also run the peer passes "
                   "without TLS")
    p.add_argument("--keep", action="store_true", help="keep the scratch dir")
    p.add_argument("--profile", type=Path, default=None, metavar="DIR",
                   help="py-spy profiles (raw) of the mount and the server of each peer pass")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    if os.geteuid() != 0:
        print("run_peer_bench.py: must run as root (drops the page cache, mounts FUSE)",
              file=sys.stderr)
        return 2
    res = start_run()
    res["params"] = {k: v for k, v in vars(a).items() if k != "keep"}
    work = Path(tempfile.mkdtemp(prefix="fcpeer-", dir="/var/tmp"))
    from fusecache.locals3 import LocalS3

    try:
        with LocalS3(data_dir=work / "s3") as s3:
            remote = Remote(s3.endpoint_url, s3)
            log(f"dataset: {a.size_mib} MiB object + {a.small_files} small files")
            ds = make_dataset(work / "local", a.size_mib, a.small_files, a.seed,
                              [a.threads])
            expect = fingerprint_big(work / "local" / BIG_KEY)
            upload(s3, work / "local", ds)

            log("local disk")
            res["local"] = reads(work / "local", ds, expect, a.threads)

            log("cold S3 (mount on empty cache dir A)")
            cache_a = work / "cache-a"
            pm, mp, cmd = mount_fusecache(remote, BUCKET, work, cache_a, a.ram_cache_size,
                                          "cold", [])
            rss = RssSampler(pm.pid)
            try:
                res["cold_s3"] = reads(mp, ds, expect, a.threads, {"mount": pm.pid})
            finally:
                hwm = rss.stop()["vmhwm_mib"]
                unmount_and_stop(mp, pm)
            res["cold_s3"]["mount_vmhwm_mib"] = hwm
            res["cold_s3"]["mount_command"] = remote.mask(cmd)
            res["cold_s3"]["s3_gets"] = node_stats(cache_a)["s3_gets"]
            env = dict(os.environ, **s3.env())
            subprocess.run([*PREFETCHD, "warm", f"s3://{BUCKET}/", "--cache-dir", str(cache_a)],
                           env=env, check=True, capture_output=True, timeout=600)

            pki = make_pki(work / "pki", ["node-a", "node-b"])
            log("peer, mutual TLS (peer-serve on A, mount on empty cache dir B)")
            res["peer_mtls"] = peer_passes("mtls", work, remote, ds, expect, a, s3, cache_a,
                                           pki)
            log("peer, mutual TLS, block lane (peer-serve --lane-listen on A)")
            res["peer_mtls_lane"] = peer_passes("lane", work, remote, ds, expect, a, s3,
                                                cache_a, pki, lane=True)
            if a.plaintext:
                log("peer, plaintext (--peer-insecure)")
                res["peer_plaintext"] = peer_passes("plain", work, remote, ds, expect, a, s3,
                                                    cache_a, None)
    finally:
        cleanup_all()
        for proc in list(PROCS):
            stop_proc(proc)
        if a.keep:
            log(f"kept {work}")
        else:
            with contextlib.suppress(OSError):
                shutil.rmtree(work)
    print_table(res)
    print(json.dumps(res, default=str))
    peers = [res[k] for k in ("peer_mtls", "peer_mtls_lane", "peer_plaintext") if k in res]
    ok = all(r["s3_gets"] == 0 and r["seq"]["verified"] and r["small"]["verified"]
             for r in peers)
    return 0 if ok else 1


def print_table(res: dict) -> None:
    rows = [("local disk", res.get("local")), ("cold S3", res.get("cold_s3")),
            ("peer mTLS", res.get("peer_mtls")), ("peer mTLS lane", res.get("peer_mtls_lane")),
            ("peer plaintext", res.get("peer_plaintext"))]
    print(f"\n{'reader':<16}{'seq MB/s':>10}{'small files/s':>15}{'S3 GETs':>9}"
          f"{'client 1/4 in flight MB/s':>40}{'seq CPU s/GB mount/server':>27}"
          f"{'seq faults/GB mount':>21}{'VmHWM MiB':>11}{'load':>7}"
          f"{'client batches files/s (ms CPU)':>33}")
    for name, r in rows:
        if r is None:
            continue
        c = r.get("client")
        cl = (f"{c['in_flight_1']['MB_s']}/{c['in_flight_4']['MB_s']} (hot "
              f"{c['in_flight_1_hot']['MB_s']}/{c['in_flight_4_hot']['MB_s']})" if c else "-")
        b = (c or {}).get("batches")
        bt = f"{b['files_s']} ({b['client_cpu_ms_per_file']})" if b else "-"
        sq = r["seq"]
        cpu = f"{sq.get('mount_cpu_s_per_gb', '-')}/{sq.get('server_cpu_s_per_gb', '-')}"
        print(f"{name:<16}{r['seq']['MB_s']:>10}{r['small']['files_s']:>15}"
              f"{r.get('s3_gets', '-')!s:>9}{cl:>40}{cpu:>27}"
              f"{sq.get('mount_faults_per_gb', '-')!s:>21}"
              f"{r.get('mount_vmhwm_mib') or '-'!s:>11}{r['load_1min']:>7}{bt:>33}")
    print()


if __name__ == "__main__":
    sys.exit(main())
