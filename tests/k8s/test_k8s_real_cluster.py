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
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import real_control_plane
import yaml
from pvc_scenario import ROOT, run_scenario

pytestmark = [pytest.mark.k8s, pytest.mark.fuse, pytest.mark.s3, pytest.mark.real_cluster]

NS = "ml"
_KINDS = {("v1", "Pod"): "pods", ("v1", "PersistentVolumeClaim"): "persistentvolumeclaims",
          ("v1", "PersistentVolume"): "persistentvolumes", ("v1", "Node"): "nodes",
          ("argoproj.io/v1alpha1", "Workflow"): "workflows"}
_STATUS = {"pods", "persistentvolumeclaims", "persistentvolumes"}  # status subresource


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
        return real_control_plane.sa_kubeconfig(self.env, sa, self.tmp / f"kubeconfig-{sa}")

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
    with real_control_plane.control_plane(
            tmp_path, nodes=3, namespace=NS,
            setup="&& k8s_apply_argo_crds >&2 && kc create namespace fusecache >&2") as env:
        yield env


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


def test_cache_group_membership_on_a_real_control_plane(control_plane, private_s3, tmp_path):
    """Two agents with ``--peer-listen`` under the project's RBAC (service-account tokens)
    on a real API server: each publishes its peer endpoint and block lane on its own Node,
    and both write the same group file from the Nodes they watch; a warm on node-1 is then
    read by node-2's peer client over node-1's block lane."""
    import os
    import subprocess
    import sys

    from pvc_scenario import start, stop, wait_until
    from test_k8s_e2e_agent import free_port_pair

    from fusecache.group import GroupWatcher, load_group
    from fusecache.nodecache import NodeCache, ObjectId
    from fusecache.peer_client import PeerClient
    from prefetchd.k8s import group_watch as gw

    platform = RealPlatform(control_plane, tmp_path)
    env = {**os.environ, **private_s3.env()}
    for var in ("NODE_NAME", "KUBERNETES_SERVICE_HOST", "AWS_CA_BUNDLE", "POD_IP"):
        env.pop(var, None)
    s3 = private_s3.client()
    s3.create_bucket(Bucket="grp")
    data = os.urandom(3 << 20)
    s3.put_object(Bucket="grp", Key="ds/x.bin", Body=data)
    nodes = ("node-1", "node-2")
    ports: dict[str, int] = {}
    for n in nodes:  # a port whose next one is free too: the agent's lane takes it
        ports[n] = free_port_pair(taken=[q for p in ports.values() for q in (p, p + 1)])
    caches = {n: tmp_path / f"cache-{n}" for n in nodes}
    procs = {}
    try:
        for n in nodes:
            procs[n] = start([sys.executable, "-m", "prefetchd.cli", "--log-level", "INFO", "run",
                              "--kubernetes", "--kubeconfig", platform.agent_kubeconfig(n),
                              "--node-name", n, "--cache-dir", str(caches[n]),
                              "--endpoint-url", private_s3.endpoint_url, "--publish-interval",
                              "1", "--peer-listen", f"127.0.0.1:{ports[n]}", "--peer-insecure"],
                             env, tmp_path / f"agent-{n}.log")

        def members(n: str) -> list[tuple[str, str, str]]:
            assert all(p.poll() is None for p in procs.values()), "an agent exited"
            f = caches[n] / "group.json"
            return [(m.name, m.endpoint, m.lane) for m in load_group(f).members] \
                if f.exists() else []

        want = [(n, f"127.0.0.1:{ports[n]}", f"127.0.0.1:{ports[n] + 1}") for n in nodes]
        for n in nodes:
            wait_until(f"{n}'s group file lists both agents", lambda n=n: members(n) == want, 90)
        ann = json.loads(platform.cluster.get("v1", "Node", "node-1")["metadata"][
            "annotations"][gw.PEER_ANNOTATION])
        assert ann["lane_port"] == ports["node-1"] + 1
        r = subprocess.run([sys.executable, "-m", "prefetchd.cli", "warm", "s3://grp/ds/",
                            "--cache-dir", str(caches["node-1"])], env=env, cwd=ROOT,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        h = s3.head_object(Bucket="grp", Key="ds/x.bin")
        oid = ObjectId("grp", "ds/x.bin", h["ETag"].strip('"'), h["ContentLength"])
        bs = NodeCache.open(caches["node-1"]).block_size
        client = PeerClient(GroupWatcher(caches["node-2"] / "group.json"), insecure=True)
        try:
            assert bytes(client.fetch(oid, 0, bs, budget=20)) == data
            assert not client._lane_off  # it came over the lane
        finally:
            client.close()
        for n in nodes:
            assert stop(procs.pop(n)) == 0, (tmp_path / f"agent-{n}.log").read_text()
    finally:
        for p in procs.values():
            stop(p)
        platform.cluster.close()
