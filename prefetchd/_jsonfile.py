"""prefetchd's small JSON records beside the node cache: read leniently, write atomically."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from typing import Any

log = logging.getLogger(__name__)


def load_dict(path: str) -> dict[str, Any]:
    """The JSON object in *path*; {} when missing, and {} with a warning when unreadable."""
    try:
        with open(path) as f:
            d = json.load(f)
        return d if isinstance(d, dict) else {}
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        log.warning("ignoring unreadable %s: %s", path, e)
        return {}


def save_dict(path: str, data: dict[str, Any]) -> None:
    """Write *data* to *path* via a fsynced temporary file and a rename (never half-written)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    # a name of its own per call: the agent's two warm lanes write the same record from two
    # threads of one process (a name by pid alone: one renamed the other's file away)
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".tmp.",
                               dir=os.path.dirname(path))
    try:
        os.fchmod(fd, 0o644)  # as a file opened for writing is, not mkstemp's 0600
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
