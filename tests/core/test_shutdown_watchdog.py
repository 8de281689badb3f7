"""fusecache.mount's shutdown watchdog: once unmounted, a mount process ends within
SHUTDOWN_BOUND even when a worker thread is stuck (blind FUSE round 3: after `fusecache
umount` the process of a mount on a damaged node cache stayed, for good)."""

from __future__ import annotations

import subprocess
import sys
import time

STUCK = """
import threading, time
from fusecache import mount
threading.Thread(target=lambda: time.sleep(3600), daemon=False).start()  # a stuck worker
mount._exit_if_stuck(0.5)
"""


def test_a_shutdown_stuck_past_its_bound_ends_the_process() -> None:
    t = time.monotonic()
    r = subprocess.run([sys.executable, "-c", STUCK], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1 and time.monotonic() - t < 30, r
    assert "did not finish within 0.5s" in r.stderr


DONE = """
import time
from fusecache import mount
mount._exit_if_stuck(0.5)
mount._SHUT_DOWN.set()  # the shutdown finished in time
time.sleep(1.5)  # past the bound: the watchdog must not end the process
print("still here")
"""


def test_a_shutdown_that_finishes_is_left_alone() -> None:
    r = subprocess.run([sys.executable, "-c", DONE], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and "still here" in r.stdout, r
