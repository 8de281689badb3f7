"""Objects as the real controllers make them, for the PVC end-to-end tests (no mocks of ours).

Who uses this: tests/k8s/test_k8s_e2e_pvc.py (fake API server) and
tests/k8s/test_k8s_real_cluster.py (real kube-apiserver). It plays the parts the cluster's
own controllers play, writing through a :class:`Cluster` (the fake's methods, or raw REST on a
real API server):

* Argo's workflow controller (v3.x, pod names v2): ``status.nodes`` entries with Argo's node
  ids (``<wf>-<fnv32a(node name)>``), names (``<wf>.<task>``) and phases moving Pending ->
  Running -> Succeeded; step pods named ``<wf>-<template>-<fnv32a(node name)>``, labelled
  ``workflows.argoproj.io/workflow`` and ``workflows.argoproj.io/completed``, annotated with
  ``workflows.argoproj.io/node-name``/``node-id`` and ``kubectl.kubernetes.io/default-container``,
  owned (controller reference) by the Workflow, with the ``init``/``wait`` containers and the
  ``var-run-argo`` volume; ``volumeClaimTemplates`` claims named ``<wf>-<template>``, labelled and
  owned likewise and recorded in ``status.persistentVolumeClaims``;
* the PV controller / a static provisioner: a PV of csi.fusecache.io with bucket/prefix
  volumeAttributes bound to a claim (claimRef both ways, phase Bound);
* the KFP v2 backend: a compiled pipeline (IR) becomes the Argo Workflow KFP submits for a run
  (:func:`kfp_workflow`), built on the shape of the backend's own golden file in
  tests/k8s/data/kfp-backend/wf_pvc_mount.yaml (driver / executor templates, runtime-config
  with the run's parameter values), and its executor pod carries the driver's pod-spec patch
  (the claim's volume and mount, the launcher's executor input naming the input paths).
"""

from __future__ import annotations

import copy
import hashlib
import json
import time
from pathlib import Path
from typing import Any, Protocol

import yaml

# The KFP backend's golden Workflow (provenance in its README)
KFP_GOLDEN = Path(__file__).resolve().parent / "data" / "kfp-backend" / "wf_pvc_mount.yaml"
DRIVER = "csi.fusecache.io"
WF_API = "argoproj.io/v1alpha1"
ARGOEXEC = "quay.io/argoproj/argoexec:v3.6.5"


class Cluster(Protocol):
    def create(self, obj: dict[str, Any]) -> dict[str, Any]: ...

    def get(self, api_version: str, kind: str, name: str,
            namespace: str | None = None) -> dict[str, Any]: ...

    def patch(self, api_version: str, kind: str, name: str, body: dict[str, Any],
              namespace: str | None = None, status: bool = False) -> dict[str, Any]: ...


class FakeCluster:
    """:class:`Cluster` over tests/k8s/fake_apiserver.py (no status subresource there)."""

    def __init__(self, fake: Any) -> None:
        self.fake = fake

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self.fake.create(obj)

    def get(self, api_version: str, kind: str, name: str,
            namespace: str | None = None) -> dict[str, Any]:
        return self.fake.get(api_version, kind, name, namespace=namespace)

    def patch(self, api_version: str, kind: str, name: str, body: dict[str, Any],
              namespace: str | None = None, status: bool = False) -> dict[str, Any]:
        return self.fake.patch(api_version, kind, name, body, namespace=namespace)


def fnv32a(text: str) -> int:
    h = 0x811C9DC5
    for b in text.encode():
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def node_id(wf_name: str, node_name: str) -> str:
    return wf_name if node_name == wf_name else f"{wf_name}-{fnv32a(node_name)}"


def pod_name(wf_name: str, node_name: str, template: str) -> str:
    return f"{wf_name}-{template}-{fnv32a(node_name)}"


