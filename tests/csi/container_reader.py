"""A pod's container, as runc makes one, reading a volume (run by test_csi_survival).

Run as ``unshare --mount --propagation private|slave python container_reader.py
TARGET ROOTFS FILE SHA256 STOP``: in its own mount namespace it bind-mounts the
publish target TARGET onto ROOTFS/data with the pod's propagation (private for the
default ``None``, rslave for ``HostToContainer``), then reads FILE again and again
until the file STOP exists: each pass opens the file anew, reads it in chunks
(dropping the pages it read, so every pass goes to the FUSE server) and checks its
sha256; every chunk is also read through one descriptor opened before the first
pass (a handle the kernel keeps across a server restart). One line per event on
stdout: ``ready``, ``mid N`` (half of pass N read), ``pass N ok|BAD``, ``error
ERRNO``, and a JSON summary at the end.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import sys
import time

MS_BIND, MS_REC, MS_PRIVATE, MS_SLAVE = 4096, 16384, 1 << 18, 1 << 19
CHUNK = 256 * 1024


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main() -> int:
    target, rootfs, name, want, stop = sys.argv[1:6]
    libc = ctypes.CDLL(None, use_errno=True)
    data = os.path.join(rootfs, "data")
    os.makedirs(data, exist_ok=True)
    if libc.mount(target.encode(), data.encode(), None, MS_BIND, None) != 0:
        say(f"error bind {ctypes.get_errno()}")
        return 1
    prop = MS_SLAVE if os.environ.get("POD_PROPAGATION") == "slave" else MS_PRIVATE
    if libc.mount(None, data.encode(), None, prop | MS_REC, None) != 0:
        say(f"error propagation {ctypes.get_errno()}")
        return 1
    path = os.path.join(data, name)
    held = os.open(path, os.O_RDONLY)
    size = os.fstat(held).st_size
    say("ready")
    summary = {"passes": 0, "bad": 0, "held_bad": 0, "errors": {}}
    n = 0
    while not os.path.exists(stop):
        n += 1
        h = hashlib.sha256()
        try:
            if name.split("/")[0] not in os.listdir(data):  # readdir and lookups too
                say("error listing")
            fd = os.open(path, os.O_RDONLY)
            try:
                off = 0
                while off < size:
                    chunk = os.pread(fd, CHUNK, off)
                    if not chunk:
                        break
                    if os.pread(held, len(chunk), off) != chunk:
                        summary["held_bad"] += 1
                    os.posix_fadvise(fd, off, len(chunk), os.POSIX_FADV_DONTNEED)
                    os.posix_fadvise(held, off, len(chunk), os.POSIX_FADV_DONTNEED)
                    h.update(chunk)
                    off += len(chunk)
                    if off >= size // 2 and off - len(chunk) < size // 2:
                        say(f"mid {n}")
                    time.sleep(0.02)
            finally:
                os.close(fd)
        except OSError as e:
            summary["errors"][str(e.errno)] = summary["errors"].get(str(e.errno), 0) + 1
            say(f"error {e.errno}")
            time.sleep(0.1)
            continue
        ok = h.hexdigest() == want
        summary["passes"] += 1
        summary["bad"] += 0 if ok else 1
        say(f"pass {n} {'ok' if ok else 'BAD'}")
    os.close(held)
    say(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
