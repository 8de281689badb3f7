"""Which datasets a pod reads, from its spec and the PVC -> PV -> volumeAttributes chain.

Who calls this: the webhook (to steer a pod being created) and the agent (pending pods: the
last chance to warm). A dataset is an ``s3://bucket/prefix`` location:

* a volume from a PVC bound to a PV of the fusecache CSI driver (``spec.csi.driver``), whose
  ``volumeAttributes`` carry ``bucket`` and ``prefix`` (keys of csi/volumes.py); a path under
  the volume's mount named in the container's command/args narrows it (``/data/train`` with
  the volume mounted at ``/data`` -> ``s3://bucket/prefix/train``), honouring ``subPath``
  and ``subPathExpr``;
  paths are normalised and named exactly as the workflow analysis names them
  (prefetchd/pipeline/_pvc.py), so a step's dataset has one name for agent and webhook;
* an inline CSI volume of the driver (same attributes);
* a generic ephemeral volume (``ephemeral.volumeClaimTemplate``) of a fusecache
  StorageClass: the claim made for the pod once bound, else the PV the class will give it
  (:func:`ephemeral_dataset`);
* ``s3://`` / ``s3a://`` URIs in command, args (``$(VAR)`` expanded from the container's env,
  as the kubelet does) and env values, except those the workflow analysis's rules
  (prefetchd/pipeline/_uri.py: copy-tool operand order, flag names such as
  ``--out``/``--output``/``--save-to``, env names such as ``OUTPUT_URI``) say are written, or
  may be either (``--checkpoint-dir``, ``--model_dir``): an output location is no dataset to
  warm or steer to, and a pipeline's plan does not warm the unknown ones either.

:func:`claim_dataset` (claim -> :class:`VolumeDataset`, carrying the PV's attributes and
secret reference) is also what the agent uses for the claims of workflow steps.

Lookups go through a :class:`ClusterView`; :class:`ApiClusterView` reads the API with a small
TTL cache (bounded), so a burst of pod creations does not become a burst of GETs.
"""

from __future__ import annotations

import logging
import posixpath
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from prefetchd.k8s import placement, rest
from prefetchd.pipeline import _code, _pieces, _pvc, _shell, _uri

log = logging.getLogger(__name__)
# an env entry's mark (on copies made for reading, never sent to the API): it came with
# envFrom, a ConfigMap's every key, so it serves $(VAR) but names no dataset by itself
EXPAND_ONLY = "x-prefetchd-expand-only"
# a container's mark (on copies made for reading): [[path, text], ...] of the files of
# ConfigMap volumes it names (``--config /etc/train/config.yaml``), read with its words
CONFIG_FILES = "x-prefetchd-config-files"
# a container's mark (on copies made for reading): the ConfigMaps its ``envFrom`` names that
# were found (their keys are its env entries now: a key they lack is set by none)
GIVEN_CONFIGMAPS = "x-prefetchd-given-configmaps"
# an env entry's mark (on copies made for reading): the ConfigMap its configMapKeyRef names,
# found without that key (and not optional): the kubelet does not start the container
ABSENT_KEY = "x-prefetchd-absent-key"
DRIVER_NAME = "csi.fusecache.io"  # csi/__init__.py DRIVER_NAME; not imported: no grpc needed here
POD_CLAIM = "<pod>-"  # the claim of a pod's ephemeral volume, "<pod name>-<volume>"
MAX_DATASETS = 16  # per pod: bounds webhook work and the size of the affinity it adds


class ClusterView(Protocol):
    """The API reads dataset resolution and placement need."""

    def pvc(self, namespace: str, name: str) -> Mapping[str, Any] | None: ...

    def pv(self, name: str) -> Mapping[str, Any] | None: ...

    def storage_class(self, name: str) -> Mapping[str, Any] | None: ...

    def nodes(self) -> list[placement.NodeInfo]: ...