def owner_ref(wf: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": WF_API, "kind": "Workflow", "name": wf["metadata"]["name"],
            "uid": wf["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}


# ---------------------------------------------------------------- storage


def static_pv(name: str, bucket: str, prefix: str, endpoint: str | None = None) -> dict:
    attrs = {"bucket": bucket, "prefix": prefix}
    if endpoint:
        attrs["endpointUrl"] = endpoint
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
            "spec": {"capacity": {"storage": "100Gi"}, "accessModes": ["ReadOnlyMany"],
                     "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                     "volumeMode": "Filesystem",
                     "csi": {"driver": DRIVER, "volumeHandle": f"{bucket}/{prefix}",
                             "readOnly": True, "volumeAttributes": attrs}}}


def claim(name: str, namespace: str, volume: str | None = None, **meta: Any) -> dict:
    spec: dict[str, Any] = {"accessModes": ["ReadOnlyMany"], "storageClassName": "",
                            "volumeMode": "Filesystem",
                            "resources": {"requests": {"storage": "100Gi"}}}
    if volume:
        spec["volumeName"] = volume
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": namespace, **meta}, "spec": spec}


def bind(cluster: Cluster, pv: dict, pvc_namespace: str, pvc_name: str) -> None:
    """Bind a PV and a claim as the PV controller does: claimRef, volumeName, both Bound."""
    pvc = cluster.get("v1", "PersistentVolumeClaim", pvc_name, pvc_namespace)
    pv = copy.deepcopy(pv)
    pv["spec"]["claimRef"] = {"kind": "PersistentVolumeClaim", "apiVersion": "v1",
                              "namespace": pvc_namespace, "name": pvc_name,
                              "uid": pvc["metadata"].get("uid", "")}
    name = pv["metadata"]["name"]
    cluster.create(pv)
    cluster.patch("v1", "PersistentVolume", name, {"status": {"phase": "Bound"}}, status=True)
    cluster.patch("v1", "PersistentVolumeClaim", pvc_name, {
        "metadata": {"annotations": {"pv.kubernetes.io/bind-completed": "yes",
                                     "pv.kubernetes.io/bound-by-controller": "yes"}},
        "spec": {"volumeName": name}}, pvc_namespace)
    cluster.patch("v1", "PersistentVolumeClaim", pvc_name, {"status": {
        "phase": "Bound", "accessModes": ["ReadOnlyMany"], "capacity": {"storage": "100Gi"}}},
        pvc_namespace, status=True)


def pvc_bound(cluster: Cluster, namespace: str, name: str) -> bool:
    try:
        pvc = cluster.get("v1", "PersistentVolumeClaim", name, namespace)
    except Exception:  # noqa: BLE001 - not there yet
        return False
    return (pvc.get("status") or {}).get("phase") == "Bound"


# ---------------------------------------------------------------- Argo workflows


def argo_workflow(name: str, namespace: str, claim_name: str | None,
                  data_arg: str = "/data/train/", template_claim: bool = False) -> dict:
    """prepare -> train; train mounts the dataset claim at /data (a workflow parameter), or a
    ``volumeClaimTemplates`` claim ``data`` when ``template_claim``."""
    train: dict[str, Any] = {
        "name": "train", "container": {
            "image": "python:3.11-slim", "command": ["python", "train.py"],
            "args": ["--data-dir", data_arg, "--epochs", "1"],
            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
            "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": True}]}}
    spec: dict[str, Any] = {
        "entrypoint": "main", "serviceAccountName": "default",
        "templates": [
            {"name": "main", "dag": {"tasks": [
                {"name": "prepare", "template": "prepare"},
                {"name": "train", "template": "train", "depends": "prepare"}]}},
            {"name": "prepare", "container": {
                "image": "busybox", "command": ["sh", "-c", "echo preparing"],
                "resources": {"requests": {"cpu": "100m", "memory": "16Mi"}}}},
            train]}
    if template_claim:
        spec["volumeClaimTemplates"] = [{
            "metadata": {"name": "data"},
            "spec": {"accessModes": ["ReadOnlyMany"], "storageClassName": "fusecache-static",
                     "resources": {"requests": {"storage": "100Gi"}}}}]
    else:
        spec["arguments"] = {"parameters": [{"name": "dataset-claim", "value": claim_name}]}
        train["volumes"] = [{"name": "data", "persistentVolumeClaim": {
            "claimName": "{{workflow.parameters.dataset-claim}}", "readOnly": True}}]
    return {"apiVersion": WF_API, "kind": "Workflow",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {"workflows.argoproj.io/completed": "false"}},
            "spec": spec}


