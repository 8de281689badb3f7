"""Opening the node cache while another thread of the process holds LMDB's write lock.

prefetchd's agent does this (its publisher opens the cache for stats while the warm worker
stores blocks). py-lmdb's ``open_db`` without ``txn=`` begins a write transaction while
holding the GIL; the writer, needing the GIL to go on, then waits forever (seen as hung agents
in tests/k8s/test_k8s_e2e_pvc.py). Run in a child process so a regression fails, not hangs.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CHILD = r"""
import sys, threading, time
import fusecache
d = sys.argv[1]
first = fusecache.NodeCache.open(d)
in_txn = threading.Event()

def writer():
    with first.env.begin(write=True) as txn:
        in_txn.set()
        end = time.monotonic() + 1.0
        n = 0
        while time.monotonic() < end:  # Python work inside the write transaction
            n += 1
        txn.put(b"k", b"v")

t = threading.Thread(target=writer)
t.start()
in_txn.wait()
second = fusecache.NodeCache.open(d)  # must wait for the writer without holding the GIL
second.close()
t.join()
first.close()
print("ok")
"""


def test_open_while_another_thread_writes_does_not_deadlock(tmp_path: Path) -> None:
    fusecache_root = Path(__file__).resolve().parents[2]
    r = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "cache")],
                       capture_output=True, text=True, timeout=60, cwd=fusecache_root)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]
