#!/usr/bin/env python3
"""The protocol's floor: a pyfuse3 + trio file system that does nothing but answer FUSE
requests, read the way the small-file benchmarks read (100 folders x 40 files of 110
KiB, one shuffled order, --readers processes, page cache dropped first). Reported:
files/s and the server's CPU per file, the least any pyfuse3 + trio mount can spend per
file (LOOKUP, OPEN, READ or the open prefill, RELEASE). As root (FUSE, drop_caches).

    python bench/run_floor_bench.py [--readers 4] [--mode read|prefill]
"""

from __future__ import annotations

import argparse
import errno
import os
import random
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--readers", type=int, default=4)
    ap.add_argument("--mode", choices=["read", "prefill"], default="read")
    ap.add_argument("--serve", metavar="MOUNTPOINT", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.serve:
        serve(a.serve, a.mode)
        return 0
    if os.geteuid() != 0:
        print("run_floor_bench: needs root (FUSE, drop_caches)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="fcfloor-") as tmp:
        mp = Path(tmp) / "mnt"
        mp.mkdir()
        server = subprocess.Popen([sys.executable, __file__, "--serve", str(mp),
                                   "--mode", a.mode])
        try:
            deadline = time.monotonic() + 20
            while not os.path.ismount(mp):
                if server.poll() is not None or time.monotonic() > deadline:
                    print("run_floor_bench: the file system did not mount", file=sys.stderr)
                    return 1
                time.sleep(0.05)
            paths = [f"{mp}/d{d}/f{f}" for d in range(DIRS) for f in range(FILES)]
            random.Random(1).shuffle(paths)
            drop_caches()
            c0, t0 = cpu_seconds(server.pid), time.perf_counter()
            with ProcessPoolExecutor(a.readers) as ex:
                total = sum(ex.map(_read_all, [paths[i::a.readers] for i in range(a.readers)]))
            wall = time.perf_counter() - t0
            c1 = cpu_seconds(server.pid)
            if c0 is None or c1 is None:
                print("run_floor_bench: the file system's process is gone", file=sys.stderr)
                return 1
            cpu = c1 - c0
            if total != len(paths) * SIZE:
                print(f"run_floor_bench: read {total} bytes, expected {len(paths) * SIZE}",
                      file=sys.stderr)
                return 1
            print(f"{len(paths)} files, {a.readers} readers, mode {a.mode}: "
                  f"{len(paths) / wall:.0f} files/s; server CPU {cpu * 1000 / len(paths):.3f} "
                  f"ms per file")
        finally:
            subprocess.run(["fusermount3", "-u", str(mp)], check=False)
            server.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
