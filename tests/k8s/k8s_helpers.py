"""Helpers for the Kubernetes tests (a plain module: pytest puts this folder on sys.path)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

# ../shared from the project's root (see /work/shared/README.md).
CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus"
LOCAL_COPIES = Path(__file__).resolve().parent / "data" / "shared-corpus"


def corpus_workflow(relpath: str, name: str | None = None, namespace: str = "default") -> dict:
    """A Workflow of the shared corpus as a cluster would hold it (named, namespaced).

    ../shared/corpus is not part of the repository; the workflows these tests use are also
    copied, with their provenance, into tests/k8s/data/shared-corpus, so a clone on its own
    runs them too. A workflow in neither place skips the calling test, saying so.
    """
    path = CORPUS / relpath
    if not path.is_file():
        path = LOCAL_COPIES / Path(relpath).name
    if not path.is_file():
        import pytest

        pytest.skip(f"../shared/corpus/{relpath} is not beside this checkout")
    doc = next(d for d in yaml.safe_load_all(path.read_text()) if d)
    meta = doc.setdefault("metadata", {})
    meta["name"] = name or meta.get("name") or meta["generateName"].rstrip("-")
    meta.pop("generateName", None)
    meta["namespace"] = namespace
    return doc


def node(name: str, labels: dict[str, str] | None = None, **extra: Any) -> dict:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": labels or {}}, **extra}


def api_at_closed_port() -> Any:
    """A kubernetes ApiClient for a local port nothing listens on (no retries)."""
    import socket

    from kubernetes import client

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = client.Configuration()
    cfg.host = f"http://127.0.0.1:{port}"
    cfg.retries = 0
    return client.ApiClient(cfg)
