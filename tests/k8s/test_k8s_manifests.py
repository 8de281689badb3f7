"""The installs under manifests/, rendered as ``kubectl apply -k`` would, are valid and consistent.

Every object of every install (the driver, prefetchd with and without cert-manager, the
ServiceMonitor) is checked strictly against the kubernetes client's models (unknown fields
fail, as tests/csi/test_csi_manifests.py does); custom resources (cert-manager, Prometheus
Operator) have no model here and are checked against the fields their CRDs define, listed below.
Then the promises of docs/install.md: one image setting for every container, namespaces
created, no StorageClass installed, least-privilege RBAC (Secrets: get, by name, only the
node-stage Secrets the examples use), the agent on the driver's node cache, matching
``--replicas``, the monitoring Service and ServiceMonitor selecting the agent.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import renders
import yaml
from kubernetes import client

pytestmark = [pytest.mark.k8s,
              pytest.mark.skipif(renders.kubectl() is None, reason="needs kubectl (kustomize)")]

M = renders.MANIFESTS


def _strict_check() -> Any:
    path = renders.ROOT / "tests" / "csi" / "test_csi_manifests.py"
    spec = importlib.util.spec_from_file_location("_csi_manifest_checks", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    # our own copy of the module: base64 fields (Secret data, caBundle) are strings in YAML
    mod._PRIMITIVES.setdefault("bytes", str)  # noqa: SLF001
    return mod.strict_check


strict_check = _strict_check()

# Fields of the custom resources we use (cert-manager.io/v1, monitoring.coreos.com/v1), as the
# types generated from their CRDs name them in the npm packages @kubernetes-models/cert-manager
# 6.0.0 and @kubernetes-models/prometheus-operator 6.0.0 (CertificateSpec, CertificatePrivateKey,
# IssuerConfig, ServiceMonitorSpec, Endpoint, RelabelConfig, NamespaceSelector); no schema of
# them is available offline here. A field outside these sets is a typo or of another version.
CR_FIELDS: dict[str, dict[str, set[str]]] = {
    "Issuer": {"spec": {"selfSigned", "ca", "acme", "vault", "venafi"}},
    "Certificate": {"spec": {
        "secretName", "duration", "renewBefore", "renewBeforePercentage", "dnsNames",
        "ipAddresses", "uris", "emailAddresses", "commonName", "subject", "issuerRef",
        "privateKey", "usages", "isCA", "secretTemplate", "keystores", "literalSubject",
        "revisionHistoryLimit", "additionalOutputFormats", "encodeUsagesInRequest",
        "nameConstraints", "otherNames", "signatureAlgorithm"},
        "privateKey": {"algorithm", "size", "rotationPolicy", "encoding"},
        "issuerRef": {"name", "kind", "group"}},
    "ServiceMonitor": {"spec": {
        "selector", "namespaceSelector", "endpoints", "jobLabel", "targetLabels",
        "podTargetLabels", "sampleLimit", "targetLimit", "labelLimit", "labelNameLengthLimit",
        "labelValueLengthLimit", "attachMetadata", "scrapeProtocols", "selectorMechanism",
        "scrapeClass", "bodySizeLimit", "keepDroppedTargets", "fallbackScrapeProtocol",
        "nativeHistogramBucketLimit", "nativeHistogramMinBucketFactor",
        "scrapeClassicHistograms", "convertClassicHistogramsToNHCB", "serviceDiscoveryRole",
        "scrapeNativeHistograms"},
        "endpoint": {"port", "targetPort", "path", "scheme", "params", "interval",  # Endpoint
                     "scrapeTimeout", "tlsConfig", "bearerTokenFile", "bearerTokenSecret",
                     "authorization", "honorLabels", "honorTimestamps", "trackTimestampsStaleness",
                     "basicAuth", "oauth2", "metricRelabelings", "relabelings", "proxyUrl",
                     "followRedirects", "enableHttp2", "filterRunning", "noProxy",
                     "proxyFromEnvironment", "proxyConnectHeader"},
        "relabeling": {"sourceLabels", "separator", "targetLabel", "regex", "modulus",
                       "replacement", "action"},
        "namespaceSelector": {"any", "matchNames"}},
}


def installs() -> dict[str, list[dict[str, Any]]]:
    return {
        "driver": renders.kustomize(M),
        "prefetchd": renders.kustomize(M / "prefetchd"),
        "prefetchd-no-cert-manager": renders.install_script("--no-cert-manager"),
        "monitoring": renders.kustomize(M / "monitoring"),
    }


INSTALLS = installs()
ALL = [(f"{name}:{d['kind']}/{d['metadata']['name']}", d)
       for name, docs in INSTALLS.items() for d in docs]


def check_custom_resource(doc: dict[str, Any], where: str) -> None:
    fields = CR_FIELDS[doc["kind"]]
    assert set(doc) <= {"apiVersion", "kind", "metadata", "spec"}, where
    strict_check(doc["metadata"], "V1ObjectMeta", f"{where}.metadata")
    spec = doc["spec"]
    assert set(spec) <= fields["spec"], f"{where}: unknown {set(spec) - fields['spec']}"
    if doc["kind"] == "Certificate":
        assert set(spec["privateKey"]) <= fields["privateKey"], where
        assert set(spec["issuerRef"]) <= fields["issuerRef"], where
    if doc["kind"] == "ServiceMonitor":
        strict_check(spec["selector"], "V1LabelSelector", f"{where}.selector")
        assert set(spec["namespaceSelector"]) <= fields["namespaceSelector"], where
        for ep in spec["endpoints"]:
            assert set(ep) <= fields["endpoint"], f"{where}: {set(ep) - fields['endpoint']}"
            for r in ep.get("relabelings") or []:
                assert set(r) <= fields["relabeling"], where


@pytest.mark.parametrize(("where", "doc"), ALL, ids=[w for w, _ in ALL])
def test_every_object_is_valid(where: str, doc: dict[str, Any]) -> None:
    if doc["kind"] in CR_FIELDS:
        assert doc["apiVersion"] in ("cert-manager.io/v1", "monitoring.coreos.com/v1")
        check_custom_resource(doc, where)
        return
    version = doc["apiVersion"].split("/")[-1]
    model = getattr(client, f"{version.capitalize()}{doc['kind']}")
    strict_check(doc, model.__name__, where)
    obj = client.ApiClient()._ApiClient__deserialize(doc, model)  # noqa: SLF001
    assert obj.metadata.name


def test_the_custom_resource_check_can_fail() -> None:
    (sm,) = [d for d in INSTALLS["monitoring"] if d["kind"] == "ServiceMonitor"]
    bad = json.loads(json.dumps(sm))
    bad["spec"]["endpoints"][0]["intervall"] = "30s"
    with pytest.raises(AssertionError, match="intervall"):
        check_custom_resource(bad, "bad")


def test_the_strict_check_can_fail_on_the_prefetchd_install() -> None:
    """The kubernetes client drops unknown fields; strict_check must not (a misspelt key
    in the agent's DaemonSet, as in manifests/prefetchd/base/agent.yaml)."""
    (ds,) = [d for d in INSTALLS["prefetchd"] if d["kind"] == "DaemonSet"]
    bad = json.loads(json.dumps(ds))
    bad["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0][
        "mountPropogation"] = "None"
    with pytest.raises(AssertionError, match="mountPropogation"):
        strict_check(bad, "V1DaemonSet", "bad")
    client.ApiClient()._ApiClient__deserialize(bad, client.V1DaemonSet)  # noqa: SLF001


def kinds(name: str) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for d in INSTALLS[name]:
        out.setdefault(d["kind"], []).append(d)
    return out


def containers(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c for d in docs if d["kind"] in ("Deployment", "DaemonSet")
            for c in d["spec"]["template"]["spec"]["containers"]]


def test_no_storage_class_is_installed_and_the_example_is_complete() -> None:
    for name, docs in INSTALLS.items():
        assert "StorageClass" not in {d["kind"] for d in docs}, name
    (sc,) = renders.documents((M / "examples" / "storageclass.yaml").read_text())
    from csi.volumes import source_for_new_volume

    params = {**sc["parameters"], "csi.storage.k8s.io/pvc/name": "imagenet",
              "csi.storage.k8s.io/pvc/namespace": "default"}
    assert source_for_new_volume("pvc-1", params).uri == "s3://my-training-data/datasets/imagenet"


def test_every_namespace_used_is_created() -> None:
    for name in ("driver", "prefetchd", "prefetchd-no-cert-manager"):
        docs = INSTALLS[name] + (INSTALLS["driver"] if name != "driver" else [])
        created = {d["metadata"]["name"] for d in docs if d["kind"] == "Namespace"}
        used = {d["metadata"].get("namespace") for d in INSTALLS[name]} - {None}
        assert used <= created, (name, used - created)
    assert {d["metadata"]["name"] for d in INSTALLS["prefetchd"]
            if d["kind"] == "Namespace"} == {"fusecache-system"}


def test_one_image_setting_reaches_every_fusecache_container(tmp_path: Path) -> None:
    copy = tmp_path / "manifests"
    shutil.copytree(M, copy)
    comp = copy / "image" / "kustomization.yaml"
    doc = yaml.safe_load(comp.read_text())
    doc["images"][0].update(newName="registry.example/ml/fusecache", newTag="9.9.9")
    comp.write_text(yaml.safe_dump(doc))
    for path in (copy, copy / "prefetchd"):
        ours = [c["image"] for c in containers(renders.kustomize(path))
                if "registry.k8s.io" not in c["image"]]
        assert ours and set(ours) == {"registry.example/ml/fusecache:9.9.9"}, path


def test_rbac_is_least_privilege_and_secrets_are_get_by_name() -> None:
    docs = [d for name in ("driver", "prefetchd") for d in INSTALLS[name]]
    secret_rules = []
    for d in docs:
        if d["kind"] not in ("Role", "ClusterRole"):
            continue
        for rule in d["rules"]:
            assert "*" not in rule["verbs"] and "*" not in rule["resources"], d["metadata"]
            if "secrets" in rule["resources"]:
                secret_rules.append((d, rule))
    (role, rule), = secret_rules
    assert role["kind"] == "Role" and rule["verbs"] == ["get"] and rule["resources"] == ["secrets"]
    granted = {(role["metadata"]["namespace"], n) for n in rule["resourceNames"]}
    # exactly the node-stage Secrets the examples name (StorageClass and static PV)
    named = set()
    for path in (M / "examples").glob("*.yaml"):
        for d in renders.documents(path.read_text()):
            if d["kind"] == "StorageClass":
                p = d["parameters"]
                named.add((p["csi.storage.k8s.io/node-stage-secret-namespace"],
                           p["csi.storage.k8s.io/node-stage-secret-name"]))
            if d["kind"] == "PersistentVolume" and d["spec"]["csi"].get("nodeStageSecretRef"):
                ref = d["spec"]["csi"]["nodeStageSecretRef"]
                named.add((ref["namespace"], ref["name"]))
    assert granted == named
    (binding,) = [d for d in docs if d["kind"] == "RoleBinding"
                  and d["roleRef"]["name"] == role["metadata"]["name"]]
    assert binding["metadata"]["namespace"] == role["metadata"]["namespace"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "prefetchd",
                                    "namespace": "fusecache-system"}]
    webhook_roles = [d for d in docs if d["kind"] == "ClusterRole"
                     and d["metadata"]["name"] == "prefetchd-webhook"]
    assert all(set(r["verbs"]) <= {"get", "list", "watch"} for d in webhook_roles
               for r in d["rules"])


