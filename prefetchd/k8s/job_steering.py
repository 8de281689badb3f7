"""Which warm node one pod of a multi-pod training job should prefer (for the webhook).

Who calls this: :func:`prefetchd.k8s.webhook.affinity_terms`, for each dataset of a pod it
is asked about. Data flow: the pod's labels -> its work (:func:`prefetchd.workloads.pod_work`)
-> one GET of that object (and of its runtime, for a TrainJob) ->
:func:`prefetchd.workloads.read` -> the target of this dataset, whose node count (workers x
pods) is how many nodes the agents warmed it on
(``max(--replicas, target nodes)``, the same number :mod:`prefetchd.k8s.workload_watch`
uses) -> :func:`prefetchd.k8s.placement.choose` ranks them as every agent does -> minus the
nodes its siblings (the same work's other pods, :func:`prefetchd.workloads.sibling_selector`)
are bound to or were steered to first -> the first node left. So each worker of a job
prefers a distinct warm node. Returns None when the pod is not such work (the webhook then
steers as before); any API or read problem also gives None (never blocks a pod).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from prefetchd import workloads as wl
from prefetchd.k8s import placement

log = logging.getLogger(__name__)

STEERED_ANNOTATION = "fusecache.io/preferred-nodes"  # as the webhook writes it


@dataclass(frozen=True)
class JobTargets:
    """The warm targets of the work a pod belongs to, and the pod's group in it."""

    targets: tuple[wl.WarmTarget, ...]
    group: str

    def datasets(self) -> list[str]:
        """What the pod's group reads, named by the pod or not."""
        return wl.group_datasets(self.targets, self.group)


def job_targets(pod: Mapping[str, Any], view: Any) -> JobTargets | None:
    """The targets of the training work ``pod`` belongs to (one GET of its object, and of
    its runtime for a TrainJob), or None (not such work, or not readable now)."""
    get_json = getattr(view, "get_json", None)
    if get_json is None or wl.sibling_selector(pod) is None:
        return None
    namespace = str((pod.get("metadata") or {}).get("namespace") or "default")
    for key, group in wl.pod_work(pod):
        try:
            obj = next((o for o in map(get_json, wl.object_paths(key)) if o is not None), None)
            if obj is None:
                continue
            work = wl.read(obj, wl.Library(fetch=wl.fetcher(get_json)))  # runtimes by GET
            return JobTargets(tuple(work.targets(wl.resolver_from_view(view, namespace))),
                              group)
        except Exception as exc:  # noqa: BLE001 - never block a pod
            log.debug("webhook: %s not readable for steering: %s", key, exc)
    return None


def job_node(pod: Mapping[str, Any], dataset: str, nodes: list[placement.NodeInfo],
             requirements: placement.PodRequirements, replicas: int,
             view: Any, found: JobTargets | None = None) -> list[str] | None:
    """[the node this pod should prefer for ``dataset``], or None (not a job we read).
    *found*: job_targets(pod, view), when the caller has it."""
    selector = wl.sibling_selector(pod)
    list_pods = getattr(view, "pods", None)
    if selector is None or list_pods is None:
        return None
    found = found or job_targets(pod, view)
    if found is None:
        return None
    meta = pod.get("metadata") or {}
    namespace = str(meta.get("namespace") or "default")
    width = next((t.nodes for t in found.targets if t.dataset == dataset or
                  dataset.startswith(t.dataset)), None)
    if width is None:
        return None
    chosen = placement.choose(dataset, nodes, requirements, max(replicas, width))
    try:
        siblings = list_pods(namespace, selector)
    except Exception as exc:  # noqa: BLE001
        log.debug("webhook: cannot list the siblings of a pod (%s)", exc)
        return None
    with _RECENT.lock:  # (two admissions at once must not both take the first free node)
        taken = _RECENT.taken((namespace, selector))
        free = _free(chosen, siblings, meta, taken)
        if free:
            _RECENT.add((namespace, selector), free[0])
    return free[:1] or chosen[:1]


def _free(chosen: list[str], siblings: list[Mapping[str, Any]], meta: Mapping[str, Any],
          taken: set[str]) -> list[str]:
    """The nodes of *chosen* no sibling is bound to or was steered to first (*taken*: those
    this webhook steered siblings to a moment ago, not yet stored to be listed)."""
    taken = set(taken)
    for sib in siblings:
        smeta = sib.get("metadata") or {}
        if smeta.get("name") and smeta.get("name") == meta.get("name"):
            continue
        bound = (sib.get("spec") or {}).get("nodeName")
        steered = ((smeta.get("annotations") or {}).get(STEERED_ANNOTATION) or "").split(",")
        if bound:
            taken.add(bound)
        elif steered[0]:
            taken.add(steered[0])
    return [c for c in chosen if c not in taken]


class _RecentSteers:
    """The nodes this webhook steered a job's pods to in the last RECENT_S seconds: a Job
    controller makes its pods milliseconds apart, each admitted before the one before is
    stored, so listing the siblings does not show it (a blind test on a real control plane:
    two of three pods steered to one node, six times in six). Bounded: at most MAX_JOBS
    jobs, each entry gone after RECENT_S."""

    RECENT_S = 30.0
    MAX_JOBS = 4096

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._by_job: dict[tuple[str, str], list[tuple[str, float]]] = {}

    def taken(self, job: tuple[str, str]) -> set[str]:
        now = time.monotonic()
        live = [(n, t) for n, t in self._by_job.get(job, []) if now - t < self.RECENT_S]
        if live:
            self._by_job[job] = live
        else:
            self._by_job.pop(job, None)
        return {n for n, _ in live}

    def add(self, job: tuple[str, str], node: str) -> None:
        if job not in self._by_job and len(self._by_job) >= self.MAX_JOBS:
            del self._by_job[next(iter(self._by_job))]  # the job steered first
        self._by_job.setdefault(job, []).append((node, time.monotonic()))


_RECENT = _RecentSteers()