class ObjectsView:
    """PVCs and PVs given as objects (files a user passes to ``plan``), looked up as
    ``ApiClusterView`` looks them up in the API (no nodes)."""

    def __init__(self, objects: Iterable[Mapping[str, Any]]) -> None:
        self._pvc: dict[tuple[str, str], Mapping[str, Any]] = {}
        self._pv: dict[str, Mapping[str, Any]] = {}
        self._classes: dict[str, Mapping[str, Any]] = {}
        for o in objects:
            meta = o.get("metadata") or {}
            if o.get("kind") == "PersistentVolumeClaim":
                self._pvc[(meta.get("namespace") or "default", meta.get("name", ""))] = o
            elif o.get("kind") == "PersistentVolume":
                self._pv[meta.get("name", "")] = o
            elif o.get("kind") == "StorageClass":
                self._classes[meta.get("name", "")] = o
        for (namespace, name), pvc in list(self._pvc.items()):
            made = provisioned_pv(pvc, namespace, name, self._classes)
            if made is not None:
                pv_name = made["metadata"]["name"]
                self._pv.setdefault(pv_name, made)
                self._pvc[(namespace, name)] = {**pvc, "spec": {**(pvc.get("spec") or {}),
                                                                "volumeName": pv_name}}
        # a PV reserved for a claim by its claimRef: the PV controller binds the claim to it
        # (blind job round 56: reported unresolved)
        for pv_name, pv in self._pv.items():
            ref = (pv.get("spec") or {}).get("claimRef") or {}
            key = (ref.get("namespace") or "default", ref.get("name") or "")
            pvc = self._pvc.get(key)
            if pvc is None or (pvc.get("spec") or {}).get("volumeName"):
                continue
            if ref.get("uid") and (pvc.get("metadata") or {}).get("uid") not in (
                    None, ref["uid"]):
                continue
            self._pvc[key] = {**pvc, "spec": {**(pvc.get("spec") or {}), "volumeName": pv_name}}

    def reserved_for_others(self, namespace: str, name: str) -> list[tuple[str, str]]:
        """(PV, the claim its claimRef reserves it for) of each PV in the files that a claim
        of this name in another namespace, or another claim, holds by claimRef while the
        claim itself names no volume: why a pre-bound PV did not bind it."""
        out = []
        for pv_name, pv in self._pv.items():
            ref = (pv.get("spec") or {}).get("claimRef") or {}
            key = (ref.get("namespace") or "default", ref.get("name") or "")
            if ref.get("name") == name and key != (namespace, name):
                out.append((pv_name, f"{key[0]}/{key[1]}"))
        return out

    def claims_named(self, name: str) -> list[str]:
        """The namespaces holding a claim of this name (for a message on one not found)."""
        return sorted(ns for ns, n in self._pvc if n == name)

    def pvc(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self._pvc.get((namespace, name))

    def pv(self, name: str) -> Mapping[str, Any] | None:
        return self._pv.get(name)

    def storage_class(self, name: str) -> Mapping[str, Any] | None:
        return self._classes.get(name)

    def nodes(self) -> list[placement.NodeInfo]:
        return []

    def claim_locations(self, driver: str = DRIVER_NAME) -> dict[str, str]:
        """Claim name -> the location of the fusecache PV it is bound to, for every claim
        given (one named alike in two namespaces with two locations: neither)."""
        out: dict[str, str | None] = {}
        for (namespace, name) in self._pvc:
            ds = claim_dataset(self, namespace, name, driver)
            if ds is not None:
                out[name] = ds.location if out.get(name, ds.location) == ds.location else None
        return {k: v for k, v in out.items() if v}


def provisioned_pv(pvc: Mapping[str, Any], namespace: str, name: str,
                   classes: Mapping[str, Mapping[str, Any]], driver: str = DRIVER_NAME
                   ) -> dict[str, Any] | None:
    """The PV this driver's provisioner makes for a claim not bound yet, of a StorageClass
    given in the files (its ``bucket``/``prefix``/``prefixPolicy`` parameters, as
    ``csi.volumes.source_for_new_volume`` computes them for CreateVolume); None when the claim
    is bound, of another class or provisioner, or gets a fresh empty prefix
    (``prefixPolicy: volumeName``: nothing to warm). ValueError naming the class when
    CreateVolume would refuse its parameters (a typo such as ``regoin``)."""
    from csi import volumes  # (the controller's own rule: the plan names what it will name)
    from csi.rpc import CsiError

    spec = pvc.get("spec") or {}
    cls = classes.get(str(spec.get("storageClassName") or ""))
    if spec.get("volumeName") or cls is None or cls.get("provisioner") != driver:
        return None
    params = {str(k): str(v) for k, v in (cls.get("parameters") or {}).items()}
    if params.get("prefixPolicy") == "volumeName":
        return None
    try:
        source = volumes.source_for_new_volume(
            f"pvc-{namespace}-{name}",
            {**params, volumes.PVC_NAME_KEY: name, volumes.PVC_NAMESPACE_KEY: namespace})
    except CsiError as e:  # a class CreateVolume refuses: the claim would stay Pending
        raise ValueError(f"StorageClass {spec.get('storageClassName')} of claim "
                         f"{namespace}/{name}: {e.message}") from None
    return {"apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": f"pvc-{namespace}-{name} (provisioned)"},
            "spec": {"csi": {"driver": driver, "volumeHandle": f"{namespace}/{name}",
                             "volumeAttributes": source.to_context()},
                     "claimRef": {"namespace": namespace, "name": name}}}


