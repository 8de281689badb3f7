"""Every Kubernetes manifest parses into the kubernetes client's models, strictly.

The client's own deserializer drops unknown fields silently, so a misspelt key
(``mountPropogation``) would pass it; ``strict_check`` walks each document against
the models' ``attribute_map`` and ``openapi_types`` first and names any field the
API does not know. The KFP pipeline is checked apart (it is not a Kubernetes
object): its compiled YAML must mount the PVC that the examples create.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"
KFP_DIR = MANIFESTS / "examples" / "kfp"
NOT_K8S = {"kustomization.yaml"}

_PRIMITIVES = {"str": str, "int": int, "bool": bool, "float": (int, float),
               "object": object, "datetime": str, "date": str}


def csi_manifest_files() -> list[Path]:
    """The CSI driver's manifests: manifests/*.yaml and manifests/examples/ (other
    components keep theirs in their own subdirectories, checked by their tests)."""
    return sorted([*MANIFESTS.glob("*.yaml"), *(MANIFESTS / "examples").rglob("*.yaml")])


def k8s_documents() -> list[tuple[str, dict[str, Any]]]:
    docs = []
    for path in csi_manifest_files():
        if path.name in NOT_K8S or KFP_DIR in path.parents:
            continue
        for i, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if doc is not None:
                docs.append((f"{path.relative_to(REPO)}#{i}", doc))
    return docs


def model_for(doc: dict[str, Any]) -> type:
    version = doc["apiVersion"].split("/")[-1]
    name = f"{version.capitalize()}{doc['kind']}"
    model = getattr(client, name, None)
    assert model is not None, f"no kubernetes model {name}"
    return model


def strict_check(data: Any, type_name: str, where: str) -> None:
    """Fail on fields unknown to the model named *type_name* (recursively)."""
    if type_name in _PRIMITIVES:
        assert isinstance(data, _PRIMITIVES[type_name]), f"{where}: expected {type_name}"
        return
    m = re.fullmatch(r"(?:list|List)\[(.+)\]", type_name)
    if m:
        assert isinstance(data, list), f"{where}: expected a list"
        for i, item in enumerate(data):
            strict_check(item, m.group(1), f"{where}[{i}]")
        return
    m = re.fullmatch(r"(?:dict\(([^,]+), (.+)\)|Dict\[([^,]+), (.+)\])", type_name)
    if m:
        assert isinstance(data, dict), f"{where}: expected a map"
        value_type = m.group(2) or m.group(4)
        for k, v in data.items():
            strict_check(v, value_type, f"{where}.{k}")
        return
    model = getattr(client, type_name)
    assert isinstance(data, dict), f"{where}: expected an object ({type_name})"
    by_json = {v: k for k, v in model.attribute_map.items()}
    for key, value in data.items():
        assert key in by_json, f"{where}: unknown field {key!r} for {type_name}"
        strict_check(value, model.openapi_types[by_json[key]], f"{where}.{key}")


DOCS = k8s_documents()


def test_the_issue_s_objects_are_all_there() -> None:
    kinds = sorted({d["kind"] for _, d in DOCS})
    for kind in ("CSIDriver", "DaemonSet", "Deployment", "StorageClass", "ClusterRole",
                 "ServiceAccount", "Secret", "PersistentVolume", "PersistentVolumeClaim",
                 "Pod", "Namespace"):
        assert kind in kinds


@pytest.mark.parametrize(("where", "doc"), DOCS, ids=[w for w, _ in DOCS])
def test_manifest_parses_into_kubernetes_models(where: str, doc: dict[str, Any]) -> None:
    model = model_for(doc)
    strict_check(doc, model.__name__, where)
    obj = client.ApiClient()._ApiClient__deserialize(doc, model)  # noqa: SLF001
    assert obj.metadata.name


def test_kustomization_lists_existing_files_and_everything_core() -> None:
    kust = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    for res in kust["resources"]:
        assert (MANIFESTS / res).is_file(), res
    core = {p.name for p in MANIFESTS.glob("*.yaml")} - NOT_K8S
    assert core <= set(kust["resources"])


def by_kind(kind: str) -> list[dict[str, Any]]:
    return [d for _, d in DOCS if d["kind"] == kind]


def test_driver_wiring_is_consistent() -> None:
    from csi import DRIVER_NAME

    (driver,) = by_kind("CSIDriver")
    assert driver["metadata"]["name"] == DRIVER_NAME
    assert driver["spec"]["attachRequired"] is False and driver["spec"]["podInfoOnMount"]
    (sc,) = by_kind("StorageClass")
    assert sc["metadata"]["name"] == "fusecache" and sc["provisioner"] == DRIVER_NAME
    daemonsets = {d["metadata"]["name"]: d for d in by_kind("DaemonSet")}
    assert set(daemonsets) == {"fusecache-csi-node", "fusecache-csi-holder"}
    pod = daemonsets["fusecache-csi-node"]["spec"]["template"]["spec"]
    names = [c["name"] for c in pod["containers"]]
    assert names == ["fusecache-csi", "node-driver-registrar", "liveness-probe"]
    plugin = pod["containers"][0]
    assert plugin["securityContext"]["privileged"] is True
    props = {m["mountPath"]: m.get("mountPropagation") for m in plugin["volumeMounts"]}
    assert props["/var/lib/kubelet"] == "Bidirectional"
    assert any(v.get("hostPath", {}).get("path") == "/dev/fuse" for v in pod["volumes"])
    assert "FUSECACHE_DISK_CACHE_SIZE" in {e["name"] for e in plugin["env"]}
    # the relays live in the holder's pod: same socket, same state and cache paths
    holder_ds = daemonsets["fusecache-csi-holder"]
    assert holder_ds["spec"]["updateStrategy"]["type"] == "OnDelete"
    hpod = holder_ds["spec"]["template"]["spec"]
    assert pod["hostPID"] is True and hpod["hostPID"] is True
    (holder,) = hpod["containers"]
    sock = next(a.split("=", 1)[1] for a in holder["args"] if a.startswith("--socket="))
    assert f"--relay-holder={sock}" in plugin["args"]
    mine = {m["mountPath"]: m["name"] for m in plugin["volumeMounts"]}
    theirs = {m["mountPath"]: m["name"] for m in holder["volumeMounts"]}
    assert sock.startswith("/var/lib/fusecache-csi/")
    for path in ("/var/lib/fusecache-csi", "/var/lib/fusecache"):
        host = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]}
        hhost = {v["name"]: v["hostPath"]["path"] for v in hpod["volumes"]}
        assert host[mine[path]] == hhost[theirs[path]] == path
    reg = pod["containers"][1]["args"]
    assert f"--kubelet-registration-path=/var/lib/kubelet/plugins/{DRIVER_NAME}/csi.sock" in reg
    (dep,) = by_kind("Deployment")
    prov = dep["spec"]["template"]["spec"]["containers"][0]
    assert prov["name"] == "csi-provisioner" and "--extra-create-metadata" in prov["args"]


def test_rbac_is_least_privilege() -> None:
    (role,) = by_kind("ClusterRole")
    resources = {r for rule in role["rules"] for r in rule["resources"]}
    assert "secrets" not in resources and "*" not in resources
    assert all("*" not in rule["verbs"] for rule in role["rules"])
    node_sa = [s for s in by_kind("ServiceAccount") if s["metadata"]["name"].endswith("node")]
    assert node_sa and node_sa[0]["automountServiceAccountToken"] is False


def test_examples_use_the_driver_as_documented() -> None:
    (pv,) = by_kind("PersistentVolume")
    assert pv["spec"]["csi"]["driver"] == "csi.fusecache.io"
    from csi.volumes import VolumeSource

    VolumeSource.from_map(pv["spec"]["csi"]["volumeAttributes"])  # valid attributes
    claims = {c["metadata"]["name"]: c for c in by_kind("PersistentVolumeClaim")}
    assert claims["imagenet"]["spec"]["storageClassName"] == "fusecache"
    (pod,) = by_kind("Pod")
    vol = pod["spec"]["volumes"][0]
    assert vol["persistentVolumeClaim"]["claimName"] in claims


def test_kfp_pipeline_source_and_compiled_spec_mount_the_pvc() -> None:
    """kfp pins protobuf<7, which this environment's grpcio stubs need, so the
    pipeline is compiled in a virtualenv of its own (see its docstring) and the
    compiled YAML is checked in; here both are checked to agree."""
    source = (KFP_DIR / "train_pipeline.py").read_text()
    tree = ast.parse(source)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)
             and getattr(n.func, "attr", "") == "mount_pvc"]
    assert len(calls) == 2
    compiled = list(yaml.safe_load_all((KFP_DIR / "train_pipeline.yaml").read_text()))
    platform = next(d for d in compiled if "platforms" in d)
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert set(executors) == {"exec-scan-dataset", "exec-train"}
    for spec in executors.values():
        (mount,) = spec["pvcMount"]
        assert mount["mountPath"] == "/data"
        assert mount["pvcNameParameter"]["runtimeValue"]["constant"] == "imagenet"


def test_strict_check_catches_a_misspelt_field() -> None:
    """The check above must be able to fail: a typo deep in a pod template."""
    import copy

    ds = by_kind("DaemonSet")[0]
    bad = copy.deepcopy(ds)
    bad["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0]["mountPropogation"] = "x"
    with pytest.raises(AssertionError, match="mountPropogation"):
        strict_check(bad, "V1DaemonSet", "bad")
    bad = copy.deepcopy(ds)
    bad["spec"]["template"]["spec"]["containers"][0]["args"] = "--mode=node"
    with pytest.raises(AssertionError, match="expected a list"):
        strict_check(bad, "V1DaemonSet", "bad")