class ArgoRun:
    """Argo's controller for one Workflow: status.nodes, step pods, template claims."""

    def __init__(self, cluster: Cluster, wf: dict[str, Any]) -> None:
        self.cluster, self.wf = cluster, wf
        self.name = wf["metadata"]["name"]
        self.ns = wf["metadata"]["namespace"]
        self.nodes: dict[str, dict[str, Any]] = {}
        self.pods: dict[str, str] = {}  # node name -> pod name

    def _push(self, phase: str = "Running", **extra: Any) -> None:
        self.cluster.patch(WF_API, "Workflow", self.name, {"status": {
            "phase": phase, "progress": f"0/{len(self.nodes)}", "nodes": self.nodes, **extra}},
            self.ns)

    def node(self, node_name: str, display: str, ntype: str, phase: str, template: str,
             parent: str | None = None, **extra: Any) -> str:
        nid = node_id(self.name, node_name)
        n = self.nodes.setdefault(nid, {
            "id": nid, "name": node_name, "displayName": display, "type": ntype,
            "templateName": template, "templateScope": f"local/{self.name}",
            "startedAt": now(), "children": []})
        n["phase"] = phase
        n.update(extra)
        if phase in ("Succeeded", "Failed", "Error"):
            n["finishedAt"] = now()
        if parent:
            kids = self.nodes[node_id(self.name, parent)]["children"]
            if nid not in kids:
                kids.append(nid)
        return nid

    def start(self) -> None:
        """The controller picks the Workflow up: Running, root DAG node, template claims."""
        extra: dict[str, Any] = {"startedAt": now()}
        vols = []
        for t in (self.wf.get("spec") or {}).get("volumeClaimTemplates") or []:
            ref = t["metadata"]["name"]
            pvc = claim(f"{self.name}-{ref}", self.ns,
                        labels={"workflows.argoproj.io/workflow": self.name},
                        ownerReferences=[owner_ref(self.wf)])
            pvc["spec"] = {**copy.deepcopy(t["spec"]), "volumeMode": "Filesystem"}
            self.cluster.create(pvc)
            vols.append({"name": ref, "persistentVolumeClaim": {"claimName": pvc["metadata"]
                                                                ["name"]}})
        if vols:
            extra["persistentVolumeClaims"] = vols
        self.node(self.name, self.name, "DAG", "Running", self.wf["spec"]["entrypoint"])
        self.cluster.patch(WF_API, "Workflow", self.name, {"metadata": {"annotations": {
            "workflows.argoproj.io/pod-name-format": "v2"}}}, self.ns)
        self._push(**extra)

    def step_pod(self, node_name: str, template: dict[str, Any], volumes: list[dict],
                 main: dict[str, Any]) -> dict[str, Any]:
        """A step pod as Argo's workflowpod.go builds it (emissary executor)."""
        name = pod_name(self.name, node_name, template["name"])
        var_run = {"name": "var-run-argo", "mountPath": "/var/run/argo"}
        main = copy.deepcopy(main)
        main["name"] = "main"
        main["command"] = ["/var/run/argo/argoexec", "emissary", "--", *(main.get("command")
                                                                          or [])]
        main["volumeMounts"] = [*(main.get("volumeMounts") or []), var_run]
        main["env"] = [{"name": "ARGO_CONTAINER_NAME", "value": "main"}]
        tmpl_env = [{"name": "ARGO_TEMPLATE", "value": json.dumps(template)}]
        self.pods[node_name] = name
        return {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": name, "namespace": self.ns,
                "labels": {"workflows.argoproj.io/workflow": self.name,
                           "workflows.argoproj.io/completed": "false"},
                "annotations": {"workflows.argoproj.io/node-name": node_name,
                                "workflows.argoproj.io/node-id": node_id(self.name, node_name),
                                "kubectl.kubernetes.io/default-container": "main"},
                "ownerReferences": [owner_ref(self.wf)]},
            "spec": {
                "restartPolicy": "Never", "serviceAccountName": "default",
                "volumes": [{"name": "var-run-argo", "emptyDir": {}}, *volumes],
                "initContainers": [{"name": "init", "image": ARGOEXEC,
                                    "command": ["argoexec", "init", "--loglevel", "info"],
                                    "env": [{"name": "ARGO_CONTAINER_NAME", "value": "init"},
                                            *tmpl_env],
                                    "volumeMounts": [var_run]}],
                "containers": [
                    {"name": "wait", "image": ARGOEXEC,
                     "command": ["argoexec", "wait", "--loglevel", "info"],
                     "env": [{"name": "ARGO_CONTAINER_NAME", "value": "wait"}, *tmpl_env],
                     "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}}},
                    main]},
            "status": {"phase": "Pending"}}

    def pod_phase(self, node_name: str, phase: str) -> None:
        self.cluster.patch("v1", "Pod", self.pods[node_name], {"status": {"phase": phase}},
                           self.ns, status=True)
        if phase in ("Succeeded", "Failed"):
            self.cluster.patch("v1", "Pod", self.pods[node_name], {"metadata": {"labels": {
                "workflows.argoproj.io/completed": "true"}}}, self.ns)

    def finish(self) -> None:
        self.node(self.name, self.name, "DAG", "Succeeded", self.wf["spec"]["entrypoint"])
        self._push("Succeeded", finishedAt=now(), progress=f"{len(self.nodes)}/{len(self.nodes)}")
        self.cluster.patch(WF_API, "Workflow", self.name, {"metadata": {"labels": {
            "workflows.argoproj.io/completed": "true",
            "workflows.argoproj.io/phase": "Succeeded"}}}, self.ns)

    # --- plain Argo DAG (prepare -> train)

    def argo_step(self, task: str, phase: str, host: str | None = None,
                  create_pod: bool = False) -> dict[str, Any] | None:
        """Move DAG task ``task`` to ``phase``; with ``create_pod`` return its pod (Pending)."""
        tmpl = next(t for t in self.wf["spec"]["templates"] if t["name"] == task)
        node_name = f"{self.name}.{task}"
        extra = {"hostNodeName": host} if host else {}
        self.node(node_name, task, "Pod", phase, task, parent=self.name, **extra)
        self._push()
        if not create_pod:
            return None
        vols = []
        for v in tmpl.get("volumes") or []:
            v = copy.deepcopy(v)
            pvc = v.get("persistentVolumeClaim")
            if pvc and "{{workflow.parameters." in pvc["claimName"]:
                pname = pvc["claimName"].split("workflow.parameters.", 1)[1].rstrip("}")
                pvc["claimName"] = next(p["value"] for p in self.wf["spec"]["arguments"]
                                        ["parameters"] if p["name"] == pname)
            vols.append(v)
        for pvc_vol in (self.cluster.get(WF_API, "Workflow", self.name, self.ns).get("status")
                        or {}).get("persistentVolumeClaims") or []:
            if any(m["name"] == pvc_vol["name"] for m in
                   tmpl["container"].get("volumeMounts") or []):
                vols.append(pvc_vol)
        return self.step_pod(node_name, tmpl, vols, tmpl["container"])


