#!/usr/bin/env python3
"""The protocol's floor: a pyfuse3 + trio file system that does nothing but answer FUSE
requests, read the way the small-file benchmarks read (100 folders x 40 files of 110
KiB, one shuffled order, --readers processes, page cache dropped first). Reported:
files/s and the server's CPU per file, the least any pyfuse3 + trio mount can spend per
file (LOOKUP, OPEN, READ or the open prefill, RELEASE; with ``noopen`` OPEN answers
ENOSYS once, after which the kernel sends neither OPEN nor RELEASE and keeps the page
cache: LOOKUP and READ. A real mount cannot take that road: pyfuse3 hands ``read`` the
file handle, not the inode, and without OPEN every handle is 0; a store at LOOKUP fails
too, the kernel not yet knowing the inode). As root (FUSE, drop_caches).

    python bench/run_floor_bench.py [--readers 4] [--rounds 3] [--modes read,prefill,noopen,local]

``local`` reads the same tree from local disk in the same round (page cache dropped
too), so each round prints every mode's files/s as a ratio of the local disk's.
"""

from __future__ import annotations

import argparse
import errno
import os
import random
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import cpu_seconds, drop_caches  # noqa: E402

DIRS, FILES, SIZE = 100, 40, 110 * 1024


def serve(mountpoint: str, mode: str) -> None:
    import pyfuse3
    import trio

    data = os.urandom(SIZE)

    class Floor(pyfuse3.Operations):
        def __init__(self) -> None:
            super().__init__()
            self.names: dict[tuple[int, bytes], int] = {}
            self.dirs = {pyfuse3.ROOT_INODE}
            ino = pyfuse3.ROOT_INODE + 1
            for d in range(DIRS):
                dino, ino = ino, ino + 1
                self.names[(pyfuse3.ROOT_INODE, f"d{d}".encode())] = dino
                self.dirs.add(dino)
                for f in range(FILES):
                    self.names[(dino, f"f{f}".encode())], ino = ino, ino + 1
            self.fh = 0

        def _attr(self, ino: int) -> pyfuse3.EntryAttributes:
            a = pyfuse3.EntryAttributes()
            a.st_ino = ino
            a.st_mode = (stat.S_IFDIR | 0o755) if ino in self.dirs else (stat.S_IFREG | 0o444)
            a.st_size = 0 if ino in self.dirs else SIZE
            a.entry_timeout = a.attr_timeout = 3600
            return a

        async def lookup(self, parent, name, ctx=None):
            ino = self.names.get((parent, name))
            if ino is None:
                raise pyfuse3.FUSEError(errno.ENOENT)
            return self._attr(ino)

        async def getattr(self, inode, ctx=None):
            return self._attr(inode)

        async def open(self, inode, flags, ctx):
            if mode == "noopen":  # the kernel stops sending OPEN and RELEASE
                raise pyfuse3.FUSEError(errno.ENOSYS)
            if mode == "prefill":
                pyfuse3.notify_store(inode, 0, data)
            self.fh += 1
            return pyfuse3.FileInfo(fh=self.fh, keep_cache=mode == "prefill")

        async def read(self, fh, off, size):
            return data[off:off + size]

        async def release(self, fh):
            pass

    opts = set(pyfuse3.default_options) | {"fsname=fcfloor"}
    opts.discard("default_permissions")
    pyfuse3.init(Floor(), mountpoint, opts)
    try:
        trio.run(pyfuse3.main)
    finally:
        pyfuse3.close()


def _read_all(paths: list[str]) -> int:
    n = 0
    for p in paths:
        with open(p, "rb") as f:
            n += len(f.read())
    return n


def _timed_pass(root: str, readers: int, pid: int | None) -> tuple[float, float | None]:
    """Read every file under *root* once, page cache dropped first: (files/s, CPU
    seconds per file of process *pid*, None without one)."""
    paths = [f"{root}/d{d}/f{f}" for d in range(DIRS) for f in range(FILES)]
    random.Random(1).shuffle(paths)
    drop_caches()
    c0, t0 = cpu_seconds(pid), time.perf_counter()
    with ProcessPoolExecutor(readers) as ex:
        total = sum(ex.map(_read_all, [paths[i::readers] for i in range(readers)]))
    wall = time.perf_counter() - t0
    c1 = cpu_seconds(pid)
    if total != len(paths) * SIZE:
        raise RuntimeError(f"read {total} bytes, expected {len(paths) * SIZE}")
    if pid is not None and (c0 is None or c1 is None):
        raise RuntimeError("the file system's process is gone")
    cpu = None if pid is None else (c1 - c0) / len(paths)
    return len(paths) / wall, cpu


def _serve_pass(tmp: Path, mode: str, readers: int) -> tuple[float, float | None]:
    mp = tmp / f"mnt-{mode}"
    mp.mkdir()
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(mp), "--modes", mode])
    try:
        deadline = time.monotonic() + 20
        while not os.path.ismount(mp):
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the file system did not mount")
            time.sleep(0.05)
        return _timed_pass(str(mp), readers, server.pid)
    finally:
        subprocess.run(["fusermount3", "-u", str(mp)], check=False)
        server.wait(10)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--readers", type=int, default=4)
    ap.add_argument("--modes", default="read,prefill,noopen,local",
                    help="comma-separated, run in turn each round: read, prefill, noopen "
                         "(the file system) and local (the same files on local disk)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--serve", metavar="MOUNTPOINT", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.serve:
        serve(a.serve, a.modes)
        return 0
    modes = a.modes.split(",")
    bad = [m for m in modes if m not in ("read", "prefill", "noopen", "local")]
    if bad or a.rounds < 1 or a.readers < 1:
        print(f"run_floor_bench: bad --modes {bad}, --rounds or --readers", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("run_floor_bench: needs root (FUSE, drop_caches)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="fcfloor-", dir="/var/tmp") as tmp:
        local = Path(tmp) / "local"
        if "local" in modes:
            data = os.urandom(SIZE)
            for d in range(DIRS):
                (local / f"d{d}").mkdir(parents=True)
                for f in range(FILES):
                    (local / f"d{d}" / f"f{f}").write_bytes(data)
            os.sync()
        for r in range(1, a.rounds + 1):
            rates = {}
            for mode in modes:
                try:
                    if mode == "local":
                        rate, cpu = _timed_pass(str(local), a.readers, None)
                    else:
                        rate, cpu = _serve_pass(Path(tmp), f"{mode}", a.readers)
                except RuntimeError as e:
                    print(f"run_floor_bench: {mode}: {e}", file=sys.stderr)
                    return 1
                rates[mode] = rate
                print(f"round {r}: {DIRS * FILES} files, {a.readers} readers, {mode}: "
                      f"{rate:.0f} files/s" + ("" if cpu is None else
                                              f"; server CPU {cpu * 1000:.3f} ms per file"),
                      flush=True)
            if "local" in rates:
                print(f"round {r}: against local disk: " + ", ".join(
                    f"{m} {v / rates['local']:.2f}x" for m, v in rates.items() if m != "local"),
                    flush=True)
            for mode in modes:
                shutil.rmtree(Path(tmp) / f"mnt-{mode}", ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