def test_the_agent_shares_the_driver_s_node_cache_and_its_args_parse() -> None:
    from prefetchd import cli

    (csi_ds,) = [d for d in kinds("driver")["DaemonSet"]
                 if d["metadata"]["name"] == "fusecache-csi-node"]
    csi_pod = csi_ds["spec"]["template"]["spec"]
    (plugin,) = [c for c in csi_pod["containers"] if c["name"] == "fusecache-csi"]
    csi_cache = next(a.split("=", 1)[1] for a in plugin["args"] if a.startswith("--cache-dir="))
    csi_host = {v["name"]: v.get("hostPath", {}).get("path") for v in csi_pod["volumes"]}
    csi_mount = {m["mountPath"]: m["name"] for m in plugin["volumeMounts"]}
    for name in ("prefetchd", "prefetchd-no-cert-manager"):
        (agent_ds,) = kinds(name)["DaemonSet"]
        pod = agent_ds["spec"]["template"]["spec"]
        (agent,) = pod["containers"]
        args = cli.build_parser().parse_args(agent["command"][1:] + agent["args"])
        assert args.kubernetes and args.all_namespaces
        host = {v["name"]: v.get("hostPath", {}).get("path") for v in pod["volumes"]}
        mounts = {m["mountPath"]: m["name"] for m in agent["volumeMounts"]}
        # the same host directory, seen at the same path, as the CSI plugin's --cache-dir
        assert host[mounts[args.cache_dir]] == csi_host[csi_mount[csi_cache]]
        assert args.cache_dir == csi_cache
        assert pod["serviceAccountName"] == "prefetchd"
        # every process that opens the node cache (LMDB) shares the host's pid namespace
        assert pod.get("hostPID") is True
        assert all(d["spec"]["template"]["spec"].get("hostPID") is True
                   for d in kinds("driver")["DaemonSet"])
        assert [e["valueFrom"]["fieldRef"]["fieldPath"] for e in agent["env"]
                if e["name"] == "NODE_NAME"] == ["spec.nodeName"]
        (hook,) = kinds(name)["Deployment"]
        hook_args = cli.build_parser().parse_args(
            hook["spec"]["template"]["spec"]["containers"][0]["command"][1:]
            + hook["spec"]["template"]["spec"]["containers"][0]["args"])
        assert hook_args.replicas == args.replicas  # placement agrees only if they match
        ports = {p["name"]: p["containerPort"] for p in agent["ports"]}
        assert ports["metrics"] == args.metrics_port


