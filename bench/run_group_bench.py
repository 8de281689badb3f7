"""Peer read speed of the cache group against the peer link's speed, on emulated nodes.

Run (root, /dev/fuse): ``python bench/run_group_bench.py [--size-mib 256] [--peer-mbit 10000]
[--s3-mbit 1000] [--delay-ms 20] [--readers 4] [--striping]``.

The nodes are network namespaces on a bridge (tests/group/netns.py): S3 (SeaweedFS behind the
latency proxy) on a ``--s3-mbit`` tbf link, every node on a ``--peer-mbit`` link. Steps:

1. upload ``--size-mib`` MiB in 32 MiB objects;
2. warm it on n1 (whole, published as n1's dataset), or with ``--striping`` over n1..n3;
3. on n4, a node that holds none of it, mount the dataset and read every file
   (``--readers`` files at once, 1 MiB reads, page cache dropped) with the peer servers up:
   MB/s, the node cache's S3 GETs during the read (want 0) and blocks from peers;
4. the same read on n5 with no group at all (every block from S3): the baseline;
5. the peer client alone on n4 (``PeerClient.fetch`` of every block, ``--readers`` threads,
   no FUSE, nothing stored): what the gRPC path itself moves.

Prints one JSON object: both speeds, the peer link's speed in MB/s (``peer_mbit / 8``), their
ratio, and the GET counts. On a machine short of CPU the peer path (TLS, gRPC, FUSE) is
CPU-bound before a 10 Gbit/s link is full; ``--peer-mbit 1000`` shows whether it fills a link
the CPU can keep up with. The scratch dir (node caches: 1-3 GB) is removed at the end
unless ``--keep``.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "group"))

import netns  # noqa: E402

import fusecache  # noqa: E402
from fusecache.group import Group, Member, write_group  # noqa: E402

import peering  # noqa: E402

OBJ = 32 << 20
PORT = 7471

# Run in n4's network: fetch every block of the dataset from peers, --readers threads at once.
RAW = r"""
import concurrent.futures as cf, json, sys, time
import fusecache
from fusecache.peer_client import open_peer_client
cache_dir, holder_dir = sys.argv[1], sys.argv[2]
readers, timeout = int(sys.argv[3]), float(sys.argv[4])
c = fusecache.NodeCache.open(holder_dir)
bs = c.block_size
blocks = [(o, i) for o in c.iter_objects() for i in range(o.block_count(bs))]
c.close()
peers = open_peer_client(cache_dir, timeout=timeout)
t = time.monotonic()
with cf.ThreadPoolExecutor(readers) as pool:
    got = list(pool.map(lambda b: peers.fetch(b[0], b[1], bs), blocks))
secs = time.monotonic() - t
n = sum(len(g) for g in got if g is not None)
print(json.dumps({"MBps": round(n / secs / 1e6, 1), "seconds": round(secs, 2),
                  "blocks": len(blocks), "missed": sum(g is None for g in got)}))
