"""Rendering the install for the tests: `kubectl kustomize`, the install script, `helm template`.

A plain helper module (pytest puts this folder on sys.path). kubectl is required by the
manifest tests (``kubectl kustomize`` is how users install); helm is optional (found as $HELM,
on PATH, or in the virtualenv where scripts/get-helm.sh puts it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
CHART = ROOT / "charts" / "fusecache"

Key = tuple[str, str, str]  # (kind, namespace, name)


def kubectl() -> str | None:
    return shutil.which("kubectl")


def helm() -> str | None:
    for candidate in (os.environ.get("HELM"), shutil.which("helm"),
                      str(Path(sys.executable).parent / "helm"), str(ROOT / ".venv/bin/helm")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def _run(cmd: list[str]) -> str:
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, f"{' '.join(cmd)}: {res.stderr}"
    return res.stdout


def documents(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def kustomize(path: Path | str) -> list[dict[str, Any]]:
    """``kubectl kustomize PATH`` (what ``kubectl apply -k PATH`` applies)."""
    exe = kubectl()
    assert exe, "kubectl not found"
    return documents(_run([exe, "kustomize", str(path)]))


def install_script(*args: str) -> list[dict[str, Any]]:
    """scripts/install-prefetchd.sh ARGS --dry-run: the objects it would apply."""
    return documents(_run(["bash", str(ROOT / "scripts" / "install-prefetchd.sh"), *args,
                           "--dry-run"]))


def helm_template(*sets: str, chart: Path = CHART) -> list[dict[str, Any]]:
    exe = helm()
    assert exe, "helm not found"
    cmd = [exe, "template", "fusecache", str(chart)]
    for s in sets:
        cmd += ["--set", s]
    return documents(_run(cmd))


def key(doc: dict[str, Any]) -> Key:
    meta = doc.get("metadata") or {}
    return (doc["kind"], meta.get("namespace") or "", meta["name"])


def by_key(docs: list[dict[str, Any]]) -> dict[Key, dict[str, Any]]:
    out: dict[Key, dict[str, Any]] = {}
    for d in docs:
        assert key(d) not in out, f"{key(d)} twice"
        out[key(d)] = d
    return out
