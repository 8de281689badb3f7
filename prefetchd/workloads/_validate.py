"""What the API server or a training operator refuses in work's objects, named before it is planned.

Who calls this: :func:`prefetchd.workloads._podspec.group` (every pod template of every kind:
:func:`check_pod_template`), :func:`prefetchd.workloads._common.start` (the object's own
labels: :func:`check_labels`), the job adapters (:func:`check_replica_types`) and the TrainJob
adapter (:func:`check_trainjob`: its own fields, its trainer's and its runtime patches' pod and
container fields, which never reach a pod template when misspelt).

Why: work the cluster would refuse never runs, so warming for it only fills caches; planned
silently it also hides the user's mistake (blind job round 50: a memory limit of ``64GB``,
two containers named alike, a Kueue queue name with a ``/``, ``nodeSelecter`` for
``nodeSelector`` (strict decoding refuses it, and the node constraint meant was lost), an
MPIJob's ``Master`` replicas). Each check raises WorkloadError naming the field, as the
adapters' own checks do. An unknown field is refused only when it is a near miss of a known
one (a typo): a field of a newer API than this list knows passes.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from typing import Any

from prefetchd.k8s.placement import parse_quantity
from prefetchd.workloads._model import WorkloadError

POD_SPEC_FIELDS = frozenset({
    "activeDeadlineSeconds", "affinity", "automountServiceAccountToken", "containers",
    "dnsConfig", "dnsPolicy", "enableServiceLinks", "ephemeralContainers", "hostAliases",
    "hostIPC", "hostNetwork", "hostPID", "hostUsers", "hostname", "hostnameOverride",
    "imagePullSecrets", "initContainers", "nodeName", "nodeSelector", "os", "overhead",
    "preemptionPolicy", "priority", "priorityClassName", "readinessGates", "resourceClaims",
    "resources", "restartPolicy", "runtimeClassName", "schedulerName", "schedulingGates",
    "securityContext", "serviceAccount", "serviceAccountName", "setHostnameAsFQDN",
    "shareProcessNamespace", "subdomain", "terminationGracePeriodSeconds", "tolerations",
    "topologySpreadConstraints", "volumes", "workloadRef"})
CONTAINER_FIELDS = frozenset({
    "args", "command", "env", "envFrom", "image", "imagePullPolicy", "lifecycle",
    "livenessProbe", "name", "ports", "readinessProbe", "resizePolicy", "resources",
    "restartPolicy", "restartPolicyRules", "securityContext", "startupProbe", "stdin",
    "stdinOnce", "terminationMessagePath", "terminationMessagePolicy", "tty", "volumeDevices",
    "volumeMounts", "workingDir"})
VOLUME_MOUNT_FIELDS = frozenset({"mountPath", "mountPropagation", "name", "readOnly",
                                 "recursiveReadOnly", "subPath", "subPathExpr"})

# label keys and values as the API server checks them (a qualified name; a value of at most
# 63 characters, alphanumeric at both ends)
_NAME = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_LABEL_VALUE = re.compile(rf"(?:{_NAME})?")
_LABEL_KEY = re.compile(rf"(?:[a-z0-9](?:[-a-z0-9.]{{0,251}}[a-z0-9])?/)?{_NAME}")


def _near_miss(field: str, known: Iterable[str]) -> str | None:
    """The known field *field* is a typo of, if any."""
    if field in known:
        return None
    close = difflib.get_close_matches(field, list(known), n=1, cutoff=0.8)
    if not close:
        lowered = {k.lower(): k for k in known}
        return lowered.get(field.lower())
    return close[0]


def _fields(obj: Mapping[str, Any], known: frozenset[str], where: str) -> None:
    for field in obj:
        meant = _near_miss(str(field), known)
        if meant is not None:
            raise WorkloadError(f"{where}.{field}: unknown field (did you mean {meant}? the API "
                                "server refuses it, or drops it and what it says)")


def _templated(value: Any) -> bool:
    """A value a controller fills in before the API server sees it (a Katib trial's
    ``${trialParameters.x}``, an Argo ``{{inputs.parameters.x}}``): not checked here."""
    return isinstance(value, str) and any(m in value for m in ("${", "{{", "$("))


def check_labels(labels: Mapping[str, Any], where: str) -> None:
    """Label keys and values the API server takes (strings; a value of at most 63
    characters of letters, digits, ``-_.``, alphanumeric at both ends)."""
    for key, value in labels.items():
        if _templated(key) or _templated(value):
            continue
        if not isinstance(key, str) or not _LABEL_KEY.fullmatch(key):
            raise WorkloadError(f"{where}: label key {key!r} is not valid")
        if not isinstance(value, str):
            raise WorkloadError(f"{where}.{key}: label value {value!r} is not a string "
                                f"(quote it: \"{value}\")")
        if not _LABEL_VALUE.fullmatch(value):
            raise WorkloadError(f"{where}.{key}: label value {value!r} is not valid (at most 63 "
                                "letters, digits, '-', '_' or '.', alphanumeric at both ends)")


def check_pod_template(tmpl: Mapping[str, Any], spec: Mapping[str, Any], where: str) -> None:
    """A pod template's fields, container names, resource quantities and labels as the API
    server checks them (*where* names the template in errors)."""
    meta = tmpl.get("metadata")
    if isinstance(meta, Mapping) and isinstance(meta.get("labels"), Mapping):
        check_labels(meta["labels"], f"{where}.metadata.labels")
    _fields(spec, POD_SPEC_FIELDS, f"{where}.spec")
    check_volumes(spec, f"{where}.spec")
    seen: set[str] = set()
    for kind in ("initContainers", "containers"):
        for c in spec.get(kind) or []:
            if not isinstance(c, Mapping):
                continue
            name = str(c.get("name") or "")
            at = f"{where}.spec.{kind}[{name}]"
            if name in seen:
                raise WorkloadError(f"{at}: a second container named {name!r} (container "
                                    "names must be unique in a pod)")
            seen.add(name)
            _fields(c, CONTAINER_FIELDS, at)
            _check_container_values(c, at)
            for m in c.get("volumeMounts") or []:
                if isinstance(m, Mapping):
                    _fields(m, VOLUME_MOUNT_FIELDS, f"{at}.volumeMounts[{m.get('name')}]")
                    _check_sub_path(m, f"{at}.volumeMounts[{m.get('name')}]")
            res = c.get("resources") if isinstance(c.get("resources"), Mapping) else {}
            for part in ("requests", "limits"):
                for res_name, value in (res.get(part) or {}).items():
                    if _templated(value):
                        continue
                    try:
                        parse_quantity(value)
                    except ValueError:
                        raise WorkloadError(
                            f"{at}.resources.{part}.{res_name}: {value!r} is no quantity "
                            "(e.g. 64Gi, 64G, 500m, 2; the API server refuses it)") from None


_PULL_POLICIES = ("Always", "IfNotPresent", "Never")
_RESTARTS = ("Always", "OnFailure", "Never")  # (a container's own: ContainerRestartRules)
# what an env var's fieldRef may name (metadata.labels whole is a downwardAPI volume's only)
_ENV_FIELDS = re.compile(r"metadata\.(name|namespace|uid)|spec\.(nodeName|serviceAccountName)"
                         r"|status\.(hostIP|hostIPs|podIP|podIPs)"
                         r"|metadata\.(labels|annotations)\['[^']+'\]")
_CONFIG_KEY = re.compile(r"[-._a-zA-Z0-9]+")


def _refused(where: str, what: str) -> WorkloadError:
    return WorkloadError(f"{where}: {what} (the API server refuses the pod)")


def _check_container_values(c: Mapping[str, Any], at: str) -> None:
    """Values of a container the API server refuses (blind job round 59: each was planned
    and warmed): a pull policy or a sidecar's restartPolicy misspelt, an env var without a
    name, a fieldRef no env var may take, a ConfigMap or Secret key no such object holds."""
    policy = c.get("imagePullPolicy")
    if policy is not None and not _templated(policy) and policy not in _PULL_POLICIES:
        raise _refused(f"{at}.imagePullPolicy", f"{policy!r} is not one of "
                       f"{', '.join(_PULL_POLICIES)}")
    restart = c.get("restartPolicy")
    if restart is not None and not _templated(restart) and restart not in _RESTARTS:
        raise _refused(f"{at}.restartPolicy", f"{restart!r} is not one of "
                       f"{', '.join(_RESTARTS)} ('Always' makes an init container a sidecar)")
    for e in c.get("env") or []:
        if not isinstance(e, Mapping):
            continue
        if not e.get("name"):
            raise _refused(f"{at}.env", "an env var without a name")
        src = e.get("valueFrom") if isinstance(e.get("valueFrom"), Mapping) else {}
        field = (src.get("fieldRef") or {}).get("fieldPath") if isinstance(
            src.get("fieldRef"), Mapping) else None
        if isinstance(field, str) and not _templated(field) and not _ENV_FIELDS.fullmatch(field):
            raise _refused(f"{at}.env[{e.get('name')}].valueFrom.fieldRef.fieldPath",
                           f"{field!r} is no field an env var may take (metadata.labels or "
                           "annotations whole only in a downwardAPI volume)")
        for ref in ("configMapKeyRef", "secretKeyRef"):
            key = (src.get(ref) or {}).get("key") if isinstance(src.get(ref), Mapping) else None
            if isinstance(key, str) and not _templated(key) and not _CONFIG_KEY.fullmatch(key):
                raise _refused(f"{at}.env[{e.get('name')}].valueFrom.{ref}.key",
                               f"{key!r} is not a valid key (letters, digits, '-', '_', '.')")


def check_volumes(spec: Mapping[str, Any], where: str) -> None:
    """Volume values the API server refuses (blind job round 59): an image volume's
    pullPolicy misspelt; an item path of a ConfigMap, Secret, downwardAPI or projected
    volume that is absolute or climbs with '..'."""
    for v in spec.get("volumes") or []:
        if not isinstance(v, Mapping):
            continue
        at = f"{where}.volumes[{v.get('name')}]"
        image = v.get("image") if isinstance(v.get("image"), Mapping) else {}
        policy = image.get("pullPolicy")
        if policy is not None and not _templated(policy) and policy not in _PULL_POLICIES:
            raise _refused(f"{at}.image.pullPolicy", f"{policy!r} is not one of "
                           f"{', '.join(_PULL_POLICIES)}")
        sources = [v.get(k) for k in ("configMap", "secret", "downwardAPI")]
        projected = v.get("projected") if isinstance(v.get("projected"), Mapping) else {}
        sources += [src.get(k) for src in projected.get("sources") or []
                    if isinstance(src, Mapping) for k in ("configMap", "secret", "downwardAPI")]
        for src in sources:
            for item in (src.get("items") or []) if isinstance(src, Mapping) else []:
                path = item.get("path") if isinstance(item, Mapping) else None
                if isinstance(path, str) and not _templated(path) and (
                        path.startswith("/") or ".." in path.split("/")):
                    raise _refused(f"{at} item {path!r}", "an item path must be relative, "
                                   "without '..'")


def _check_sub_path(mount: Mapping[str, Any], where: str) -> None:
    """``subPath``/``subPathExpr`` as the API server checks them (blind job round 56: a
    ``..`` climbed out of the subPath and its parent was warmed): relative, no ``..``
    element, not both."""
    if mount.get("subPath") and mount.get("subPathExpr"):
        raise WorkloadError(f"{where}: subPath and subPathExpr are mutually exclusive (the API "
                            "server refuses the pod)")
    for key in ("subPath", "subPathExpr"):
        value = mount.get(key)
        # (a subPathExpr's $(VAR) is its own, checked with it by the API server)
        if not isinstance(value, str) or not value or _templated(
                value.replace("$(", "") if key == "subPathExpr" else value):
            continue
        if value.startswith("/"):
            raise WorkloadError(f"{where}.{key}: {value!r} must be a relative path (the API "
                                "server refuses the pod)")
        if ".." in value.split("/"):
            raise WorkloadError(f"{where}.{key}: {value!r} must not contain '..' (the API "
                                "server refuses the pod)")


def check_replica_types(replicas: Mapping[str, Any], allowed: Iterable[str], where: str) -> None:
    """Replica types the job's operator knows (the training operator refuses an MPIJob's
    ``Master``: its replica types are Launcher and Worker)."""
    allowed = tuple(allowed)
    for rtype in replicas:
        if rtype not in allowed:
            raise WorkloadError(f"{where}.{rtype}: not a replica type of this kind (one of "
                                f"{', '.join(allowed)}; the operator refuses the job)")


# A TrainJob's own fields (trainer.kubeflow.org/v1alpha1, the CRD's schema; the older
# podTemplateOverrides / podSpecOverrides and their spec's labels/annotations too) and the
# restricted pod fields a runtime patch or override carries (blind job round 61: a typo in
# any of them was dropped without a word, and the API server's strict decoding refuses it)
TRAINJOB_FIELDS = frozenset({"activeDeadlineSeconds", "initializer", "managedBy",
                             "podSpecOverrides", "podTemplateOverrides", "runtimePatches",
                             "runtimeRef", "suspend", "trainer", "labels", "annotations"})
TRAINER_FIELDS = frozenset({"args", "command", "env", "image", "numNodes", "numProcPerNode",
                            "resourcesPerNode"})
_INITIALIZER_STEP = frozenset({"env", "secretRef", "storageUri"})
_META = frozenset({"annotations", "finalizers", "labels", "name", "namespace"})
PATCH_POD_FIELDS = frozenset({"affinity", "containers", "imagePullSecrets", "initContainers",
                              "nodeSelector", "schedulingGates", "securityContext",
                              "serviceAccountName", "terminationGracePeriodSeconds",
                              "tolerations", "volumes"})
PATCH_CONTAINER_FIELDS = frozenset({"env", "name", "securityContext", "volumeMounts"})


def _mappings(value: Any) -> list[tuple[int, Mapping[str, Any]]]:
    return [(i, v) for i, v in enumerate(value if isinstance(value, list) else [])
            if isinstance(v, Mapping)]


def _sub(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = obj.get(key)
    return value if isinstance(value, Mapping) else {}


def check_patch_pod(spec: Mapping[str, Any], where: str) -> None:
    """A runtime patch's (or override's) restricted pod spec: a near miss of a pod's or a
    container's field is refused (an exact pod field the patch API lacks is left to it)."""
    _fields(spec, POD_SPEC_FIELDS | PATCH_POD_FIELDS, where)
    for kind in ("initContainers", "containers"):
        for _, c in _mappings(spec.get(kind)):
            at = f"{where}.{kind}[{c.get('name')}]"
            _fields(c, CONTAINER_FIELDS | PATCH_CONTAINER_FIELDS, at)
            for _, m in _mappings(c.get("volumeMounts")):
                _fields(m, VOLUME_MOUNT_FIELDS, f"{at}.volumeMounts[{m.get('name')}]")