"""


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def drop_caches() -> None:
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def read_all(mnt: Path, names: list[str], readers: int) -> int:
    def one(name: str) -> int:
        n = 0
        fd = os.open(mnt / name, os.O_RDONLY)
        try:
            while chunk := os.read(fd, 1 << 20):
                n += len(chunk)
        finally:
            os.close(fd)
        return n

    with cf.ThreadPoolExecutor(readers) as pool:
        return sum(pool.map(one, names))


def stats(c: netns.Cluster, node: netns.Node) -> dict:
    r = c.run(node, [sys.executable, "-m", "fusecache.cli", "stats", "--cache-dir",
                     str(node.cache_dir), "--json"])
    if r.returncode != 0:
        raise SystemExit(r.stderr)
    return json.loads(r.stdout)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size-mib", type=int, default=256)
    p.add_argument("--peer-mbit", type=int, default=10000)
    p.add_argument("--s3-mbit", type=int, default=1000)
    p.add_argument("--delay-ms", type=float, default=20.0)
    p.add_argument("--readers", type=int, default=4)
    p.add_argument("--block-mib", type=int, default=8, help="node cache block (default 8)")
    p.add_argument("--peer-timeout", type=float, default=None,
                   help="the reading mount's --peer-timeout (default: the mount's own)")
    p.add_argument("--no-lane", dest="lane", action="store_false",
                   help="peers serve single blocks over gRPC only, not over the block lane "
                        "(PORT + 1; fusecache/peer_lane.py)")
    p.add_argument("--striping", action="store_true",
                   help="warm the dataset striped over n1..n3 (default: whole on n1)")
    p.add_argument("--keep", action="store_true",
                   help="keep the scratch dir (node caches, logs; 1-3 GB a run)")
    a = p.parse_args()
    why = netns.available()
    if why:
        raise SystemExit(f"run_group_bench: {why}")
    work = Path(tempfile.mkdtemp(prefix="fusecache-group-bench-"))
    try:
        return _measure(a, work)
    finally:
        if a.keep:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def _measure(a: argparse.Namespace, work: Path) -> int:
    """Steps 1-5 of the module docstring in *work*; prints the JSON result."""
    names = ["n1", "n2", "n3", "n4", "n5"]
    result: dict = {"command": " ".join([Path(sys.executable).name, *sys.argv]),
                    "machine": {"cpus": os.cpu_count(), "kernel": os.uname().release},
                    "params": vars(a)}
    with netns.cluster(work, names, s3_mbit=a.s3_mbit, peer_mbit=a.peer_mbit,
                       s3_delay_ms=a.delay_ms) as c:
        assert c.s3 is not None
        bucket = "group-bench"
        s3 = c.s3.client()
        s3.create_bucket(Bucket=bucket)
        n_obj = max(1, (a.size_mib << 20) // OBJ)
        files = [f"ds/part-{i:03d}.bin" for i in range(n_obj)]
        log(f"uploading {n_obj} x 32 MiB")
        for k in files:
            s3.put_object(Bucket=bucket, Key=k, Body=os.urandom(OBJ))
        total = n_obj * OBJ
        pki = peering.Pki(work / "pki")
        ds = f"s3://{bucket}/ds/"
        holders = ["n1", "n2", "n3"] if a.striping else ["n1"]
        tls = {n: pki.node(n) for n in names}
        for n in names:
            fusecache.NodeCache.open(c.nodes[n].cache_dir, limit_bytes=4 * total,
                                     block_size=a.block_mib << 20).close()
        members = tuple(Member(n, f"{c.nodes[n].ip}:{PORT}", 1.0, (bucket,),
                               () if a.striping else (ds,) if n == "n1" else (),
                               f"{c.nodes[n].ip}:{PORT + 1}" if a.lane else "")
                        for n in holders)
        for n in holders:
            write_group(c.nodes[n].cache_dir / "group.json",
                        Group(n, members, 1, a.striping, tls[n]))
        t = time.monotonic()
        for n in holders:
            extra = ["--group-striping"] if a.striping else []
            r = c.run(c.nodes[n], [sys.executable, "-m", "prefetchd.cli", "warm", ds,
                                   "--cache-dir", str(c.nodes[n].cache_dir), "--json", *extra],
                      timeout=1800)
            if r.returncode != 0:
                raise SystemExit(r.stderr)
        result["warm_s"] = round(time.monotonic() - t, 2)
        reader = Member("n4", f"{c.nodes['n4'].ip}:{PORT}", 1e-6, (bucket,))
        for n in [*holders, "n4"]:
            write_group(c.nodes[n].cache_dir / "group.json",
                        Group(n, (*members, reader), 1, a.striping, tls[n]))
        for n in holders:
            c.peer_serve(c.nodes[n], PORT,
                         *(["--lane-listen", f"{c.nodes[n].ip}:{PORT + 1}"] if a.lane else []))
        base = [Path(k).name for k in files]
        for label, node in (("peers", c.nodes["n4"]), ("s3", c.nodes["n5"])):
            extra = ["--peer-timeout", str(a.peer_timeout)] if a.peer_timeout else []
            mnt = c.mount(node, ds, work / f"mnt-{label}", *extra)
            before = stats(c, node)
            drop_caches()
            t = time.monotonic()
            got = read_all(mnt, base, a.readers)
            secs = time.monotonic() - t
            after = stats(c, node)
            c.umount(mnt)
            if got != total:
                raise SystemExit(f"{label}: read {got} of {total} bytes")
            result[label] = {
                "MBps": round(total / secs / 1e6, 1), "seconds": round(secs, 2),
                "s3_gets": after["s3_gets"] - before["s3_gets"],
                "peer_hits": after.get("peer_hits", 0) - before.get("peer_hits", 0),
            }
            log(f"{label}: {result[label]}")
        raw = c.run(c.nodes["n4"], [sys.executable, "-c", RAW, str(c.nodes["n4"].cache_dir),
                                    str(c.nodes["n1"].cache_dir), str(a.readers),
                                    str(a.peer_timeout or 5.0)], timeout=900)
        if raw.returncode != 0:
            raise SystemExit(raw.stderr)
        result["peer_client_alone"] = json.loads(raw.stdout)
        log(f"peer client alone: {result['peer_client_alone']}")
    link = a.peer_mbit / 8
    result["peer_link_MBps"] = link
    result["peer_vs_link"] = round(result["peers"]["MBps"] / link, 3)
    result["peer_client_alone_vs_link"] = round(result["peer_client_alone"]["MBps"] / link, 3)
    result["peer_vs_s3"] = round(result["peers"]["MBps"] / result["s3"]["MBps"], 2)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
