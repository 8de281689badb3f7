"""A real kube-apiserver, scheduler and controller manager with fake nodes, for the suites
marked ``real_cluster``.

Who uses it: tests/k8s/test_k8s_real_cluster.py and test_k8s_real_jobs.py. It runs
../shared/k8s/harness/k8s_harness.sh over the binaries in ``FUSECACHE_K8S_ASSETS`` (skipping,
with the reason, when they are not there), applies the project's own RBAC, and yields the
harness's environment (KUBECONFIG, K8S_API_URL, K8S_CA, PATH with kubectl) to the test.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from pvc_scenario import ROOT

HARNESS = ROOT.parent / "shared" / "k8s" / "harness" / "k8s_harness.sh"
BINARIES = ("kube-apiserver", "kube-scheduler", "kube-controller-manager")
RBAC = ROOT / "manifests" / "prefetchd" / "base" / "rbac.yaml"


def assets() -> tuple[Path, Path, str]:
    """(assets folder, etcd, kubectl), or skip saying what is missing."""
    folder = os.environ.get("FUSECACHE_K8S_ASSETS")
    if not folder:
        pytest.skip("FUSECACHE_K8S_ASSETS is not set: name the folder holding kube-apiserver, "
                    "kube-scheduler and kube-controller-manager v1.36 to run this suite")
    found = Path(folder)
    missing = [b for b in BINARIES if not os.access(found / b, os.X_OK)]
    if missing:
        pytest.skip(f"FUSECACHE_K8S_ASSETS={folder} lacks {', '.join(missing)}")
    etcd = found / "etcd" if (found / "etcd").exists() else shutil.which("etcd")
    kubectl = next((str(p) for p in (found / "kubectl", Path("/tmp/tools/kvenv/bin/kubectl"))
                    if os.access(p, os.X_OK)), shutil.which("kubectl"))
    if not etcd or not kubectl:
        pytest.skip(f"no {'etcd' if not etcd else 'kubectl'} in {folder} or on PATH")
    if not HARNESS.exists():
        pytest.skip(f"{HARNESS} is missing")
    return found, Path(etcd), kubectl


def bash(script: str, env: dict[str, str], timeout: float = 300) -> str:
    """Run *script* with the harness's functions loaded; its stdout, or fail with its output."""
    r = subprocess.run(["bash", "-c", f"set -eo pipefail; source {HARNESS}; {script}"],
                       env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{script}: {r.stdout[-3000:]}{r.stderr[-3000:]}"
    return r.stdout


@contextmanager
def control_plane(tmp_path: Path, *, nodes: int, namespace: str,
                  setup: str = "") -> Iterator[dict[str, str]]:
    """Start the control plane with *nodes* fake Ready nodes, the steering-enabled
    *namespace*, fusecache-system with the project's RBAC, then run *setup* (more harness
    shell); stop it all on exit."""
    found, etcd, kubectl = assets()
    tools = tmp_path / "tools"
    (tools / "bin").mkdir(parents=True)
    (tools / "kvenv" / "bin").mkdir(parents=True)
    for b in BINARIES:
        (tools / "bin" / b).symlink_to(found / b)
    (tools / "bin" / "etcd").symlink_to(etcd)
    (tools / "kvenv" / "bin" / "kubectl").symlink_to(kubectl)
    env = {**os.environ, "TOOLS": str(tools), "K8S_DIR": str(tmp_path / "k8s"),
           "K8S_ARGO_CRDS": str(ROOT.parent / "shared" / "k8s" / "crds" / "argo")}
    try:
        out = bash(
            f"k8s_up >&2 && k8s_fake_nodes {nodes} >&2 "
            f"&& k8s_ns {namespace} fusecache.io/steering=enabled >&2 "
            "&& kc create namespace fusecache-system >&2 "
            f"&& kc apply -f {RBAC} >&2 {setup} "
            "&& echo KUBECONFIG=$KUBECONFIG && echo K8S_API_URL=$K8S_API_URL "
            "&& echo K8S_CA=$K8S_CA && echo PATH=$PATH", env, timeout=600)
        env.update(dict(line.split("=", 1) for line in out.splitlines() if "=" in line))
        yield env
    finally:
        bash("k8s_down >&2", env, timeout=120)


def sa_kubeconfig(env: dict[str, str], sa: str, path: Path) -> str:
    """A kubeconfig at *path* for service account *sa* of fusecache-system (a fresh token), so
    agents and the webhook run under the project's RBAC rather than as admin."""
    token = bash(f"kc create token {sa} -n fusecache-system --duration 2h", env).strip()
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": env["K8S_API_URL"],
                                               "certificate-authority": env["K8S_CA"]}}],
        "users": [{"name": sa, "user": {"token": token}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": sa}}]}))
    return str(path)