# ---------------------------------------------------------------- KFP v2 runs


def _blob(v: Any) -> str:
    return json.dumps(v, separators=(",", ":"), sort_keys=True)


def kfp_workflow(ir_path: Path, name: str, namespace: str, params: dict[str, Any]) -> dict:
    """The Argo Workflow the KFP v2 backend submits for a run of the pipeline in ``ir_path``.

    Root-level DAG tasks only (what our pipeline has): for each task a ``<task>-driver``
    (system-container-driver, with the component / task / container / kubernetes-config
    JSON as workflow parameters) and ``<task>`` (system-container-executor), ``depends`` from
    ``dependentTasks``; the root driver gets the run's parameter values as runtime-config.
    """
    ir, platform = [d for d in yaml.safe_load_all(ir_path.read_text()) if d]
    skel = next(d for d in yaml.safe_load_all(
        KFP_GOLDEN.read_text()) if d)
    wf = copy.deepcopy(skel)
    k8s = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    executors = ir["deploymentSpec"]["executors"]
    wparams: list[dict[str, str]] = []
    tasks: list[dict[str, Any]] = []
    for tname, task in ir["root"]["dag"]["tasks"].items():
        comp_name = task["componentRef"]["name"]
        comp = {k: v for k, v in ir["components"][comp_name].items() if k != "dag"}
        label = comp["executorLabel"]
        digest = hashlib.sha256(_blob(comp).encode()).hexdigest()
        wparams.append({"name": f"components-{digest}", "value": _blob(comp)})
        wparams.append({"name": f"implementations-{digest}",
                        "value": _blob(executors[label]["container"])})
        driver_args = [
            {"name": "component", "value": f"{{{{workflow.parameters.components-{digest}}}}}"},
            {"name": "task", "value": _blob(task)},
            {"name": "container",
             "value": f"{{{{workflow.parameters.implementations-{digest}}}}}"},
            {"name": "task-name", "value": tname},
            {"name": "parent-dag-id", "value": "{{inputs.parameters.parent-dag-id}}"}]
        if label in k8s:
            wparams.append({"name": f"kubernetes-{comp_name}", "value": _blob(k8s[label])})
            driver_args.append({"name": "kubernetes-config",
                                "value": f"{{{{workflow.parameters.kubernetes-{comp_name}}}}}"})
        deps = " && ".join(f"{d}.Succeeded" for d in task.get("dependentTasks") or [])
        drv = {"name": f"{tname}-driver", "template": "system-container-driver",
               "arguments": {"parameters": driver_args}}
        if deps:
            drv["depends"] = deps
        tasks.append(drv)
        tasks.append({"name": tname, "template": "system-container-executor",
                      "depends": f"{tname}-driver.Succeeded", "arguments": {"parameters": [
                          {"name": "pod-spec-patch",
                           "value": f"{{{{tasks.{tname}-driver.outputs.parameters."
                                    "pod-spec-patch}}"},
                          {"default": "false", "name": "cached-decision",
                           "value": f"{{{{tasks.{tname}-driver.outputs.parameters."
                                    "cached-decision}}"}]}})
    root_comp = {"dag": ir["root"]["dag"], "inputDefinitions": ir["root"]["inputDefinitions"]}
    wparams.append({"name": "components-root", "value": _blob(root_comp)})
    wf["spec"]["arguments"] = {"parameters": wparams}
    for t in wf["spec"]["templates"]:
        if t["name"] == "root":
            t["dag"]["tasks"] = tasks
        if t["name"] == "entrypoint":
            for task in t["dag"]["tasks"]:
                for p in (task.get("arguments") or {}).get("parameters") or []:
                    if p["name"] == "runtime-config":
                        p["value"] = _blob({"parameterValues": params})
        for c in [t.get("container") or {}]:
            args = c.get("args") or []
            for i, a in enumerate(args[:-1]):
                if a == "--pipeline_name":
                    args[i + 1] = ir["pipelineInfo"]["name"]
    wf["metadata"] = {"name": name, "namespace": namespace, "labels": {
        "pipeline/runid": hashlib.md5(name.encode()).hexdigest(),
        "workflows.argoproj.io/completed": "false"}}
    wf.pop("status", None)
    return wf


