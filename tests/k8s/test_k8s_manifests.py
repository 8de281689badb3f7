"""manifests/prefetchd parse into the kubernetes client's models; the invariants we promise hold."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from kubernetes import client

pytestmark = pytest.mark.k8s

ROOT = Path(__file__).resolve().parents[2] / "manifests" / "prefetchd"
MODELS = {
    "ServiceAccount": "V1ServiceAccount", "ClusterRole": "V1ClusterRole",
    "ClusterRoleBinding": "V1ClusterRoleBinding", "Deployment": "V1Deployment",
    "Service": "V1Service",
    "MutatingWebhookConfiguration": "V1MutatingWebhookConfiguration",
}


PATCHES = ("agent-daemonset-patch.yaml",)  # partial objects, merged into the CSI DaemonSet


def docs() -> list[dict]:
    out = []
    for path in sorted(ROOT.glob("*.yaml")):
        if path.name in PATCHES:
            continue
        out += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return out


def test_every_manifest_parses_into_a_model():
    api = client.ApiClient()
    kinds = set()
    for doc in docs():
        kinds.add(doc["kind"])
        if doc["kind"] in MODELS:
            model = api.deserialize(json.dumps(doc), MODELS[doc["kind"]], "application/json")
            assert model.metadata.name
    assert {"MutatingWebhookConfiguration", "Deployment", "Service", "ClusterRole"} <= kinds


def test_webhook_never_blocks_and_is_scoped():
    (cfg,) = [d for d in docs() if d["kind"] == "MutatingWebhookConfiguration"]
    for hook in cfg["webhooks"]:
        assert hook["failurePolicy"] == "Ignore" and hook["sideEffects"] == "None"
        assert hook["namespaceSelector"] and hook["admissionReviewVersions"] == ["v1"]


def test_rbac_is_least_privilege():
    roles = {d["metadata"]["name"]: d["rules"] for d in docs() if d["kind"] == "ClusterRole"}
    for rules in roles.values():
        for rule in rules:
            assert "*" not in rule["verbs"] and "*" not in rule["resources"]
            writes = set(rule["verbs"]) - {"get", "list", "watch"}
            assert writes <= {"patch"} and (not writes or rule["resources"] == ["nodes"])
    assert not any("patch" in r["verbs"] for r in roles["prefetchd-webhook"])


def test_agent_patch_adds_the_prefetchd_container():
    (patch,) = yaml.safe_load_all((ROOT / PATCHES[0]).read_text())
    (container,) = patch["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["prefetchd", "run", "--kubernetes"]
    model = client.ApiClient().deserialize(json.dumps(container), "V1Container",
                                           "application/json")
    assert model.env[0].value_from.field_ref.field_path == "spec.nodeName"


def test_agent_patch_targets_the_csi_node_daemonset_and_its_cache():
    """The patch names the real CSI node DaemonSet and uses its cache dir; its args parse."""
    from prefetchd import cli

    (patch,) = yaml.safe_load_all((ROOT / PATCHES[0]).read_text())
    (csi,) = [d for d in yaml.safe_load_all((ROOT.parent / "node.yaml").read_text())
              if d and d["kind"] == "DaemonSet"]
    assert (patch["metadata"]["name"], patch["metadata"]["namespace"]) == \
        (csi["metadata"]["name"], csi["metadata"]["namespace"])
    pod = csi["spec"]["template"]["spec"]
    (plugin,) = [c for c in pod["containers"] if c["name"] == "fusecache-csi"]
    csi_cache = next(a.split("=", 1)[1] for a in plugin["args"] if a.startswith("--cache-dir="))
    (agent,) = patch["spec"]["template"]["spec"]["containers"]
    args = cli.build_parser().parse_args(agent["command"][1:] + agent["args"])
    assert args.kubernetes and args.cache_dir == csi_cache and args.metrics_port
    mounts = {m["name"]: m["mountPath"] for m in agent["volumeMounts"]}
    assert mounts["cache-dir"] == csi_cache
    assert "cache-dir" in {v["name"] for v in pod["volumes"]}
    # the CSI pod mounts no token; the agent's own projected token is where in-cluster looks
    assert pod.get("automountServiceAccountToken") is False
    assert mounts["prefetchd-api-token"] == "/var/run/secrets/kubernetes.io/serviceaccount"
    # and the pod's own service account holds the agent's rules
    bindings = [d for d in docs() if d["kind"] == "ClusterRoleBinding"
                and d["roleRef"]["name"] == "prefetchd-agent"]
    subjects = {(s["namespace"], s["name"]) for b in bindings for s in b["subjects"]}
    assert (csi["metadata"]["namespace"], pod["serviceAccountName"]) in subjects
