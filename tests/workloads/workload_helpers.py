"""Loading the upstream examples in tests/workloads/data (see data/README.md for provenance)."""

from __future__ import annotations

import copy
import os
from typing import Any

import yaml

from prefetchd import workloads

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


def path(name: str) -> str:
    """``folder/file.yaml`` under data/."""
    return os.path.join(DATA, name)


def docs(name: str) -> list[dict[str, Any]]:
    with open(path(name)) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def doc(name: str, kind: str | None = None) -> dict[str, Any]:
    """The (only, or only ``kind``) object of an example file, as a fresh copy."""
    found = [d for d in docs(name) if kind is None or d.get("kind") == kind]
    assert len(found) == 1, (name, kind, [d.get("kind") for d in found])
    return copy.deepcopy(found[0])


def library(*names: str) -> workloads.Library:
    lib = workloads.Library()
    for n in names:
        for d in docs(n):
            if workloads.is_library_object(d):
                lib.add(d)
    return lib


def condition(ctype: str, status: str = "True", reason: str = "", message: str = "",
              katib: bool = False) -> dict[str, Any]:
    """A status condition as the controllers write it (metav1.Condition; Katib's own shape)."""
    c = {"type": ctype, "status": status, "reason": reason or ctype, "message": message,
         "lastTransitionTime": "2026-11-30T10:00:00Z"}
    if katib:
        c["lastUpdateTime"] = "2026-11-30T10:00:00Z"
    return c
