"""The ready line: how a process started in the background says it is serving, or why not.

Who calls it: ``fusecache mount`` (without --foreground) waiting on its FUSE server, the relay
waiting on the server it spawned, the relay holder waiting on a relay, and the CSI node plugin
waiting on a mount. The child writes zero or more ``warning: ...`` lines, then one final line
(``ok`` or ``error N KIND: ...``, READY_ERROR), to a pipe whose write end it inherited; the
parent reads the pipe here, with a deadline, and closes it.
"""

from __future__ import annotations

import os
import re
import select
import time
from collections.abc import Callable

WARNING = "warning: "
# A mount that failed to start: "error CODE KIND: message", CODE its exit status, KIND what
# went wrong (fusecache.mount._error_kind: denied, notfound, unreachable, invalid, failed)
# for the CSI plugin's gRPC code (a blind first-hour test: every failure came back INTERNAL
# with an opaque "error 2:" before the message). KIND is absent from older servers.
READY_ERROR = re.compile(r"error (\d)(?: (\w+))?: (.*)")


def wait_ready(fd: int, timeout: float,
               on_warning: Callable[[str], None] | None = None) -> str | None:
    """The child's final line; ``""`` if it closed the pipe first, None at the deadline.

    *fd* (the read end) is closed on return. Warning lines go to *on_warning* (without
    their prefix); without one, the first line of any kind is the final line.
    """
    deadline = time.monotonic() + timeout
    buf = b""
    try:
        while True:
            while b"\n" in buf:
                raw, buf = buf.split(b"\n", 1)
                line = raw.decode("utf-8", "replace").strip()
                if on_warning is not None and line.startswith(WARNING):
                    on_warning(line[len(WARNING):])
                    continue
                if line or on_warning is None:
                    return line
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            if select.select([fd], [], [], min(left, 0.5))[0]:
                chunk = os.read(fd, 4096)
                if not chunk:
                    return buf.decode("utf-8", "replace").strip()
                buf += chunk
    finally:
        os.close(fd)
