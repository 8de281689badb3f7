"""The objects some kinds need to be read completely: runtimes, trial templates, priorities.

Who uses it: ``prefetchd plan`` fills one from the files it is given (a TrainJob's runtime as
a second file); the node agent fills one from its watches (TrainingRuntime,
ClusterTrainingRuntime, WorkloadPriorityClass, ResourceFlavor, LocalQueue, ClusterQueue) and
from single GETs (``fetcher``: a Katib trial-template ConfigMap, those a pod template takes
env or config files from). Adapters only read it:

* ``runtime(kind, namespace, name)``: a TrainJob's ``runtimeRef`` (TrainingRuntime in the
  job's namespace, or ClusterTrainingRuntime);
* ``configmap(namespace, name)``: a Katib Experiment's ``trialTemplate.configMap``;
  ``get("ConfigMap", ...)``: one a pod template names (``_podspec.with_configmaps``);
* ``priority(name)``: the value of a Kueue WorkloadPriorityClass (a job's
  ``kueue.x-k8s.io/priority-class`` label names one); ``pod_priority(name)``: of a
  ``scheduling.k8s.io`` PriorityClass (a pod template's ``priorityClassName``: Kueue's
  priority for a job without that label, and the scheduler's; GET when needed);
* ``flavor(name)``: a Kueue ResourceFlavor (its ``nodeLabels`` and ``tolerations`` are added
  to an admitted Workload's pods); ``get("LocalQueue", ...)``, ``get("ClusterQueue", ...)``:
  the flavors a queued job may be given (``_queue_flavors``; ``objects("ClusterQueue")``:
  its cohort's quota; a ``Cohort`` object, whose own quota is not read, leaves it unjudged).

Bounded: at most ``size`` objects (least recently added dropped first). An object fetched
(not watched, not given) is fetched again once it is ``REFETCH_S`` old, so an edited
ConfigMap is read again; a fetch that found nothing is not repeated for ``MISSING_S``, so a
job read on every watch event does not GET a missing ConfigMap each time.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

LIBRARY_KINDS = {
    "TrainingRuntime": "trainer.kubeflow.org",
    "ClusterTrainingRuntime": "trainer.kubeflow.org",
    "ConfigMap": "",
    "WorkloadPriorityClass": "kueue.x-k8s.io",
    "ResourceFlavor": "kueue.x-k8s.io",
    "LocalQueue": "kueue.x-k8s.io",
    "ClusterQueue": "kueue.x-k8s.io",
    "Cohort": "kueue.x-k8s.io",
    "PriorityClass": "scheduling.k8s.io",
}
CLUSTER_SCOPED = ("ClusterTrainingRuntime", "WorkloadPriorityClass", "ResourceFlavor",
                  "ClusterQueue", "Cohort", "PriorityClass")
# The two classes every cluster has without a PriorityClass object (kube-apiserver's).
SYSTEM_PRIORITIES = {"system-cluster-critical": 2_000_000_000,
                     "system-node-critical": 2_000_001_000}
REFETCH_S = 300.0  # a fetched object is fetched again after this long
MISSING_S = 60.0  # a fetch that found nothing is not repeated for this long
MAX_MISSING = 1024
# What the node agent watches to fill a Library: (group, kind, versions (first watched),
# plural, namespaced). ConfigMaps are not watched (a GET when one is needed).
LIBRARY_WATCHES: tuple[tuple[str, str, tuple[str, ...], str, bool], ...] = (
    ("trainer.kubeflow.org", "TrainingRuntime", ("v1alpha1",), "trainingruntimes", True),
    ("trainer.kubeflow.org", "ClusterTrainingRuntime", ("v1alpha1",),
     "clustertrainingruntimes", False),
    ("kueue.x-k8s.io", "WorkloadPriorityClass", ("v1beta2", "v1beta1"),
     "workloadpriorityclasses", False),
    ("kueue.x-k8s.io", "ResourceFlavor", ("v1beta2", "v1beta1"), "resourceflavors", False),
    ("kueue.x-k8s.io", "LocalQueue", ("v1beta2", "v1beta1"), "localqueues", True),
    ("kueue.x-k8s.io", "ClusterQueue", ("v1beta2", "v1beta1"), "clusterqueues", False),
    ("kueue.x-k8s.io", "Cohort", ("v1beta2",), "cohorts", False),
)


def api_path(kind: str, namespace: str | None, name: str) -> str | None:
    """The API path of a lookup object (for ``Library.fetch``), None for other kinds."""
    if kind == "ConfigMap":
        return f"/api/v1/namespaces/{namespace or 'default'}/configmaps/{name}"
    if kind == "PriorityClass":
        return f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}"
    for group, k, versions, plural, namespaced in LIBRARY_WATCHES:
        if k == kind:
            base = f"/apis/{group}/{versions[0]}"
            return (f"{base}/namespaces/{namespace or 'default'}/{plural}/{name}" if namespaced
                    else f"{base}/{plural}/{name}")
    return None


def fetcher(get_json: Callable[[str], Mapping[str, Any] | None],
            ) -> Callable[[str, str | None, str], Mapping[str, Any] | None]:
    """A ``Library.fetch`` over one GET per lookup (None when absent or unreadable)."""

    def fetch(kind: str, namespace: str | None, name: str) -> Mapping[str, Any] | None:
        path = api_path(kind, namespace, name)
        if path is None:
            return None
        try:
            found = get_json(path)
        except Exception:  # noqa: BLE001 - the adapter's error names the missing object
            return None
        if found is None:
            return None
        version = "v1" if kind == "ConfigMap" else path.split("/")[3]  # /apis/G/V/...
        group = LIBRARY_KINDS[kind]
        return {**found, "kind": kind,
                "apiVersion": f"{group}/{version}" if group else version}

    return fetch


def is_library_object(obj: Mapping[str, Any]) -> bool:
    kind = obj.get("kind")
    api = str(obj.get("apiVersion") or "")
    group = api.split("/", 1)[0] if "/" in api else ""
    return kind in LIBRARY_KINDS and LIBRARY_KINDS[str(kind)] == group


class Library:
    """Objects by (kind, namespace, name); thread-safe, bounded."""

    def __init__(self, objects: list[Mapping[str, Any]] | None = None, size: int = 4096,
                 fetch: Callable[[str, str | None, str], Mapping[str, Any] | None] | None = None,
                 ) -> None:
        self.size = size
        # (kind, namespace, name) -> the object or None, called when one is asked for and not
        # held: the agent GETs ConfigMaps (not watched), the webhook GETs runtimes and
        # ConfigMaps (it watches nothing). See api_path.
        self.fetch = fetch
        self._d: OrderedDict[tuple[str, str, str], Mapping[str, Any]] = OrderedDict()
        self._fetched: dict[tuple[str, str, str], float] = {}  # key -> when (monotonic)
        self._missing: OrderedDict[tuple[str, str, str], float] = OrderedDict()  # -> until
        self._lock = threading.Lock()
        for obj in objects or []:
            self.add(obj)

    @staticmethod
    def _key(kind: str, namespace: str | None, name: str) -> tuple[str, str, str]:
        return (kind, "" if kind in CLUSTER_SCOPED else namespace or "default", name)

    def add(self, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        key = self._key(str(obj.get("kind")), meta.get("namespace"), str(meta.get("name", "")))
        with self._lock:
            self._d[key] = obj
            self._d.move_to_end(key)
            self._fetched.pop(key, None)  # watched or given: as fresh as its source
            self._missing.pop(key, None)
            while len(self._d) > self.size:
                self._fetched.pop(self._d.popitem(last=False)[0], None)

    def remove(self, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        key = self._key(str(obj.get("kind")), meta.get("namespace"), str(meta.get("name", "")))
        with self._lock:
            self._d.pop(key, None)

    def held(self, kind: str, namespace: str | None, name: str) -> Mapping[str, Any] | None:
        """The object if held now, without fetching it."""
        with self._lock:
            return self._d.get(self._key(kind, namespace, name))

    def objects(self, kind: str) -> list[Mapping[str, Any]]:
        """Every object of *kind* held now (the ClusterQueues of a cohort)."""
        with self._lock:
            return [o for (k, _, _), o in self._d.items() if k == kind]

    def holds_any(self, kind: str) -> bool:
        with self._lock:
            return any(k == kind for k, _, _ in self._d)

    def get(self, kind: str, namespace: str | None, name: str) -> Mapping[str, Any] | None:
        """The object, fetched when not held (or fetched long ago) and a fetch is set."""
        key = self._key(kind, namespace, name)
        now = time.monotonic()
        with self._lock:
            found = self._d.get(key)
            at = self._fetched.get(key)
            missing_until = self._missing.get(key, 0.0)
        if self.fetch is None or (found is not None and (at is None or now - at < REFETCH_S)) \
                or (found is None and missing_until > now):
            return found
        fresh = self.fetch(kind, namespace, name)
        if fresh is None:  # gone, or the API did not answer: keep what was held
            if found is None:
                with self._lock:
                    self._missing[key] = now + MISSING_S
                    self._missing.move_to_end(key)
                    while len(self._missing) > MAX_MISSING:
                        self._missing.popitem(last=False)
            return found
        self.add(fresh)
        with self._lock:
            self._fetched[key] = now
        return fresh

    def runtime(self, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self.get(kind, namespace, name)

    def configmap(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self.get("ConfigMap", namespace, name)

    def priority(self, name: str, kind: str = "WorkloadPriorityClass") -> int | None:
        obj = self.get(kind, None, name)
        value = (obj or {}).get("value")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def pod_priority(self, name: str) -> int | None:
        if name in SYSTEM_PRIORITIES:
            return SYSTEM_PRIORITIES[name]
        return self.priority(name, "PriorityClass")

    def flavor(self, name: str) -> Mapping[str, Any] | None:
        return self.get("ResourceFlavor", None, name)
