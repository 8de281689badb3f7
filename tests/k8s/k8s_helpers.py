"""Helpers for the Kubernetes tests (a plain module: pytest puts this folder on sys.path)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

# ../shared from the project's root (see /work/shared/README.md).
CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus"


def corpus_workflow(relpath: str, name: str | None = None, namespace: str = "default") -> dict:
    """A Workflow from ../shared/corpus as a cluster would hold it (named, namespaced).

    ../shared/corpus is not part of the repository: without it the calling test is
    skipped, saying so (a clone on its own still passes its suite).
    """
    if not (CORPUS / relpath).is_file():
        import pytest

        pytest.skip(f"../shared/corpus/{relpath} is not beside this checkout")
    doc = next(d for d in yaml.safe_load_all((CORPUS / relpath).read_text()) if d)
    meta = doc.setdefault("metadata", {})
    meta["name"] = name or meta.get("name") or meta["generateName"].rstrip("-")
    meta.pop("generateName", None)
    meta["namespace"] = namespace
    return doc


def node(name: str, labels: dict[str, str] | None = None, **extra: Any) -> dict:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": labels or {}}, **extra}