def check_trainjob(spec: Mapping[str, Any]) -> None:
    """A TrainJob's spec, its trainer, initializers and runtime patches: a field that is a
    near miss of one the TrainJob API names is refused, as a pod's are."""
    _fields(spec, TRAINJOB_FIELDS, "spec")
    _fields(_sub(spec, "trainer"), TRAINER_FIELDS, "spec.trainer")
    init = _sub(spec, "initializer")
    _fields(init, frozenset({"dataset", "model"}), "spec.initializer")
    for step in ("dataset", "model"):
        _fields(_sub(init, step), _INITIALIZER_STEP, f"spec.initializer.{step}")
    for i, p in _mappings(spec.get("runtimePatches")):
        at = f"spec.runtimePatches[{i}]"
        _fields(p, frozenset({"manager", "time", "trainingRuntimeSpec"}), at)
        at += ".trainingRuntimeSpec"
        rts = _sub(p, "trainingRuntimeSpec")
        _fields(rts, frozenset({"template"}), at)
        at += ".template"
        tmpl = _sub(rts, "template")
        _fields(tmpl, frozenset({"metadata", "spec"}), at)
        _fields(_sub(tmpl, "metadata"), _META, f"{at}.metadata")
        js = _sub(tmpl, "spec")
        _fields(js, frozenset({"replicatedJobs"}), f"{at}.spec")
        for j, rj in _mappings(js.get("replicatedJobs")):
            rat = f"{at}.spec.replicatedJobs[{j}]"
            _fields(rj, frozenset({"name", "template"}), rat)
            jt = _sub(rj, "template")
            _fields(jt, frozenset({"metadata", "spec"}), f"{rat}.template")
            _fields(_sub(jt, "metadata"), _META, f"{rat}.template.metadata")
            jspec = _sub(jt, "spec")
            _fields(jspec, frozenset({"template"}), f"{rat}.template.spec")
            pt = _sub(jspec, "template")
            pat = f"{rat}.template.spec.template"
            _fields(pt, frozenset({"metadata", "spec"}), pat)
            _fields(_sub(pt, "metadata"), _META, f"{pat}.metadata")
            check_patch_pod(_sub(pt, "spec"), f"{pat}.spec")
    for i, ov in _mappings(spec.get("podTemplateOverrides")):
        at = f"spec.podTemplateOverrides[{i}]"
        _fields(ov, frozenset({"targetJobs", "metadata", "spec"}), at)
        _fields(_sub(ov, "metadata"), _META, f"{at}.metadata")
        check_patch_pod(_sub(ov, "spec"), f"{at}.spec")
    for i, ov in _mappings(spec.get("podSpecOverrides")):
        # the earlier flat form: pod fields beside targetJobs
        check_patch_pod({k: v for k, v in ov.items() if k != "targetJobs"},
                        f"spec.podSpecOverrides[{i}]")