class TtlCache:
    """A small LRU whose entries expire: fresh enough for placement, bounded in size."""

    def __init__(self, ttl: float, size: int, clock: Callable[[], float] = time.monotonic):
        self.ttl, self.size, self.clock = ttl, size, clock
        self._d: OrderedDict[Any, tuple[float, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Any, load: Callable[[], Any]) -> Any:
        now = self.clock()
        with self._lock:
            hit = self._d.get(key)
            if hit and now - hit[0] < self.ttl:
                self._d.move_to_end(key)
                return hit[1]
        value = load()
        self.put(key, value, now)
        return value

    def put(self, key: Any, value: Any, now: float | None = None) -> None:
        """Store ``value`` unless what is cached is a newer version of the same object.

        A GET that raced with a watch event must not put back the older object the event
        replaced (objects compare by ``metadata.resourceVersion`` when both are numbers, as
        etcd's are).
        """
        with self._lock:
            old = self._d.get(key)
            if old is not None and _rv(old[1]) > _rv(value) >= 0:
                return
            self._d[key] = (self.clock() if now is None else now, value)
            self._d.move_to_end(key)
            while len(self._d) > self.size:
                self._d.popitem(last=False)


def _rv(obj: Any) -> int:
    """An object's resourceVersion as a number, -1 when absent or not a number."""
    rv = ((obj or {}).get("metadata") or {}).get("resourceVersion") if isinstance(
        obj, Mapping) else None
    return int(rv) if isinstance(rv, str) and rv.isdigit() else -1


class ApiClusterView:
    """ClusterView over a ``kubernetes.client.ApiClient`` (raw JSON, cached for ``ttl`` s)."""

    def __init__(self, api_client: Any, ttl: float = 10.0, size: int = 4096) -> None:
        self.api = api_client
        self._cache = TtlCache(ttl, size)

    def _get_json(self, path: str, query: list[tuple[str, str]] | None = None
                  ) -> Mapping[str, Any] | None:
        reply = rest.request(self.api, "GET", path, query=query, timeout=(5.0, 10.0))
        if reply.status == 404:
            return None
        if reply.status != 200:
            raise RuntimeError(f"GET {path}: HTTP {reply.status}")
        return reply.json()

    def get_json(self, path: str) -> Mapping[str, Any] | None:
        """One object by API path (not cached), None if it does not exist."""
        return self._get_json(path)

    def pods(self, namespace: str, selector: str) -> list[Mapping[str, Any]]:
        """The pods of ``namespace`` matching a label selector (not cached)."""
        doc = self._get_json(f"/api/v1/namespaces/{namespace}/pods",
                             [("labelSelector", selector)]) or {}
        return list(doc.get("items") or [])

    def pvc(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self._cache.get(("pvc", namespace, name), lambda: self._get_json(
            f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{name}"))

    def pv(self, name: str) -> Mapping[str, Any] | None:
        return self._cache.get(("pv", name), lambda: self._get_json(
            f"/api/v1/persistentvolumes/{name}"))

    def storage_class(self, name: str) -> Mapping[str, Any] | None:
        return self._cache.get(("sc", name), lambda: self._get_json(
            f"/apis/storage.k8s.io/v1/storageclasses/{name}"))

    def note(self, kind: str, value: Mapping[str, Any] | None, obj: Mapping[str, Any]) -> None:
        """A claim or PV seen on a watch (``value`` None: deleted): it replaces what is cached."""
        meta = obj.get("metadata") or {}
        if kind == "pvc":
            self._cache.put(("pvc", meta.get("namespace") or "", meta.get("name") or ""), value)
        elif kind == "pv":
            self._cache.put(("pv", meta.get("name") or ""), value)

    def nodes(self) -> list[placement.NodeInfo]:
        def load() -> list[placement.NodeInfo]:
            doc = self._get_json("/api/v1/nodes") or {}
            return [placement.NodeInfo.from_node(n) for n in doc.get("items") or []]

        return self._cache.get(("nodes",), load)


@dataclass(frozen=True)
class VolumeDataset:
    """A dataset reached through a volume of our driver, with what the volume says about it.

    ``attributes`` are the PV's (or inline volume's) ``volumeAttributes`` as given (bucket,
    prefix, and e.g. ``endpointUrl``/``region``), ``secret_ref`` its ``nodeStageSecretRef``
    (namespace/name, never the secret itself): what a warm of this dataset may need besides
    the location. ``claim``/``pv`` name where it came from (empty for an inline volume).
    """

    location: str  # s3://bucket/prefix/
    claim: str = ""
    pv: str = ""
    attributes: Mapping[str, str] = field(default_factory=dict)
    secret_ref: Mapping[str, str] | None = None


def csi_dataset(csi: Mapping[str, Any] | None, driver: str = DRIVER_NAME, *, claim: str = "",
                pv: str = "") -> VolumeDataset | None:
    """The dataset of a CSI volume source of our driver (bucket/prefix attributes), else None.

    Its attributes are checked as the node plugin checks them before it mounts
    (``csi.volumes.VolumeSource.from_map``): ValueError naming the volume and what is wrong
    when it would refuse them (blind job round 56: a ``perfix`` typo warmed the bucket's
    root, ``bucket: s3://x`` warmed ``s3://s3://x/``): no pod using it starts."""
    if not csi or csi.get("driver") != driver:
        return None
    from csi import volumes  # (the node plugin's own rule)
    from csi.rpc import CsiError

    attrs = csi.get("volumeAttributes") or {}
    what = (f"PV {pv}" if pv else "inline volume") + (f" of claim {claim}" if claim else "")
    if not isinstance(attrs, Mapping):
        raise ValueError(f"{what}: volumeAttributes is not a mapping")
    try:
        source = volumes.VolumeSource.from_map({str(k): str(v) for k, v in attrs.items()})
    except CsiError as e:
        raise ValueError(f"{what}: {e.message}; the node plugin refuses to mount it") from None
    prefix = source.prefix
    secret = csi.get("nodeStageSecretRef") or csi.get("nodePublishSecretRef")
    return VolumeDataset(f"s3://{source.bucket}/{prefix + '/' if prefix else ''}", claim, pv,
                         {str(k): str(v) for k, v in attrs.items()},
                         dict(secret) if isinstance(secret, Mapping) else None)


def csi_location(csi: Mapping[str, Any] | None, driver: str = DRIVER_NAME) -> str | None:
    """``s3://bucket/prefix/`` of a CSI volume source of our driver, else None."""
    ds = csi_dataset(csi, driver)
    return ds.location if ds else None


MAX_PINNED_CLAIMS = 16  # claims of one pod looked up for their PV's node affinity


def volume_pins(view: ClusterView, namespace: str, claims: Iterable[str]
                ) -> tuple[tuple[placement.Term, ...], ...]:
    """The node affinity of the PVs *claims* (of *namespace*) are bound to: a local PV's
    host, a zonal disk's zone. The scheduler puts the pod only where each matches
    (VolumeBinding), so warming elsewhere is wasted (blind job round 41: a pod pinned to
    ``gpu-a100-07`` by its local PV was warmed on any node). A claim not bound yet, a PV
    with no node affinity, or one the API does not give now, pins nothing (a pin is a
    refinement of placement: without it the warm goes where it went before)."""
    out: list[tuple[placement.Term, ...]] = []
    for claim in list(dict.fromkeys(claims))[:MAX_PINNED_CLAIMS]:
        try:
            pvc = view.pvc(namespace, claim)
            name = ((pvc or {}).get("spec") or {}).get("volumeName")
            pv = view.pv(name) if name else None
        except (RuntimeError, OSError) as exc:
            log.debug("claim %s/%s: its PV not readable now (%s)", namespace, claim, exc)
            continue
        required = (((pv or {}).get("spec") or {}).get("nodeAffinity") or {}).get("required")
        if isinstance(required, Mapping) and (terms := placement.node_selector_terms(required)):
            out.append(terms)
    return tuple(out)


def spec_claims(spec: Mapping[str, Any]) -> list[str]:
    """The claims a PodSpec's volumes name (``persistentVolumeClaim.claimName``)."""
    return [str(v["persistentVolumeClaim"]["claimName"]) for v in spec.get("volumes") or []
            if isinstance(v, Mapping) and isinstance(v.get("persistentVolumeClaim"), Mapping)
            and v["persistentVolumeClaim"].get("claimName")]


def spec_pins(view: ClusterView, namespace: str, spec: Mapping[str, Any]
              ) -> tuple[tuple[placement.Term, ...], ...]:
    """``volume_pins`` of the claims a PodSpec's volumes name: the pod's, a job group's."""
    return volume_pins(view, namespace, spec_claims(spec))


def binding_problem(pvc: Mapping[str, Any] | None, pv: Mapping[str, Any] | None,
                    namespace: str) -> str | None:
    """Why a claim in ``namespace`` that names its PV (``spec.volumeName``) will not bind to
    it, as the PV controller checks it: the PV bound to another claim (its ``claimRef``),
    access modes the PV lacks, or less capacity than asked; None when it binds (or is Bound
    already: the controller decided). Blind job round 50: a ReadWriteMany claim on a
    ReadOnlyMany PV was planned as bound."""
    if pvc is None or pv is None:
        return None
    spec, pv_spec = pvc.get("spec") or {}, pv.get("spec") or {}
    name = (pv.get("metadata") or {}).get("name")
    ref = pv_spec.get("claimRef") or {}
    claim = (pvc.get("metadata") or {}).get("name")
    if ref and (ref.get("name"), ref.get("namespace") or namespace) != (claim, namespace):
        return (f"PV {name} is bound to claim {ref.get('namespace') or namespace}/"
                f"{ref.get('name')}, not this one")
    if (pvc.get("status") or {}).get("phase") == "Bound":
        return None
    uid = (pvc.get("metadata") or {}).get("uid")
    if ref.get("uid") and uid and ref["uid"] != uid or \
            (pv.get("status") or {}).get("phase") == "Released":
        # (blind job round 56: a claim made again over a Released PV was warmed)
        return (f"PV {name} is Released, still held for an earlier claim of this name "
                "(its claimRef's uid): it binds no new claim until that is cleared")
    lacking = sorted(set(spec.get("accessModes") or []) - set(pv_spec.get("accessModes") or []))
    if lacking and pv_spec.get("accessModes"):  # (a PV that states none: not judged here)
        return (f"it asks {', '.join(lacking)}, which PV {name} does not offer "
                f"({', '.join(pv_spec.get('accessModes') or []) or 'no access modes'})")
    asked = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
    has = (pv_spec.get("capacity") or {}).get("storage")
    try:
        if asked is not None and has is not None and \
                placement.parse_quantity(has) < placement.parse_quantity(asked):
            return f"it asks {asked}, more than PV {name} holds ({has})"
    except ValueError:
        return None
    return None


def claim_dataset(view: ClusterView, namespace: str, claim: str,
                  driver: str = DRIVER_NAME) -> VolumeDataset | None:
    """The dataset behind a claim: bound to a PV of our driver, else None (not yet, or never).

    A claim that does not exist, is not bound yet, or is bound to another driver's PV is no
    dataset (the caller may ask again when the claim or its PV changes).
    """
    pvc = view.pvc(namespace, claim)
    pv_name = ((pvc or {}).get("spec") or {}).get("volumeName")
    if not pv_name:
        return None
    pv = view.pv(pv_name)
    if binding_problem(pvc, pv, namespace) is not None:
        return None  # it does not bind (another claim's PV, modes, size): no pod using it starts
    return csi_dataset(((pv or {}).get("spec") or {}).get("csi"), driver, claim=claim,
                       pv=pv_name)


def ephemeral_dataset(view: ClusterView, namespace: str, pod_name: str, volume: str,
                      storage_class: str, driver: str = DRIVER_NAME) -> VolumeDataset | None:
    """The dataset of a generic ephemeral volume (``ephemeral.volumeClaimTemplate``).

    The ephemeral-volume controller makes one claim per pod, ``<pod>-<volume>``: once it is
    bound, its PV's. Before (the webhook sees a pod before its claim exists; a job's pods have
    no names before they are made), the PV a fusecache StorageClass will give it
    (``provisioned_pv``), where the pod's name is known or the class's prefix does not
    depend on it (``prefixPolicy: fixed``). None otherwise; ValueError naming the class when
    CreateVolume would refuse its parameters."""
    claim = f"{pod_name}-{volume}" if pod_name else ""
    if claim:
        found = claim_dataset(view, namespace, claim, driver)
        if found is not None:
            return found
    cls = view.storage_class(storage_class) if storage_class else None
    if cls is None:
        return None
    # (a class CreateVolume would refuse is refused whatever the pod's name)
    pv = provisioned_pv({"spec": {"storageClassName": storage_class}}, namespace,
                        claim or POD_CLAIM + volume, {storage_class: cls}, driver)
    if pv is None or not claim and (cls.get("parameters") or {}).get("prefixPolicy") != "fixed":
        return None
    return csi_dataset(pv["spec"]["csi"], driver, claim=claim)


def ephemeral_class(volume: Mapping[str, Any]) -> str | None:
    """The StorageClass of a generic ephemeral volume ("" for the cluster's default), None for
    any other volume."""
    eph = volume.get("ephemeral")
    if not isinstance(eph, Mapping):
        return None
    template = eph.get("volumeClaimTemplate") or {}
    spec = template.get("spec") if isinstance(template, Mapping) else None
    return str((spec if isinstance(spec, Mapping) else {}).get("storageClassName") or "")


def _volume_locations(
    pod: Mapping[str, Any], view: ClusterView, driver: str
) -> dict[str, str]:
    """Volume name -> dataset location for the pod's fusecache volumes."""
    spec = pod.get("spec") or {}
    meta = pod.get("metadata") or {}
    namespace = meta.get("namespace") or "default"
    out: dict[str, str] = {}
    for vol in spec.get("volumes") or []:
        name = vol.get("name", "")
        loc = csi_location(vol.get("csi"), driver)
        claim = (vol.get("persistentVolumeClaim") or {}).get("claimName")
        eph = ephemeral_class(vol)
        if loc is None and claim:
            found = claim_dataset(view, namespace, claim, driver)
            loc = found.location if found else None
        elif loc is None and eph is not None:
            try:
                found = ephemeral_dataset(view, namespace, str(meta.get("name") or ""), name,
                                          eph, driver)
            except ValueError as e:  # a class CreateVolume refuses: the claim stays Pending
                log.warning("pod %s/%s: volume %s: %s", namespace, meta.get("name"), name, e)
                found = None
            loc = found.location if found else None
        if loc:
            out[name] = loc
    return out


REDIRECTS = (">", ">>", "1>", "2>", "&>")  # the word after a shell redirection is written
_TEMPLATE_VALUE = re.compile(r"\$\{(?:trialParameters|trialSpec)\.[^}]*\}")
# A path inside a word: --root=/data/a,/data/b, open('/data/x'), list=[/data/a]. Not at
# blanks: a word with blanks is a quoted string (an echo's message) unless quotes inside it
# delimit the path; not at an `=` inside a path (a Hive partition, /mnt/clicks/dt=2026-12-01/:
# only an `=` before a `/` starts one; blind job round 32).
_PATH_SPLIT = re.compile(r"[,:;\"'\[\]]+|=+(?=/)")
# a part of a path only the run fills: a shell variable (``$r1`` of a ``while read``, ``${f}``)
RUN_TIME_PART = re.compile(r"\$[A-Za-z_{]")


# $(NAME) as the kubelet expands it, ${NAME} and $NAME as a shell script does
def _code_arg(argv: list[str], i: int) -> bool:
    """Whether argv[i] is a Python program: the argument of ``python -c``; never the script
    of ``bash -c`` / ``sh -lc`` (its own ``python -c`` programs are found among its words,
    and a word such as ``--cohort-def`` in it is no ``def``); else by its text."""
    if _code.is_python_c(argv, i):
        return True
    k = i - 2 - (i >= 1 and argv[i - 1] == "--")  # bash -lc -- SCRIPT
    if k >= 0 and _shell.runs_script(argv, k):
        return False
    return _code.is_program(argv[i]) and not _uri.python_heredocs(argv[i])


def _program_words(code: str, env: list[str],
                   values: Mapping[str, str] | None = None) -> list[tuple[str, str, str]]:
    """(location, "code", direction) of a Python program's reads and writes, with those it
    builds from the container's env vars (*values*: ``f"{os.environ['ROOT']}/x.csv"``). A
    Katib trial's ``${trialParameters.x}`` in it stands as a name while it is read (so the
    program parses) and comes back in what is found, for the trial's values to fill in."""
    marks: dict[str, str] = {}

    def mark(m: re.Match[str]) -> str:
        return marks.setdefault(m.group(0), f"__katib_{len(marks)}__")

    text = _TEMPLATE_VALUE.sub(mark, code)
    back = {v: k for k, v in marks.items()}

    def restore(found: str) -> str:
        for name, value in back.items():
            found = found.replace(name, value)
        return found

    found = [*_code.program_locations(text, env), *_code.program_paths(text)]
    for pieces, d in _code.env_uses(text)[0] if values else ():
        known = {n: values[n[len(_code.ENV):]] for n in _pieces.needs(pieces)
                 if n.startswith(_code.ENV) and n[len(_code.ENV):] in values}
        for made in (_pieces.render_all(pieces, known) or []) if d != "check" else []:
            # (a value only the pod knows, ${trialParameters.fold} of a Katib trial's env:
            # a run-time location, its place known)
            found += [(u, d) for u in _uri.find_uris(made) or _uri.run_time_locations(made)]
            if made.startswith("/") and "{" not in made:
                found.append((made, d))  # a file under a mounted volume
    return [(restore(u), "code", d) for u, d in found]


def container_words(container: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(word, origin, direction) for every word of a container's command/args (``$(VAR)``
    expanded as the kubelet does, shell strings split, a ``python -c`` program read as
    Python) and of its literal env values.

    Direction is "read", "write" or "unknown", by the workflow analysis's rules
    (prefetchd/pipeline/_uri.py: copy-tool operands, flag and env names); a word nothing
    says anything about is read. A ``key=value`` word (Hydra / torchtune style overrides such
    as ``output_dir=/workspace/output``) also yields its value, directed by the key. The pod
    path here and the training-job adapters (prefetchd/workloads/_podspec.py) both read
    containers through this, so the two name the same datasets.
    """
    argv = _uri.kube_expand([str(a) for a in [*(container.get("command") or []),
                                              *(container.get("args") or [])]],
                            container.get("env"))
    argv = _uri.with_s3_remotes(argv, _uri.rclone_s3_remotes(_uri.kube_env(
        container.get("env"))))  # rclone copy hydro:bucket/x, RCLONE_CONFIG_HYDRO_TYPE=s3
    out: list[tuple[str, str, str]] = []
    env = [str(e.get("name")) for e in container.get("env") or [] if isinstance(e, Mapping)]
    values = _uri.kube_env(container.get("env"))
    programs = [_code_arg(argv, i) for i in range(len(argv))]
    codes: list[str] = []
    for i, (a, program) in enumerate(zip(argv, programs, strict=True)):
        # python -c "..." ARGS (its sys.argv), or python - <<'PY' ... PY in a script: the
        # program's own use of what it names
        if program and _code.is_python_c(argv, i):
            a = _code.with_argv(a, argv[i + 1:])
        codes += _uri.python_heredocs(a) or ([a] if program else [])
    tokens = _uri.tokenize(["__code__" if program else a
                            for a, program in zip(argv, programs, strict=True)],
                           _uri.shell_env(container.get("env")))
    directions = _uri.classify_tokens(tokens)
    _last_path_operand(tokens, directions)
    elsewhere = _uri.handed_on(tokens)  # a RayJob submitter's entrypoint: the cluster's reads
    # a script's own python -c "...": read as Python, its text no words of the script
    inline = {j for j in range(len(tokens)) if _code.is_python_c(tokens, j)
              and tokens[j] != "__code__" and j not in elsewhere}
    codes += [tokens[j] for j in sorted(inline)]
    for code in codes:
        out += _program_words(code, env, values)
    for i, t in enumerate(tokens):
        if i in elsewhere or i in inline:
            continue
        d = "write" if i and tokens[i - 1] in REDIRECTS else directions.get(i) or "read"
        if "=" in t and not t.startswith("-"):
            key, value = t.split("=", 1)
            said = _uri.key_direction(key.lstrip("+"))
            d = said if said in ("write", "unknown") else d
            out.append((value, "arg", d))
        out.append((t, "arg", d))
    views = [(tokens, directions)]  # command lines the env vars are used in
    spelled = _uri.spelled_out_env(container)
    for path, text in container.get(CONFIG_FILES) or []:
        out += config_file_words(str(path), str(text), container)
        if str(path).endswith(".py"):  # a launcher it runs from a ConfigMap: a program too
            codes.append(_code.with_options(str(text), _script_args(argv, str(path))))
        elif (script := _as_script(str(path), str(text), container)) is not None:
            # bash /opt/train.sh from a ConfigMap: its use of the env vars is the pod's
            # (a root it spells out, "${DATA_ROOT}/x.parquet"; a destination, sync . "$OUT")
            spelled |= _uri.spelled_out_env(script)
            s_tokens = _uri.tokenize([str(a) for a in script["args"]],
                                     _uri.shell_env(container.get("env")))
            views.append((s_tokens, _uri.classify_tokens(s_tokens)))
    # env vars the programs use: those they only build locations from are no reads of
    # their own; those they use as they are (os.environ["CALENDAR"]) are, even when they
    # came with envFrom (which otherwise only serve $(VAR) and ${VAR})
    built_only: set[str] = set()
    used: set[str] = set()
    handed: dict[str, str] = {}  # env var -> the way a command line the program runs says
    for code in codes:
        built, direct = _code.env_uses(code)
        used |= direct
        handed.update(_code.env_directions(code))
        built_only |= {n[len(_code.ENV):] for p, _ in built for n in _pieces.needs(p)
                       if n.startswith(_code.ENV)}
    # an envFrom key the command line names ($(SHARD_PREFIX)part-$(JOB_COMPLETION_INDEX))
    # is read as an env var the pod sets would be (its value whole when the rest is only
    # the pod's; where it is spelled out in full, there)
    named = _uri.env_references([str(a) for a in [*(container.get("command") or []),
                                                  *(container.get("args") or [])]])
    bulk = {e.get("name") for e in container.get("env") or []
            if isinstance(e, Mapping) and e.get(EXPAND_ONLY)} - used - named
    bulk |= spelled | (built_only - used)
    for name, value in _uri.kube_env(container.get("env")).items():
        if name in bulk:
            continue  # a value for $(VAR) (or one of a ConfigMap's keys): no read itself
        said = handed.get(name) or _uri.name_direction(name)
        d = said if said in ("write", "unknown") else "read"
        # a root the command line only writes under (aws s3 cp m/ "${MODEL_BUCKET}/fc/${D}/"
        # with D known at run time): written, as those words are
        ways = {ds.get(i) for ts, ds in views for i, t in enumerate(ts)
                if value and _uri.location_under(
                    t.split("=", 1)[1] if t.startswith("-") and "=" in t else t, value)}
        if ways == {"write"}:
            d = "write"
        for word in value.split():
            out.append((word, f"env {name}", d))
    return out


_INTERPRETERS = re.compile(r"(?:.*/)?(?:python[\d.]*|bash|sh|Rscript|julia|perl|ruby|node|"
                           r"torchrun|accelerate|deepspeed|mpirun|java)")


def _last_path_operand(tokens: list[str], directions: dict[int, str | None]) -> None:
    """``train_openfold.py /data/mmcif/ /data/alignments/ /ckpt/run-1/ 2021-10-10``: of a
    program's two or more bare path operands nothing else says anything of, the last may be
    its output (OpenFold's is), so it is unknown, as the last of two bare URIs is
    (``_uri.classify_tokens``): not warmed where the container can write (blind job round
    54 warmed a run's output folder on a writable claim). The script an interpreter runs
    is no operand."""
    for seg in _uri.command_spans(tokens):
        if _local_copy_destination(tokens, seg, directions):
            continue
        bare = [i for i in seg if i in directions and directions[i] is None
                and tokens[i].startswith("/") and not tokens[i].endswith((".py", ".sh"))
                and (i == seg.start or not tokens[i - 1].startswith("-") or "=" in tokens[i - 1])
                and not (i > seg.start and _INTERPRETERS.fullmatch(tokens[i - 1]))]
        if len(bare) >= 2:
            directions[bare[-1]] = "unknown"


# local copy commands: their destination (the last operand, or -t/--target-directory DIR)
# is written (blind job round 61: `cp SRC /scratch/` listed /scratch/ as a read)
_LOCAL_COPIES = frozenset({"cp", "mv", "rsync", "install"})


def _local_copy_destination(tokens: list[str], seg: range,
                            directions: dict[int, str | None]) -> bool:
    """Mark the destination of a local ``cp``/``mv``/``rsync``/``install`` in *seg* (also
    after ``sh -c``, ``sudo``, ``VAR=x``) as written; whether *seg* is such a command (its
    sources stay reads)."""
    verb = next((k for k in seg if tokens[k].rsplit("/", 1)[-1] in _LOCAL_COPIES and (
        k == seg.start or tokens[k - 1] in _BEFORE_VERB or "=" in tokens[k - 1]
        and not tokens[k - 1].startswith("-"))), None)
    if verb is None:
        return False
    words = range(verb + 1, seg.stop)
    dest = next((i + 1 for i in words if tokens[i] in ("-t", "--target-directory")
                 and i + 1 < seg.stop), None)
    if dest is None:
        dest = next((i for i in words if tokens[i].startswith("--target-directory=")), None)
    if dest is None:
        operands = [i for i in words if not tokens[i].startswith("-")]
        dest = operands[-1] if len(operands) >= 2 else None
    if dest is not None and dest in directions and directions[dest] in (None, "read"):
        directions[dest] = "write"
    return True


_BEFORE_VERB = frozenset({"-c", "-lc", "-ec", "-xc", "-exc", "--", "sudo", "exec", "time",
                          "nohup"})


_SCRIPT_SUFFIXES = {".sh": ["bash", "-c"], ".bash": ["bash", "-c"], ".py": ["python", "-c"]}


def _runner(path: str, text: str) -> list[str] | None:
    """How a file from a ConfigMap runs (``bash -c``, ``python -c``) by its suffix or its
    ``#!`` line; None for a file that is no script (a config)."""
    return _SCRIPT_SUFFIXES.get(posixpath.splitext(path)[1]) or (
        ["bash", "-c"] if text.startswith("#!") and "sh" in text.split("\n", 1)[0] else None)


def _script_args(argv: list[str], path: str) -> list[str]:
    """The words a command line passes to the script at *path* (``python /opt/s/run.py
    --noise /data/x``: ``--noise /data/x``); [] when it does not name the script."""
    for i, a in enumerate(argv):
        if a == path:
            return argv[i + 1:]
    return []


def _as_script(path: str, text: str, container: Mapping[str, Any]) -> dict[str, Any] | None:
    """The container as it runs a shell script it names from a ConfigMap (``bash -c TEXT``
    with its env), None for a file that is no shell script."""
    runner = _runner(path, text)
    if runner is None or runner[0] != "bash" or len(text) > _uri.MAX_DOCUMENT_CHARS:
        return None
    return {**{k: v for k, v in container.items() if k != CONFIG_FILES},
            "command": runner, "args": [text]}


_INTERPOLATION = re.compile(r"\$\{([A-Za-z_][\w.]*)\}")  # OmegaConf's ${data.root}


def config_file_words(path: str, text: str,
                      container: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(word, "config PATH", direction) of a file a container names from one of its
    ConfigMap volumes: a script it runs (``bash /scripts/train.sh``, ``python /app/x.py``)
    read as its own command line would be, with the container's env; a YAML or JSON config
    (``--config /etc/train/config.yaml``, Hydra's ``--config-path``/``--config-name``) by
    its keys, each location directed by its key as an override's is (``data.train_dir``:
    read, ``trainer.default_root_dir``: written) and ``${a.b}`` references within it
    resolved; any other text, the locations it lists (a manifest of files): read."""
    origin = f"config {path}"
    if len(text) > _uri.MAX_DOCUMENT_CHARS:  # a ConfigMap holds 1 MiB; a config far less
        return []
    runner = _runner(path, text)
    if runner is not None:
        as_run = {k: v for k, v in container.items() if k != CONFIG_FILES}
        if runner[0] == "python":  # its argparse defaults as the command line sets them
            text = _code.with_options(text, _script_args(_uri.kube_expand(
                [str(a) for a in [*(container.get("command") or []),
                                  *(container.get("args") or [])]], container.get("env")), path))
        as_run.update(command=runner, args=[text])
        return [(w, origin, d) for w, o, d in container_words(as_run)
                if not o.startswith("env ")]  # the env's own words: the container's already
    pairs = _uri.document_strings(text)
    if pairs is None:
        return [(u, origin, "read") for u in _uri.find_uris(text)]
    scalars = dict(reversed(pairs))  # a key's first value
    # a value others are built from (root: s3://lake; train: ${root}/train): a root the
    # file spells out, read where it is spelled out, no read of its own
    roots = {m.group(1) for _, v in pairs for m in _INTERPOLATION.finditer(v)}
    out = []
    for key, value in pairs:
        if key in roots:
            continue
        for _ in range(3):  # data.train: ${data.root}/train
            value = _INTERPOLATION.sub(lambda m: scalars.get(m.group(1), m.group(0)), value)
        if not (_uri.find_uris(value) or value.startswith("/")):
            continue
        said = _uri.key_direction(key)
        out.append((value, origin, said if said in ("write", "unknown") else "read"))
    return out


def sub_path(mount: Mapping[str, Any], container: Mapping[str, Any]) -> tuple[str, bool]:
    """The folder of the volume a mount shows: ``subPath``, or ``subPathExpr`` with the
    container's env expanded as the kubelet does (``$(REGION)/$(ZONE)``), and whether it is
    that folder. What only the pod knows (``$(POD_NAME)``, ``fold=$(FOLD)`` from the
    downward API, in a template) ends it at the folder holding every pod's (``eu-west/``,
    ``folds/``): False, the paths under the mount cannot be placed in it (see
    ``with_pod_fields`` for a pod's own values)."""
    sub = str(mount.get("subPath") or "")
    expr = mount.get("subPathExpr")
    if not sub and isinstance(expr, str):
        sub = _uri.kube_expand([expr], container.get("env"))[0]
        if "$(" in sub:
            return sub.split("$(", 1)[0].rpartition("/")[0], False
    return sub, True


def with_pod_fields(container: Mapping[str, Any], pod: Mapping[str, Any]) -> Mapping[str, Any]:
    """*container* with its env vars from the downward API (``fieldRef``: the pod's name,
    namespace, node, labels and annotations, such as an Indexed Job's completion index) given
    their values from *pod*, as the kubelet gives them; *container* itself when none is."""
    env = container.get("env")
    if not isinstance(env, list):
        return container
    meta = pod.get("metadata") if isinstance(pod.get("metadata"), Mapping) else {}
    spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
    out, changed = [], False
    for e in env:
        ref = ((e.get("valueFrom") or {}).get("fieldRef") or {}) if isinstance(
            e, Mapping) and isinstance(e.get("valueFrom"), Mapping) else {}
        value = _pod_field(str(ref.get("fieldPath") or ""), meta, spec) if isinstance(
            ref, Mapping) else None
        if value is not None:
            e, changed = {"name": e.get("name"), "value": value}, True
        out.append(e)
    return {**container, "env": out} if changed else container


# a downward API field of a label or an annotation (also read for pod templates: _podspec)
FIELD_KEY = re.compile(r"metadata\.(labels|annotations)\['([^']+)'\]")


def _pod_field(path: str, meta: Mapping[str, Any], spec: Mapping[str, Any]) -> str | None:
    if path in ("metadata.name", "metadata.namespace", "metadata.uid"):
        value = meta.get(path.split(".", 1)[1])
    elif path in ("spec.nodeName", "spec.serviceAccountName"):
        value = spec.get(path.split(".", 1)[1])
    elif m := FIELD_KEY.fullmatch(path):
        value = (meta.get(m.group(1)) or {}).get(m.group(2))
    else:
        value = None
    return str(value) if isinstance(value, (str, int)) else None


def settled_locations(words: Iterable[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """(location, origin, direction) of each location the words name, once (``a/b`` and
    ``a/b/`` are one), settled as the workflow analysis settles a step's (``Step.settle``):
    named both as read and as written, or once as either, it is unknown."""
    seen: dict[str, tuple[str, str, set[str]]] = {}
    for text, origin, d in words:
        for u in _uri.find_uris(text):
            u = u.rstrip(".")
            seen.setdefault(u.rstrip("/"), (u, origin, set()))[2].add(d)
    return [(u, origin, "read" if dirs == {"read"} else "write" if dirs == {"write"}
             else "unknown") for u, origin, dirs in seen.values()]


def s3_uris(text: str) -> list[str]:
    """The ``s3://`` locations in *text* (``s3a://`` and rclone's ``:s3:`` named as s3)."""
    return ["s3://" + u.rstrip(".").split("://", 1)[1] for u in _uri.find_uris(text)
            if u.split("://", 1)[0].lower() in ("s3", "s3a")]


def paths_under(words: Iterable[tuple[str, str, str]], mount_path: str,
                container: Mapping[str, Any] | None = None) -> list[tuple[str, str]]:
    """(path relative to the mount, direction) for every path under *mount_path* the words
    name ("" for the mount itself), normalised as the workflow analysis does (_pvc). With
    *container*, a path inside another of its mounts deeper down is that mount's, not this
    one's (an emptyDir at /work/metrics over a claim at /work: blind job round 49)."""
    inner = [rel for m in (container or {}).get("volumeMounts") or []
             if isinstance(m, Mapping) and isinstance(m.get("mountPath"), str)
             and (rel := _pvc.relative_under(m["mountPath"], mount_path))]
    out: list[tuple[str, str]] = []
    for text, _origin, d in words:
        for piece in _PATH_SPLIT.split(text):
            rel = _pvc.relative_under(piece, mount_path)
            if rel is not None and not any(_pvc.relative_under("/" + rel, "/" + i) is not None
                                           for i in inner):
                out.append((rel, d))
    return out


def pod_datasets(
    pod: Mapping[str, Any], view: ClusterView, driver: str = DRIVER_NAME
) -> list[str]:
    """The pod's dataset locations, most specific first found, deduplicated, at most 16.

    Only what it reads: an s3:// location its command line or env names as written, or as
    either (unknown), is not warmed. Under a fusecache volume (read-only) a path named as
    written is not read (a mount named only that way is not read whole), and one that could
    be either (``checkpointer.checkpoint_dir=/workspace/model``) can only be read."""
    spec = pod.get("spec") or {}
    volumes = _volume_locations(pod, view, driver)
    found: list[str] = []

    def add(uri: str) -> None:
        if uri not in found and len(found) < MAX_DATASETS:
            found.append(uri)

    for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        c = with_pod_fields(c, pod)
        words = container_words(c)
        for u, _origin, d in settled_locations(words):
            if d == "read":
                for uri in s3_uris(u):
                    add(uri)
        for m in c.get("volumeMounts") or []:
            if m.get("name") not in volumes:
                continue
            sub, exact = sub_path(m, c)
            base = _pvc.join(volumes[m["name"]], sub)
            # (a folder only the pod knows: the one holding every pod's, read whole)
            named = paths_under(words, m.get("mountPath", ""), c) if exact else []
            for rel, d in named:
                # the same name the workflow analysis gives it; none for a file only the
                # run names (/fastq/run/$r1 of a while-read loop: no key of that name)
                if d != "write" and not RUN_TIME_PART.search(rel):
                    add(_pvc.narrow(base, rel))
            if not named:
                add(base)
    for name, loc in volumes.items():  # fusecache volumes no container mounts (rare)
        if not any(u.startswith(loc) for u in found):
            log.debug("volume %s (%s) is not mounted by any container", name, loc)
    return found