def test_webhook_certificates_per_install() -> None:
    (with_cm,) = kinds("prefetchd")["MutatingWebhookConfiguration"]
    assert with_cm["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == \
        "fusecache-system/prefetchd-webhook"
    (cert,) = kinds("prefetchd")["Certificate"]
    assert cert["spec"]["secretName"] == "prefetchd-webhook-tls"
    assert "prefetchd-webhook.fusecache-system.svc" in cert["spec"]["dnsNames"]
    plain = kinds("prefetchd-no-cert-manager")
    assert "Certificate" not in plain and "Issuer" not in plain
    (hook,) = plain["MutatingWebhookConfiguration"]
    assert "annotations" not in hook["metadata"]
    assert hook["webhooks"][0]["clientConfig"]["caBundle"]
    (secret,) = plain["Secret"]
    assert secret["metadata"]["name"] == "prefetchd-webhook-tls"
    for hook in (with_cm, plain["MutatingWebhookConfiguration"][0]):
        for h in hook["webhooks"]:
            assert h["failurePolicy"] == "Ignore" and h["sideEffects"] == "None"
            assert h["namespaceSelector"] and h["admissionReviewVersions"] == ["v1"]


def test_the_service_monitor_scrapes_the_agents() -> None:
    (svc,) = kinds("monitoring")["Service"]
    (sm,) = kinds("monitoring")["ServiceMonitor"]
    (agent_ds,) = kinds("prefetchd")["DaemonSet"]
    pod_labels = agent_ds["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert sm["spec"]["namespaceSelector"]["matchNames"] == [svc["metadata"]["namespace"]]
    (port,) = svc["spec"]["ports"]
    assert sm["spec"]["endpoints"][0]["port"] == port["name"]
    (agent,) = agent_ds["spec"]["template"]["spec"]["containers"]
    agent_ports = {p["name"] for p in agent["ports"]}
    assert port["targetPort"] in agent_ports


def test_the_install_script_refuses_bad_arguments() -> None:
    import subprocess

    script = renders.ROOT / "scripts" / "install-prefetchd.sh"
    for args, message in ((["--bogus"], "unknown argument --bogus"),
                          (["--days", "soon"], "--days soon: not a number of days")):
        res = subprocess.run(["bash", str(script), *args], capture_output=True, text=True)
        assert res.returncode == 2 and message in res.stderr, res.stderr


def test_rbac_grants_read_of_exactly_the_training_work_kinds() -> None:
    """The agent may get/list/watch every kind prefetchd.workloads reads (and CRDs), no more."""
    from prefetchd import workloads as wl

    docs = INSTALLS["prefetchd"]
    (agent,) = [d for d in docs if d["kind"] == "ClusterRole"
                and d["metadata"]["name"] == "prefetchd-agent"]
    granted = {(g, r) for rule in agent["rules"] if set(rule["verbs"]) == {"get", "list", "watch"}
               for g in rule["apiGroups"] for r in rule["resources"]}
    wanted = {(k.group, k.plural) for k in wl.KINDS}
    wanted |= {(g, p) for g, _, _, p, _ in wl.LIBRARY_WATCHES}
    wanted.add(("apiextensions.k8s.io", "customresourcedefinitions"))
    assert wanted <= granted
    extra = granted - wanted - {("argoproj.io", r) for r in (
        "workflows", "workflowtemplates", "clusterworkflowtemplates")} - {("", r) for r in (
            "pods", "persistentvolumeclaims", "persistentvolumes", "nodes")}
    assert not extra, extra