class KfpRun(ArgoRun):
    """Argo running a KFP v2 Workflow: drivers, the executor DAG and its launcher pod."""

    def __init__(self, cluster: Cluster, wf: dict[str, Any], ir_path: Path,
                 params: dict[str, Any]) -> None:
        super().__init__(cluster, wf)
        self.ir = next(d for d in yaml.safe_load_all(ir_path.read_text()) if d)
        self.params = params
        self.impl = next(t for t in wf["spec"]["templates"]
                         if t["name"] == "system-container-impl")

    def start(self) -> None:
        super().start()
        self.node(f"{self.name}.root-driver", "root-driver", "Pod", "Succeeded",
                  "system-dag-driver", parent=self.name)
        self.node(f"{self.name}.root", "root", "DAG", "Running", "root", parent=self.name)
        self._push()

    def kfp_step(self, task: str, phase: str, host: str | None = None,
                 create_pod: bool = False, claim_name: str | None = None) -> dict | None:
        """Driver done, executor DAG node ``task`` and its pod node to ``phase``."""
        root = f"{self.name}.root"
        self.node(f"{root}.{task}-driver", f"{task}-driver", "Pod", "Succeeded",
                  "system-container-driver", parent=root)
        self.node(f"{root}.{task}", task, "DAG", phase, "system-container-executor",
                  parent=root)
        extra = {"hostNodeName": host} if host else {}
        self.node(f"{root}.{task}.executor", "executor", "Pod", phase, "system-container-impl",
                  parent=f"{root}.{task}", **extra)
        self._push()
        if not create_pod:
            return None
        # the driver's pod-spec-patch: the launcher command with the executor input, and the
        # claim of kubernetes.mount_pvc (named by the run's parameter) as a volume
        task_ir = self.ir["root"]["dag"]["tasks"][task]
        inputs = {}
        for pname, spec in ((task_ir.get("inputs") or {}).get("parameters") or {}).items():
            if "runtimeValue" in spec:
                inputs[pname] = spec["runtimeValue"]["constant"]
            elif "componentInputParameter" in spec:
                inputs[pname] = self.params[spec["componentInputParameter"]]
            else:
                inputs[pname] = "r1"
        executor_input = {"inputs": {"parameterValues": inputs},
                          "outputs": {"outputFile": "/tmp/kfp_outputs/output_metadata.json"}}
        main = {"image": "python:3.11-slim",
                "command": ["/kfp-launcher/launch", "--pipeline_name",
                            self.ir["pipelineInfo"]["name"], "--run_id",
                            self.wf["metadata"]["uid"], "--executor_input",
                            json.dumps(executor_input), "--", "python3", "-m",
                            "kfp.dsl.executor_main"],
                "volumeMounts": [{"name": "kfp-launcher", "mountPath": "/kfp-launcher"}]}
        vols = [{"name": v["name"], "emptyDir": {}} for v in self.impl.get("volumes") or []]
        if claim_name:
            vols.append({"name": claim_name, "persistentVolumeClaim": {"claimName": claim_name}})
            main["volumeMounts"].append({"name": claim_name, "mountPath": "/data"})
        return self.step_pod(f"{root}.{task}.executor", self.impl, vols, main)
