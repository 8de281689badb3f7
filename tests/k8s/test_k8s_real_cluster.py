"""The five-workflow PVC scenario (tests/k8s/pvc_scenario.py) on a real control plane.

kube-apiserver, kube-scheduler and kube-controller-manager v1.36 with three fake Ready nodes, as
../shared/k8s/harness/k8s_harness.sh starts them (no kubelet: pods are bound by the real
scheduler but nothing runs; this test moves their status as a kubelet would). Compared with the
fake API server: the API server itself calls ``prefetchd webhook`` (registered by URL), the
real scheduler binds the pods, the PV controller in kube-controller-manager binds the claims,
and the agents and the webhook run under the RBAC of manifests/prefetchd/base/rbac.yaml with service
account tokens.

Runs when ``FUSECACHE_K8S_ASSETS`` names a folder holding ``kube-apiserver``,
``kube-scheduler`` and ``kube-controller-manager`` (as controller-runtime's envtest does with
KUBEBUILDER_ASSETS); etcd comes from that folder or PATH, kubectl from that folder,
/tmp/tools/kvenv/bin or PATH. Skips with the reason otherwise. Nothing here builds them: see
../shared/k8s/harness/README.md for where they come from.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pvc_scenario import ROOT, run_scenario

from fusecache.locals3 import LocalS3

pytestmark = [pytest.mark.k8s, pytest.mark.fuse, pytest.mark.s3, pytest.mark.real_cluster]

HARNESS = ROOT.parent / "shared" / "k8s" / "harness" / "k8s_harness.sh"
BINARIES = ("kube-apiserver", "kube-scheduler", "kube-controller-manager")
NS = "ml"
_KINDS = {("v1", "Pod"): "pods", ("v1", "PersistentVolumeClaim"): "persistentvolumeclaims",
          ("v1", "PersistentVolume"): "persistentvolumes", ("v1", "Node"): "nodes",
          ("argoproj.io/v1alpha1", "Workflow"): "workflows"}
_STATUS = {"pods", "persistentvolumeclaims", "persistentvolumes"}  # status subresource


def _assets() -> tuple[Path, Path, str]:
    """(assets folder, etcd, kubectl), or skip saying what is missing."""
    folder = os.environ.get("FUSECACHE_K8S_ASSETS")
    if not folder:
        pytest.skip("FUSECACHE_K8S_ASSETS is not set: name the folder holding kube-apiserver, "
                    "kube-scheduler and kube-controller-manager v1.36 to run this suite")
    assets = Path(folder)
    missing = [b for b in BINARIES if not os.access(assets / b, os.X_OK)]
    if missing:
        pytest.skip(f"FUSECACHE_K8S_ASSETS={folder} lacks {', '.join(missing)}")
    etcd = assets / "etcd" if (assets / "etcd").exists() else shutil.which("etcd")
    kubectl = next((str(p) for p in (assets / "kubectl", Path("/tmp/tools/kvenv/bin/kubectl"))
                    if os.access(p, os.X_OK)), shutil.which("kubectl"))
    if not etcd or not kubectl:
        pytest.skip(f"no {'etcd' if not etcd else 'kubectl'} in {folder} or on PATH")
    if not HARNESS.exists():
        pytest.skip(f"{HARNESS} is missing")
    return assets, Path(etcd), kubectl


def _bash(script: str, env: dict[str, str], timeout: float = 300) -> str:
    r = subprocess.run(["bash", "-c", f"set -eo pipefail; source {HARNESS}; {script}"],
                       env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{script}: {r.stdout[-3000:]}{r.stderr[-3000:]}"
    return r.stdout


class RealCluster:
    """argo_sim.Cluster over raw REST of a real API server (admin credentials)."""

    def __init__(self, kubeconfig: str) -> None:
        from kubernetes import client, config

        cfg = client.Configuration()
        config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
        self.api = client.ApiClient(cfg)

    def close(self) -> None:
        self.api.close()

    def request(self, method: str, path: str, body: Any = None,
                content_type: str = "application/json") -> dict[str, Any]:
        m, url, headers, data, post = self.api.param_serialize(
            method, path, header_params={"Accept": "application/json",
                                         "Content-Type": content_type},
            body=body, auth_settings=["BearerToken"])
        resp = self.api.call_api(m, url, headers, data, post,
                                 _request_timeout=(5.0, 30.0)).response
        if resp.status >= 300:
            raise RuntimeError(f"{method} {path}: HTTP {resp.status}: {resp.data[:500]!r}")
        return json.loads(resp.data)

    @staticmethod
    def path(api_version: str, kind: str, namespace: str | None, name: str | None = None) -> str:
        plural = _KINDS[(api_version, kind)]
        base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        if namespace and plural not in ("persistentvolumes", "nodes"):
            base += f"/namespaces/{namespace}"
        return f"{base}/{plural}" + (f"/{name}" if name else "")

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        obj = {k: v for k, v in obj.items() if k != "status"}
        meta = obj["metadata"]
        return self.request("POST", self.path(obj["apiVersion"], obj["kind"],
                                              meta.get("namespace")), obj)

    def get(self, api_version: str, kind: str, name: str,
            namespace: str | None = None) -> dict[str, Any]:
        return self.request("GET", self.path(api_version, kind, namespace, name))

    def patch(self, api_version: str, kind: str, name: str, body: dict[str, Any],
              namespace: str | None = None, status: bool = False) -> dict[str, Any]:
        path = self.path(api_version, kind, namespace, name)
        if status and _KINDS[(api_version, kind)] in _STATUS:
            path += "/status"
        return self.request("PATCH", path, body, "application/merge-patch+json")


class RealPlatform:
    namespace = NS
    nodes = ("node-1", "node-2", "node-3")

    def __init__(self, env: dict[str, str], tmp_path: Path) -> None:
        self.env, self.tmp = env, tmp_path
        self.cluster = RealCluster(env["KUBECONFIG"])
        self.kubeconfigs = {sa: self._sa_kubeconfig(sa) for sa in ("prefetchd",
                                                                    "prefetchd-webhook")}

    def _sa_kubeconfig(self, sa: str) -> str:
        token = _bash(f"kc create token {sa} -n fusecache-system --duration 2h",
                      self.env).strip()
        path = self.tmp / f"kubeconfig-{sa}"
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "k", "cluster": {"server": self.env["K8S_API_URL"],
                                                   "certificate-authority": self.env["K8S_CA"]}}],
            "users": [{"name": sa, "user": {"token": token}}],
            "contexts": [{"name": "c", "context": {"cluster": "k", "user": sa}}]}))
        return str(path)

    def agent_kubeconfig(self, node: str) -> str:
        return self.kubeconfigs["prefetchd"]

    def webhook_kubeconfig(self) -> str:
        return self.kubeconfigs["prefetchd-webhook"]

    def register_webhook(self, port: int, cafile: str) -> None:
        ca = base64.b64encode(Path(cafile).read_bytes()).decode()
        conf = {"apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "MutatingWebhookConfiguration",
                "metadata": {"name": "prefetchd-steering-test"},
                "webhooks": [{
                    "name": "steering.fusecache.io", "sideEffects": "None",
                    "admissionReviewVersions": ["v1"], "failurePolicy": "Ignore",
                    "timeoutSeconds": 5,
                    "clientConfig": {"url": f"https://127.0.0.1:{port}/mutate", "caBundle": ca},
                    "namespaceSelector": {"matchLabels": {"fusecache.io/steering": "enabled"}},
                    "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                               "resources": ["pods"]}]}]}
        self.cluster.request("POST", "/apis/admissionregistration.k8s.io/v1/"
                                     "mutatingwebhookconfigurations", conf)
        # the configuration takes effect asynchronously: a dry-run pod comes back mutated
        probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe",
                                                                 "namespace": NS},
                 "spec": {"containers": [{"name": "c", "image": "busybox",
                                          "args": ["s3://probe-bucket/x/"]}]}}
        deadline = time.monotonic() + 60
        while True:
            got = self.cluster.request("POST", f"/api/v1/namespaces/{NS}/pods?dryRun=All", probe)
            if "fusecache.io/preferred-nodes" in (got["metadata"].get("annotations") or {}):
                return
            assert time.monotonic() < deadline, "the webhook never mutated a dry-run pod"
            time.sleep(0.5)

    def create_pod(self, pod: dict[str, Any]) -> dict[str, Any]:
        return self.cluster.create(pod)

    def schedule(self, pod: dict[str, Any]) -> str:
        name, deadline = pod["metadata"]["name"], time.monotonic() + 60
        while True:
            got = self.cluster.get("v1", "Pod", name, NS)
            if (got.get("spec") or {}).get("nodeName"):
                return got["spec"]["nodeName"]
            assert time.monotonic() < deadline, f"pod {name} never bound: {got.get('status')}"
            time.sleep(0.2)

    def bind(self, pv: dict[str, Any], namespace: str, claim_name: str) -> None:
        """Pre-bind the PV to the claim; the PV controller completes the binding."""
        pvc = self.cluster.get("v1", "PersistentVolumeClaim", claim_name, namespace)
        pv = json.loads(json.dumps(pv))
        pv["spec"]["storageClassName"] = pvc["spec"].get("storageClassName") or ""
        pv["spec"]["accessModes"] = pvc["spec"].get("accessModes") or ["ReadOnlyMany"]
        pv["spec"]["claimRef"] = {"namespace": namespace, "name": claim_name}
        self.cluster.create(pv)
        deadline = time.monotonic() + 60
        while (self.cluster.get("v1", "PersistentVolumeClaim", claim_name, namespace)
               .get("status") or {}).get("phase") != "Bound":
            assert time.monotonic() < deadline, f"claim {claim_name} never bound"
            time.sleep(0.2)


@pytest.fixture()
def control_plane(tmp_path: Path) -> Iterator[dict[str, str]]:
    assets, etcd, kubectl = _assets()
    tools = tmp_path / "tools"
    (tools / "bin").mkdir(parents=True)
    (tools / "kvenv" / "bin").mkdir(parents=True)
    for b in BINARIES:
        (tools / "bin" / b).symlink_to(assets / b)
    (tools / "bin" / "etcd").symlink_to(etcd)
    (tools / "kvenv" / "bin" / "kubectl").symlink_to(kubectl)
    env = {**os.environ, "TOOLS": str(tools), "K8S_DIR": str(tmp_path / "k8s"),
           "K8S_ARGO_CRDS": str(ROOT.parent / "shared" / "k8s" / "crds" / "argo")}
    try:
        out = _bash(
            "k8s_up >&2 && k8s_fake_nodes 3 >&2 && k8s_apply_argo_crds >&2 "
            f"&& k8s_ns {NS} fusecache.io/steering=enabled >&2 "
            "&& kc create namespace fusecache-system >&2 && kc create namespace fusecache >&2 "
            f"&& kc apply -f {ROOT / 'manifests' / 'prefetchd' / 'base' / 'rbac.yaml'} >&2 "
            "&& echo KUBECONFIG=$KUBECONFIG && echo K8S_API_URL=$K8S_API_URL "
            "&& echo K8S_CA=$K8S_CA && echo PATH=$PATH", env, timeout=600)
        env.update(dict(line.split("=", 1) for line in out.splitlines() if "=" in line))
        yield env
    finally:
        _bash("k8s_down >&2", env, timeout=120)


@pytest.fixture()
def private_s3(tmp_path: Path) -> Iterator[LocalS3]:
    s3 = LocalS3(data_dir=tmp_path / "s3")
    s3.start()
    try:
        yield s3
    finally:
        s3.cleanup()


def test_rbac_manifest_is_what_the_suite_applies():
    """The suite runs agents and webhook under the project's own RBAC (not cluster-admin)."""
    rbac = ROOT / "manifests" / "prefetchd" / "base" / "rbac.yaml"
    docs = [d for d in yaml.safe_load_all(rbac.read_text()) if d]
    sas = {(d["metadata"]["namespace"], d["metadata"]["name"]) for d in docs
           if d["kind"] == "ServiceAccount"}
    assert {("fusecache-system", "prefetchd"), ("fusecache-system", "prefetchd-webhook")} <= sas


def test_five_workflows_on_a_real_control_plane(control_plane, private_s3, tmp_path):
    platform = RealPlatform(control_plane, tmp_path)
    try:
        lead = run_scenario(platform, private_s3, tmp_path)
    finally:
        platform.cluster.close()
    assert len(lead) == 5
