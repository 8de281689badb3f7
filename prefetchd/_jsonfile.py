"""prefetchd's small JSON records beside the node cache: read leniently, write atomically."""

from __future__ import annotations

import json
import logging
import os
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
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
