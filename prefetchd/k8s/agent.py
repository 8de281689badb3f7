"""``prefetchd run --kubernetes``: the node agent that warms upcoming steps' data.

Who calls this: prefetchd/cli.py (``add_arguments`` + ``run``), or tests via :class:`Agent`.

Data flow: :mod:`prefetchd.k8s.watch` watchers (workflows, workflow templates, cluster
workflow templates, PVCs, PVs, pending pods, nodes) call the ``on_*`` handlers below from their
threads;
handlers only compute and call the injected ``warm`` / ``release`` callbacks, so the real
warmer and test doubles plug in the same way. :func:`run` wires the real ones: a
:class:`prefetchd.k8s.worker.WarmWorker` (bounded queue, one thread running
:class:`prefetchd.warm.Warmer`, node publication) and :class:`prefetchd.k8s.metrics.AgentMetrics`
(fed through the ``observer`` hook with every Workflow's ``status.nodes``).

Training work beyond pipelines (Kubeflow Trainer and v1 jobs, Katib, batch Jobs, JobSets,
Kueue Workloads) is watched by :mod:`prefetchd.k8s.workload_watch`, which
:func:`run_kubernetes` starts after the others; it shares this agent's nodes and cluster view,
is re-placed with :meth:`Agent.replan` (``replan_hooks``) and claims the pending pods of the
work it knows (``pod_owners``).

Cache group (``--peer-listen``, docs/cache-group.md): :func:`run` builds a
:class:`prefetchd.k8s.group_watch.GroupMembership` fed by every Node event (``node_hooks``)
that writes ``<cache-dir>/group.json``, takes the peer certificate (files, or a Secret via
:mod:`prefetchd.k8s.peer_tls`), starts the peer server (:mod:`fusecache.peer_server`) in this
process and only then has the worker publish the ``fusecache.io/peer`` annotation. With
``--group-striping`` every agent warms every dataset (``Agent._warms_here``), each its own
blocks, and a change of the group's members re-warms the striped records (rebalance).

Start order (:func:`run_kubernetes`): the Node is published first (by the caller), then the
Node watcher runs until this agent's own Node is seen with ``fusecache.io/cache-free-bytes``,
and only then the others: placement counts only annotated nodes, and a workflow evaluated
before that would not be warmed here until the next workflow or node event.

* Workflow -> :func:`prefetchd.pipeline.analyze_documents` (with the WorkflowTemplates and
  ClusterWorkflowTemplates seen so far, so templateRefs resolve; KFP v2 runs are handled by
  the analysis, which reads their driver templates' JSON parameters). ``status.nodes`` gives
  each step's phase (its node found by the name the controller gives it, a loop's by its
  group node; read by the analysis, :mod:`prefetchd.pipeline._status`, as ``Step.phase``, so
  ``prefetchd plan`` of the same object agrees): started steps are not warmed for; a read of
  what an earlier step writes (``Read.written_by``) only once that step succeeded;
  datasets whose every reading step has finished are released (eviction follows the DAG).
  A workflow suspended by hand or shutting down (``spec.suspend``, ``spec.shutdown``:
  ``Plan.held``) warms nothing new but a Stop's exit handler's data, and what it has pinned
  stays until its steps finish (its running pods go on reading).
  Remaining datasets are warmed earliest stage first, on this node only if
  :func:`prefetchd.k8s.placement.should_warm` says so for the requirements of the earliest
  pending step reading it (:func:`step_requirements`: the step's own nodeSelector,
  tolerations, node affinity and container resources, else the workflow-level ones).
  Steps' PVC mounts become reads at analysis time (:meth:`Agent._locate_claims`): the claim
  (literal, parameter, volumeClaimTemplates claim, a created claim the Workflow names) ->
  :func:`prefetchd.k8s.datasets.claim_dataset` (bound to a fusecache PV) -> the dataset,
  narrowed by :func:`prefetchd.pipeline.map_mounts`; the WarmRequest carries the volume's
  attributes. A claim not bound yet makes the workflow wait for that claim (bounded):
  ``on_pvc``/``on_pv`` evaluate it again as soon as the claim or its PV changes.
* Pending pod -> a step of a workflow (:func:`workflow_of`: Argo's label or owner reference)
  is the workflow's (warmed and pinned under it; only when bound here before its data, warmed
  here under the workflow); any other pod -> :func:`prefetchd.k8s.datasets.pod_datasets` ->
  warm if this node is chosen (pinned with a TTL by the worker).
* Node -> the NodeInfo table used for ranking. A change placement depends on (added, removed,
  labels, taints, allocatable, cordon, ranking weight) arms one timer (``replan_delay``): then
  every remembered workflow's datasets not requested here are re-placed with the requirements
  of their earliest pending step (:meth:`Agent.replan`), so a burst of node events costs one pass.

Bounded memory: per workflow we keep only the set of datasets already requested and the
datasets still waiting (dataset -> earliest pending step and its requirements) (capped
LRU over workflows); templates are kept by name (capped). A workflow the analysis cannot
parse is logged once per (uid, resourceVersion) and skipped; it never stops a watch.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import signal
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from prefetchd.k8s import datasets as ds_mod
from prefetchd.k8s import placement
from prefetchd.k8s import watch as kw
from prefetchd.pipeline._status import DONE_WORKFLOW_PHASES  # (plan and agent: one reading)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WarmRequest:
    """One dataset to warm on this node, and why (for logs and metrics)."""

    dataset: str
    source: str  # "workflow ns/name" or "pod ns/name"
    step: str
    stage: int
    # The fusecache volume the dataset is read through (PV attributes such as endpointUrl,
    # region, its nodeStageSecretRef), when it comes from a claim or an inline volume.
    volume: ds_mod.VolumeDataset | None = None
    # A pod already bound to this node reads it now (it landed where its data is not): the
    # worker warms it at once, beside any warm for later work (WarmWorker's urgent lane).
    urgent: bool = False


WarmFn = Callable[[WarmRequest], None]
ReleaseFn = Callable[[str, str], None]  # (dataset, source)
ObserveFn = Callable[[str, dict[str, Any]], None]  # (source, workflow object)


@dataclass(frozen=True)
class AgentConfig:
    node_name: str
    replicas: int = 1
    namespace: str | None = None  # None: all namespaces
    max_workflows: int = 10_000  # workflows remembered at once (their requested datasets)
    max_templates: int = 2_000
    # Workflows remembered with their object while one of their claims is not yet bound to a
    # fusecache PV, so a claim (or PV) event re-evaluates them without waiting for theirs.
    max_awaiting: int = 1_000
    # After a Node change, wait this long before re-placing pending workflows: a burst of
    # node events (scale-up, every agent re-annotating) then costs one pass, not one each.
    replan_delay: float = 2.0
    # --group-striping: every dataset is spread over the cache group (each agent warms the
    # blocks its node owns), so every agent warms every dataset rather than the ranking's
    # ``replicas`` nodes holding it whole.
    striping: bool = False


@dataclass(frozen=True)
class _Pending:
    """A dataset not warmed here yet, and the earliest step still to come that reads it."""

    stage: int
    step: str
    pod: placement.PodRequirements
    volume: ds_mod.VolumeDataset | None = None


def _placement_key(info: placement.NodeInfo | None) -> Any:
    """What of a node placement depends on (free space only through the ranking weight)."""
    if info is None:
        return None
    return (dataclasses.replace(info, cache_free_bytes=None), info.cache_free_bytes is None,
            info.weight)


def step_requirements(step: Any, wf_spec: dict[str, Any],
                      wf_pod: placement.PodRequirements) -> placement.PodRequirements:
    """The pod requirements of one step: its own constraints, else the workflow's.

    As Argo builds the pod: the step's ``nodeSelector`` and ``tolerations`` replace the
    workflow's when set, and so does its ``affinity.nodeAffinity``; resource requests come
    from the step's containers only. A constraint still holding a ``{{...}}`` expression
    (resolved only when the pod is made) is ignored rather than guessed, falling back to the
    workflow's.
    """
    own = getattr(step, "scheduling", None)
    if not own:
        return wf_pod
    merged: dict[str, Any] = {}
    for key in ("nodeSelector", "tolerations"):
        value = own.get(key) if not _templated(own.get(key)) else None
        merged[key] = value or wf_spec.get(key)
    own_aff = (own.get("affinity") or {}).get("nodeAffinity")
    aff = own_aff if own_aff and not _templated(own_aff) else \
        (wf_spec.get("affinity") or {}).get("nodeAffinity")
    if aff:
        merged["affinity"] = {"nodeAffinity": aff}
    if not _templated(own.get("containers")):
        merged["containers"] = own.get("containers") or []
    try:
        return placement.PodRequirements.from_pod_spec(merged)
    except (AttributeError, TypeError, ValueError) as exc:  # malformed: the workflow's
        log.debug("step %s: unreadable scheduling constraints (%s)", step.id, exc)
        return wf_pod


def _templated(value: Any) -> bool:
    return "{{" in repr(value)


class Agent:
    """The handlers; thread-safe (each watcher calls from its own thread)."""

    def __init__(
        self, config: AgentConfig, view: ds_mod.ClusterView, warm: WarmFn,
        release: ReleaseFn | None = None, observer: ObserveFn | None = None,
        held: Iterable[tuple[str, str]] = (),
    ) -> None:
        self.config, self.view, self.warm = config, view, warm
        self.release = release or (lambda dataset, source: None)
        self.observer = observer
        self.self_ready = threading.Event()  # our Node seen with the free-space annotation
        self._lock = threading.Lock()
        self._nodes: dict[str, placement.NodeInfo] = {}
        self._templates: OrderedDict[tuple[str, str, str], dict[str, Any]] = OrderedDict()
        self._requested: OrderedDict[str, set[str]] = OrderedDict()  # uid -> datasets
        self._bad: OrderedDict[tuple[str, str], None] = OrderedDict()
        # Pins recorded before a restart, source -> datasets, not yet claimed by a workflow
        # seen since: claimed at a workflow's first event (so its DAG releases them), and the
        # rest released after the first workflow listing (see reconcile_pins).
        self._held: dict[str, set[str]] = {}
        # uid -> (source, dataset -> its earliest pending step), for datasets not requested
        # here: what a node change re-places (evicted with _requested, so bounded alike).
        self._waiting: OrderedDict[str, tuple[str, dict[str, _Pending]]] = OrderedDict()
        self._replan_timer: threading.Timer | None = None
        self._closed = False
        # Claims a workflow step mounts that are not (yet) a dataset: (ns, claim) -> uids,
        # and the latest object of each such workflow (bounded by max_awaiting).
        self._awaiting: dict[tuple[str, str], set[str]] = {}
        self._awaiting_wf: OrderedDict[str, tuple[dict[str, Any], set[tuple[str, str]]]] = \
            OrderedDict()
        # Known workflows by (ns, name) -> uid: a pod carrying Argo's label names only that.
        self._wf_uids: OrderedDict[tuple[str, str], str] = OrderedDict()
        # step pods seen (bounded): True once bound here and their data asked for
        self._step_pods: OrderedDict[Any, bool] = OrderedDict()
        # Called after each re-placement pass (nodes changed): the training-work watch
        # (prefetchd.k8s.workload_watch) places its datasets again too.
        self.replan_hooks: list[Callable[[], None]] = []
        # Pending pods another watch accounts for (a training job's pods are warmed and pinned
        # under their job; one bound here is warmed by that watch, urgent): a hook answering
        # True makes on_pod leave the pod alone.
        self.pod_owners: list[Callable[[dict[str, Any]], bool]] = []
        # Called with every Node event (the cache group's membership,
        # prefetchd.k8s.group_watch, builds the group file from the Nodes' peer annotations).
        self.node_hooks: list[Callable[[str, dict[str, Any]], None]] = []
        for source, dataset in held:
            if source.startswith("workflow "):
                self._held.setdefault(source, set()).add(dataset)

    # ------------------------------------------------------------ nodes and templates

    def on_node(self, etype: str, obj: dict[str, Any]) -> None:
        name = (obj.get("metadata") or {}).get("name", "")
        with self._lock:
            old = self._nodes.get(name)
            if etype == "DELETED":
                self._nodes.pop(name, None)
                info = None
            else:
                info = self._nodes[name] = placement.NodeInfo.from_node(obj)
                if name == self.config.node_name and info.cache_free_bytes is not None:
                    self.self_ready.set()
        for hook in self.node_hooks:
            try:
                hook(etype, obj)
            except Exception:  # noqa: BLE001 - a hook must not stop the Node watch
                log.exception("node %s: node hook failed", name)
        if _placement_key(old) != _placement_key(info):
            self._nodes_changed()

    def _warms_here(self, dataset: str, nodes: list[placement.NodeInfo],
                    pod: placement.PodRequirements | None) -> bool:
        """Whether this agent warms *dataset* (all of it, or its share when striping)."""
        return self.config.striping or placement.should_warm(
            self.config.node_name, dataset, nodes, pod, self.config.replicas)

    def nodes(self) -> list[placement.NodeInfo]:
        with self._lock:
            return list(self._nodes.values())

    def on_template(self, etype: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        key = (obj.get("kind", ""), meta.get("namespace") or "", meta.get("name", ""))
        with self._lock:
            if etype == "DELETED":
                self._templates.pop(key, None)
                return
            self._templates[key] = obj
            self._templates.move_to_end(key)
            while len(self._templates) > self.config.max_templates:
                self._templates.popitem(last=False)

    # ------------------------------------------------------------ workflows

    def on_workflow(self, etype: str, obj: dict[str, Any], observe: bool = True) -> None:
        """A Workflow event (``observe`` False: the same object again, after a claim changed)."""
        meta = obj.get("metadata") or {}
        uid = meta.get("uid", "")
        source = f"workflow {meta.get('namespace')}/{meta.get('name')}"
        phase = (obj.get("status") or {}).get("phase")
        if self.observer is not None and etype != "DELETED" and observe:
            try:
                self.observer(source, obj)
            except Exception:  # metrics must never stop warming
                log.exception("%s: observer failed", source)
        key = (meta.get("namespace") or "", meta.get("name") or "")
        if etype == "DELETED" or phase in DONE_WORKFLOW_PHASES:
            with self._lock:
                done = self._requested.pop(uid, set()) | self._held.pop(source, set())
                self._waiting.pop(uid, None)
                self._forget_claims(uid)
                if etype == "DELETED" and self._wf_uids.get(key) == uid:
                    del self._wf_uids[key]
            for dataset in sorted(done):
                self.release(dataset, source)
            return
        with self._lock:
            self._wf_uids[key] = uid
            self._wf_uids.move_to_end(key)
            while len(self._wf_uids) > self.config.max_workflows:
                self._wf_uids.popitem(last=False)
        requested = self._claim(uid, source)
        plans = self._analyze(obj, uid, meta.get("resourceVersion", ""), source)
        if plans is None:
            return
        volumes = self._locate_claims(plans, obj, uid)
        spec = obj.get("spec") or {}
        wf_pod = placement.PodRequirements.from_pod_spec(spec)  # workflow-level constraints
        readers: dict[str, list[tuple[int, str, bool, bool, Any]]] = {}
        for plan in plans:
            for step in plan.steps:  # (its phase: the analysis read status.nodes, _status)
                if step.never:
                    continue  # its `when` is false: no pod will read anything
                for read in step.reads:
                    if not plan.there_yet(read):
                        continue  # what an earlier step writes: there once it is done
                    if read.static and read.uri and read.uri.startswith("s3://"):
                        readers.setdefault(read.uri, []).append(
                            (step.stage, step.id, step.started, step.finished, step))
        waiting: dict[str, _Pending] = {}
        pinned: dict[str, placement.PodRequirements] = {}  # step id -> its requirements
        # suspended or shutting down: what is pinned stays, and no step starts but a Stop's
        # exit handler, which alone then decides where its data goes
        held = any(plan.held for plan in plans)
        exit_runs = all(plan.exit_still_runs for plan in plans if plan.held)
        for dataset, steps in readers.items():
            if all(finished for *_, finished, _ in steps):
                if dataset in requested:
                    requested.discard(dataset)
                    self.release(dataset, source)
                continue
            pending = sorted((stage, sid, step) for stage, sid, started, _, step in steps
                             if not started and (not held or exit_runs and step.exit_handler))
            if not pending or dataset in requested:
                continue
            stage, sid, step = pending[0]  # the earliest step still to come decides
            if sid not in pinned:  # (once a step: several datasets share it)
                pinned[sid] = step_requirements(step, spec, wf_pod).pinned(ds_mod.volume_pins(
                    self.view, meta.get("namespace") or "default",
                    [m.claim for m in step.pvc_mounts if m.claim]))
            waiting[dataset] = _Pending(stage, sid, pinned[sid],
                                        _volume_of(dataset, volumes))
        with self._lock:
            if uid in self._requested:  # not evicted meanwhile
                self._waiting[uid] = (source, waiting)
                self._waiting.move_to_end(uid)
        self._place(uid, source, requested, waiting, self.nodes())

    def _place(self, uid: str, source: str, requested: set[str],
               waiting: dict[str, _Pending], nodes: list[placement.NodeInfo]) -> None:
        """Warm the ``waiting`` datasets this node is chosen for, earliest stage first."""
        todo: list[WarmRequest] = []
        for dataset, p in list(waiting.items()):
            if dataset not in requested and self._warms_here(dataset, nodes, p.pod):
                todo.append(WarmRequest(dataset, source, p.step, p.stage, p.volume))
        for req in sorted(todo, key=lambda r: (r.stage, r.dataset)):  # earliest first
            with self._lock:
                if req.dataset in requested:  # a concurrent re-placement got there first
                    continue
                requested.add(req.dataset)
                waiting.pop(req.dataset, None)
            self.warm(req)

    # ------------------------------------------------------------ claims of workflow steps

    def _locate_claims(self, plans: list[Any], obj: dict[str, Any],
                       uid: str) -> list[ds_mod.VolumeDataset]:
        """Turn the steps' PVC mounts into reads of the datasets behind the claims.

        Each mount's claim (literal, parameter, ``volumeClaimTemplates`` claim of this run, a
        created claim whose name the Workflow fixes) is looked up: bound to a PV of our driver,
        it becomes reads (narrowed by subPath and the paths the step names under the mount);
        not bound yet (or not existing yet), the workflow waits for that claim's events; bound
        to another driver, it is no dataset. Returns the volumes found (for their attributes).
        """
        from prefetchd import pipeline

        meta = obj.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        found: list[ds_mod.VolumeDataset] = []
        waiting: set[tuple[str, str]] = set()

        def locate(_step: Any, mount: Any) -> str | None:
            claim = pipeline.claim_name(mount, obj)
            if not claim:
                return None
            try:
                ds = ds_mod.claim_dataset(self.view, namespace, claim)
            except Exception as exc:  # API trouble: tried again at the next event
                log.warning("workflow %s/%s: cannot look up claim %s: %s", namespace,
                            meta.get("name"), claim, exc)
                ds = None
            if ds is None:
                waiting.add((namespace, claim))
                return None
            found.append(ds)
            return ds.location

        for plan in plans:
            pipeline.map_mounts(plan, locate)
        with self._lock:
            self._forget_claims(uid)
            if waiting:
                for key in waiting:
                    self._awaiting.setdefault(key, set()).add(uid)
                self._awaiting_wf[uid] = (obj, waiting)
                while len(self._awaiting_wf) > self.config.max_awaiting:
                    self._forget_claims(next(iter(self._awaiting_wf)))
        return found

    def _forget_claims(self, uid: str) -> None:
        """Drop ``uid`` from the claim waiters (lock held)."""
        _, keys = self._awaiting_wf.pop(uid, (None, ()))
        for key in keys:
            uids = self._awaiting.get(key)
            if uids is not None:
                uids.discard(uid)
                if not uids:
                    del self._awaiting[key]

    def on_pvc(self, etype: str, obj: dict[str, Any]) -> None:
        """A claim changed: the workflows waiting for it are evaluated again."""
        meta = obj.get("metadata") or {}
        self._note("pvc", etype, obj)
        if etype != "DELETED":
            self._claim_changed((meta.get("namespace") or "", meta.get("name") or ""))

    def on_pv(self, etype: str, obj: dict[str, Any]) -> None:
        """A PV changed (e.g. bound to a claim): the workflows waiting for its claim, again."""
        ref = (obj.get("spec") or {}).get("claimRef") or {}
        self._note("pv", etype, obj)
        if etype != "DELETED" and ref.get("name"):
            self._claim_changed((ref.get("namespace") or "", ref["name"]))

    def _note(self, kind: str, etype: str, obj: dict[str, Any]) -> None:
        """Hand a watched claim/PV to the view, so lookups see it now, not after a TTL."""
        note = getattr(self.view, "note", None)
        if note is not None:
            note(kind, obj if etype != "DELETED" else None, obj)

    def _claim_changed(self, key: tuple[str, str]) -> None:
        with self._lock:
            objs = [self._awaiting_wf[u][0] for u in sorted(self._awaiting.get(key, ()))
                    if u in self._awaiting_wf]
        for wf in objs:
            log.debug("claim %s/%s changed: evaluating workflow %s again", *key,
                      (wf.get("metadata") or {}).get("name"))
            self.on_workflow("MODIFIED", wf, observe=False)

    # ------------------------------------------------------------ re-placement on node changes

    def _nodes_changed(self) -> None:
        """A placement input changed: re-place pending workflows once, ``replan_delay`` later.

        Bursts (a node pool scaling, every agent re-annotating) coalesce into one pass: the
        first change arms a timer, later ones within the delay ride on it.
        """
        with self._lock:
            if self._replan_timer is not None or self._closed:
                return
            t = self._replan_timer = threading.Timer(self.config.replan_delay, self.replan)
            t.name, t.daemon = "prefetchd-replan", True
        t.start()

    def replan(self) -> None:
        """Re-run placement for every remembered workflow's steps that have not started."""
        with self._lock:
            self._replan_timer = None
            work = [(uid, source, self._requested[uid], waiting)
                    for uid, (source, waiting) in self._waiting.items()
                    if waiting and uid in self._requested]
        nodes = self.nodes()
        log.debug("nodes changed: re-placing %d workflows", len(work))
        for uid, source, requested, waiting in work:
            self._place(uid, source, requested, waiting, nodes)
        for hook in self.replan_hooks:
            try:
                hook()
            except Exception:  # noqa: BLE001 - one hook must not stop re-placement
                log.exception("re-placement hook failed")

    def close(self) -> None:
        """Cancel a pending re-placement (the agent is stopping)."""
        with self._lock:
            self._closed = True
            t, self._replan_timer = self._replan_timer, None
        if t is not None:
            t.cancel()

    def _claim(self, uid: str, source: str) -> set[str]:
        """The datasets requested for workflow ``uid`` (seeded from pins held before a restart)."""
        with self._lock:
            requested = self._requested.get(uid)
            if requested is None:
                requested = self._requested[uid] = self._held.pop(source, set())
            self._requested.move_to_end(uid)
            while len(self._requested) > self.config.max_workflows:
                old, _ = self._requested.popitem(last=False)
                self._waiting.pop(old, None)
            return requested

    def reconcile_pins(self) -> None:
        """After a workflow listing: release pins held for workflows the listing lacks.

        Workflows that still exist claimed their pins when listed (:meth:`_claim`), and
        their done or finished datasets were released by :meth:`on_workflow` as usual; what
        is left belongs to workflows deleted while the agent was down. Pins of namespaces
        this agent does not watch are left alone (another agent's scope, or a TTL's).
        """
        ns = self.config.namespace
        with self._lock:
            left = {s: d for s, d in self._held.items()
                    if ns is None or s.split(" ", 1)[1].split("/", 1)[0] == ns}
            for s in left:
                del self._held[s]
        for source, datasets in sorted(left.items()):
            log.info("%s: gone while the agent was down; releasing %d datasets", source,
                     len(datasets))
            for dataset in sorted(datasets):
                self.release(dataset, source)

    def _analyze(self, obj: dict[str, Any], uid: str, rv: str, source: str) -> Any:
        from prefetchd import pipeline  # the analysis package (issue 3)

        with self._lock:
            templates = list(self._templates.values())
        try:
            return pipeline.analyze_documents([obj, *templates], source=source)
        except Exception as exc:  # PipelineError, or anything the analysis chokes on
            with self._lock:
                first = (uid, rv) not in self._bad
                self._bad[(uid, rv)] = None
                while len(self._bad) > 1000:
                    self._bad.popitem(last=False)
            if first:
                log.warning("%s: cannot analyse, skipped: %s", source, exc)
            return None

    # ------------------------------------------------------------ pending pods

    def on_pod(self, etype: str, obj: dict[str, Any]) -> None:
        if etype == "DELETED" or (obj.get("status") or {}).get("phase") != "Pending":
            return
        if (obj.get("spec") or {}).get("nodeName") not in (None, "", self.config.node_name):
            return  # already bound elsewhere
        meta = obj.get("metadata") or {}
        owner = workflow_of(obj)
        if owner is not None:
            self._on_step_pod(obj, owner)
            return
        if any(claims(obj) for claims in self.pod_owners):
            return
        source = f"pod {meta.get('namespace')}/{meta.get('name')}"
        try:
            found = ds_mod.pod_datasets(obj, self.view)
        except Exception as exc:
            log.warning("%s: cannot resolve datasets: %s", source, exc)
            return
        spec = obj.get("spec") or {}
        pod = placement.PodRequirements.from_pod_spec(spec).pinned(ds_mod.spec_pins(
            self.view, meta.get("namespace") or "default", spec))
        bound_here = spec.get("nodeName") == self.config.node_name
        for dataset in found:
            if bound_here or self._warms_here(dataset, self.nodes(), pod):
                self.warm(WarmRequest(dataset, source, meta.get("name", ""), 0,
                                      urgent=bound_here))


    def _on_step_pod(self, obj: dict[str, Any], owner: tuple[str, str, str]) -> None:
        """A workflow's step pod: its data is the workflow's, pinned under the workflow.

        Nothing is warmed for it on its own account (no TTL pin that the workflow's DAG would
        never release). Only when it is bound to this node, and the workflow is known here, are
        its datasets warmed as the workflow's, once per pod and urgent (the step's last chance
        when it landed elsewhere than its data, or its data's warm still queued here: the
        worker's urgent lane starts it at once); the workflow's DAG releases them as usual.
        """
        meta = obj.get("metadata") or {}
        namespace, name, uid = owner
        bound_here = (obj.get("spec") or {}).get("nodeName") == self.config.node_name
        with self._lock:
            uid = uid or self._wf_uids.get((namespace, name), "")
            requested = self._requested.get(uid)
            seen = self._step_pods.get(meta.get("uid"))
            first = seen is None
            # True once its bound-here warm was asked for (once per pod, not per event)
            self._step_pods[meta.get("uid")] = bool(seen) or (bound_here and
                                                               requested is not None)
            self._step_pods.move_to_end(meta.get("uid"))
            while len(self._step_pods) > self.config.max_workflows:
                self._step_pods.popitem(last=False)
        if first:
            log.info("pod %s/%s: a step of workflow %s; its data is the workflow's", namespace,
                     meta.get("name"), name)
        if requested is None or not bound_here or seen:
            return
        source = f"workflow {namespace}/{name}"
        node_name = (meta.get("annotations") or {}).get(ARGO_NODE_NAME_ANNOTATION, "")
        step = node_name.rsplit(".", 1)[-1] if node_name else meta.get("name", "")
        try:
            found = ds_mod.pod_datasets(obj, self.view)
        except Exception as exc:
            log.warning("pod %s/%s: cannot resolve datasets: %s", namespace, meta.get("name"),
                        exc)
            return
        for dataset in found:
            with self._lock:
                asked = dataset in requested
                requested.add(dataset)
            # asked for already (queued behind other work, or warmed: then the worker skips
            # it at once): asked again, first in line, as the pod reads it now
            log.info("%s: step pod %s bound here%s: warming %s now", source,
                     meta.get("name"), "" if asked else " before its data", dataset)
            self.warm(WarmRequest(dataset, source, step, 0, urgent=True))


ARGO_WORKFLOW_LABEL = "workflows.argoproj.io/workflow"
ARGO_NODE_NAME_ANNOTATION = "workflows.argoproj.io/node-name"


def workflow_of(pod: dict[str, Any]) -> tuple[str, str, str] | None:
    """(namespace, workflow name, uid or "") when the pod is a step of an Argo Workflow.

    Argo's controller labels every step pod ``workflows.argoproj.io/workflow: <name>`` and
    makes the Workflow its controlling owner (KFP v2 pods are Argo pods, so the same holds).
    """
    meta = pod.get("metadata") or {}
    namespace = meta.get("namespace") or "default"
    for ref in meta.get("ownerReferences") or []:
        if ref.get("kind") == "Workflow" and str(ref.get("apiVersion", "")).startswith(
                "argoproj.io/") and ref.get("name"):
            return namespace, ref["name"], ref.get("uid") or ""
    name = (meta.get("labels") or {}).get(ARGO_WORKFLOW_LABEL)
    return (namespace, name, "") if name else None


def _volume_of(dataset: str,
               volumes: list[ds_mod.VolumeDataset]) -> ds_mod.VolumeDataset | None:
    """The volume a (possibly narrowed) dataset is read through: the longest location under it."""
    best = None
    for v in volumes:
        if (dataset.startswith(v.location) or dataset == v.location.rstrip("/")) and (
                best is None or len(v.location) > len(best.location)):
            best = v
    return best


def build_watchers(
    make_transport: Callable[[], kw.Transport], agent: Agent, options: kw.WatchOptions
) -> kw.WatchGroup:
    """The agent's watchers, one transport each (stop() aborts only its own streams).

    Nodes and templates come first so that workflows listed at start resolve against them.
    """
    cluster = dataclasses.replace(options, namespace=None)
    pending = dataclasses.replace(options, field_selector="status.phase=Pending")
    return kw.WatchGroup([
        kw.Watcher(make_transport(), kw.NODES, agent.on_node, cluster),
        kw.Watcher(make_transport(), kw.CLUSTER_WORKFLOW_TEMPLATES, agent.on_template, cluster),
        kw.Watcher(make_transport(), kw.WORKFLOW_TEMPLATES, agent.on_template, options),
        kw.Watcher(make_transport(), kw.PVS, agent.on_pv, cluster),
        kw.Watcher(make_transport(), kw.PVCS, agent.on_pvc, options),
        kw.Watcher(make_transport(), kw.WORKFLOWS, agent.on_workflow, options,
                   on_listed=agent.reconcile_pins),
        kw.Watcher(make_transport(), kw.PODS, agent.on_pod, pending),
    ])


SELF_READY_TIMEOUT = 30.0  # how long to wait for our own annotated Node before going on


def run_kubernetes(
    api_client: Any, config: AgentConfig, warm: WarmFn, release: ReleaseFn | None = None,
    stop: threading.Event | None = None, observer: ObserveFn | None = None,
    held: Iterable[tuple[str, str]] = (), workload: Any = None,
    node_hooks: Iterable[Callable[[str, dict[str, Any]], None]] = (),
) -> None:
    """Run the agent until ``stop`` is set (blocking).

    ``held``: (source, dataset) of the pins recorded before this start (reconciled after the
    first workflow listing, see :meth:`Agent.reconcile_pins`). ``workload``: options of the
    training-work watch (:func:`prefetchd.k8s.workload_watch.attach`), None: not watched.
    ``node_hooks``: called with every Node event (the cache group's membership).
    """
    stop = stop or threading.Event()
    agent = Agent(config, ds_mod.ApiClusterView(api_client), warm, release, observer, held)
    agent.node_hooks.extend(node_hooks)
    jobs = None
    if workload is not None:
        from prefetchd.k8s import workload_watch

        jobs = workload_watch.attach(agent, workload, warm, release or agent.release, held)
    group = build_watchers(lambda: kw.ClientTransport(api_client), agent,
                           kw.WatchOptions(namespace=config.namespace))
    nodes, rest = kw.WatchGroup(group.watchers[:1]), kw.WatchGroup(group.watchers[1:])
    nodes.start()
    try:
        deadline = time.monotonic() + SELF_READY_TIMEOUT
        while not agent.self_ready.wait(0.2):
            if stop.is_set():
                return
            if time.monotonic() > deadline:
                log.warning("node %s not seen with %s after %.0fs; watching anyway (this node "
                            "is no candidate until it is)", config.node_name,
                            placement.CACHE_FREE_ANNOTATION, SELF_READY_TIMEOUT)
                break
        rest.start()
        if jobs is not None:
            jobs.start(lambda: kw.ClientTransport(api_client),
                       kw.WatchOptions(namespace=config.namespace))
        log.info("prefetchd agent on node %s watching %s", config.node_name,
                 config.namespace or "all namespaces")
        try:
            stop.wait()
        finally:
            if jobs is not None:
                jobs.stop()
            rest.stop()
    finally:
        nodes.stop()
        agent.close()


# ---------------------------------------------------------------- CLI hooks


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``prefetchd run --kubernetes`` (the CLI adds ``--kubernetes`` itself).

    The warm options (--cache-dir, --endpoint-url, --concurrency, --bandwidth-limit,
    --pin-ttl) are ``run``'s own and shared with ``run --watch-dir``.
    """
    parser.add_argument("--kubeconfig",
                        help="kubeconfig file (default: in-cluster config, else $KUBECONFIG)")
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("--namespace", help="watch workflows and pods in this namespace only "
                                           "(default: all namespaces)")
    scope.add_argument("--all-namespaces", action="store_true", help="watch all namespaces")
    parser.add_argument("--replicas", type=int, default=1,
                        help="nodes that warm each dataset (the webhook must use the same) "
                             "(default 1)")
    parser.add_argument("--node-name", default=os.environ.get("NODE_NAME", ""),
                        help="this node (default: $NODE_NAME from the downward API)")
    from fusecache.cliargs import port

    parser.add_argument("--metrics-port", type=port("--metrics-port"), default=None,
                        metavar="PORT",
                        help="serve Prometheus metrics on this port (default: off)")
    parser.add_argument("--publish-interval", type=float, default=30.0, metavar="SECONDS",
                        help="patch this Node's free space and labels this often (default 30)")
    parser.add_argument("--queued-share", type=float, default=0.5, metavar="FRACTION",
                        help="at most this share of the node cache is pinned for jobs still "
                        "queued (Kueue, suspended); 0 warms no queued job (default 0.5)")
    parser.add_argument("--pod-pin-ttl", type=float, default=6 * 3600.0, metavar="SECONDS",
                        help="pins of pending-pod warms expire after this (default 6 h)")
    g = parser.add_argument_group("cache group (docs/cache-group.md)")
    g.add_argument("--peer-listen", default=None, metavar="HOST:PORT",
                   help="serve this node cache's blocks to the group's peers here, publish "
                        "this node in the group and write CACHE_DIR/group.json from the "
                        "annotated Nodes (default: off, no group)")
    g.add_argument("--no-peer-lane", dest="peer_lane", action="store_false",
                   help="serve blocks over gRPC only, not also over the block lane on the "
                        "next port (--peer-listen's PORT + 1; fusecache/peer_lane.py)")
    g.add_argument("--peer-advertise", default=None, metavar="HOST:PORT",
                   help="the address peers dial (default: $POD_IP and the listen port, else "
                        "the Node's InternalIP)")
    g.add_argument("--peer-ca", default=None, metavar="FILE",
                   help="CA bundle (PEM) that signed every peer's certificate (default: none; "
                        "see --peer-tls-secret)")
    g.add_argument("--peer-cert", default=None, metavar="FILE",
                   help="this node's peer certificate (PEM; its name is the Node's) "
                        "(default: none)")
    g.add_argument("--peer-key", default=None, metavar="FILE",
                   help="its private key (PEM) (default: none)")
    g.add_argument("--peer-tls-secret", default=None, metavar="PREFIX",
                   help="take this node's peer certificate from the kubernetes.io/tls Secret "
                        "PREFIX-<node> (tls.crt, tls.key, ca.crt) in --peer-tls-namespace, "
                        "kept in CACHE_DIR/peer-tls (instead of --peer-ca/--peer-cert/--peer-key) "
                        "(default: none)")
    g.add_argument("--peer-tls-namespace", default=os.environ.get("POD_NAMESPACE") or
                   "fusecache-system", metavar="NS",
                   help="namespace of that Secret (default: $POD_NAMESPACE, else "
                        "fusecache-system)")
    g.add_argument("--peer-issuer", default=None, metavar="KIND/NAME",
                   help="with --peer-tls-secret: ask cert-manager for the certificate "
                        "(a Certificate PREFIX-<node> issued by this Issuer or ClusterIssuer) "
                        "(default: the Secret is made by hand)")
    g.add_argument("--peer-insecure", action="store_true",
                   help="serve and ask peers without TLS or authentication (tests and "
                        "development only; default off: --peer-ca/--peer-cert/--peer-key)")
    g.add_argument("--group-striping", action="store_true",
                   help="spread every dataset over the group: each node warms only the "
                        "blocks it owns (--replicas owners per block) (default off)")


KUBERNETES_ONLY = ("kubeconfig", "namespace", "all_namespaces", "metrics_port", "peer_listen",
                   "peer_advertise", "peer_ca", "peer_cert", "peer_key", "peer_insecure",
                   "peer_tls_secret", "peer_issuer", "group_striping")


def check_arguments(args: argparse.Namespace) -> str | None:
    """A one-line reason why these ``run --kubernetes`` arguments cannot work, or None."""
    if args.replicas < 1:
        return "--replicas must be at least 1"
    if not 0 <= getattr(args, "queued_share", 0.5) <= 1:
        return "--queued-share must be between 0 and 1"
    if args.publish_interval <= 0:
        return "--publish-interval must be positive"
    if not args.node_name:
        return "--node-name (or $NODE_NAME) is required"
    problem = _check_peer_arguments(args)
    if problem:
        return problem
    if not args.kubeconfig and not os.environ.get("KUBERNETES_SERVICE_HOST") \
            and not os.environ.get("KUBECONFIG"):
        return "not in a pod: give --kubeconfig FILE (or set $KUBECONFIG)"
    if args.kubeconfig and not os.path.isfile(args.kubeconfig):
        return f"--kubeconfig {args.kubeconfig}: no such file"
    return kubeconfig_problem(args.kubeconfig)


def kubeconfig_problem(flag_value: str | None) -> str | None:
    """Why the kubeconfig in use (--kubeconfig, else $KUBECONFIG outside a pod) cannot be
    read, naming the file and the line or field; None when it reads (or is in-cluster).
    Checked at start: the client library's ConfigException or ScannerError was exit 1."""
    import yaml

    path, label = flag_value, "--kubeconfig"
    if not path and not os.environ.get("KUBERNETES_SERVICE_HOST"):
        path, label = os.environ.get("KUBECONFIG") or None, "$KUBECONFIG"
    if not path or os.pathsep in path:  # (a list of files: the library merges them)
        return None
    where = f"{label} {path}"
    try:
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f)
    except FileNotFoundError:
        return f"{where}: no such file"
    except OSError as e:
        return f"{where}: cannot read: {e.strerror or e}"
    except UnicodeDecodeError as e:
        return f"{where}: not UTF-8 text (byte {e.start})"
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        return f"{where}:{line} malformed YAML: {problem}"
    if not isinstance(doc, dict):
        return f"{where}: not a kubeconfig (a {type(doc).__name__}, not a mapping)"
    for key in ("clusters", "contexts", "users"):
        items = doc.get(key)
        if items is not None and not isinstance(items, list):
            return f"{where}: {key}: expected a list, got {type(items).__name__}"
        for i, item in enumerate(items or []):
            if not isinstance(item, dict) or not item.get("name"):
                return f"{where}: {key}[{i}]: expected a mapping with a name"
    return None


def _host_port(value: str, flag: str, empty_host: bool) -> str | None:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536 or (not host and
                                                                        not empty_host):
        return f"{flag} {value}: not HOST:PORT"
    return None


def _check_peer_arguments(args: argparse.Namespace) -> str | None:
    listen = getattr(args, "peer_listen", None)
    tls = [getattr(args, f"peer_{k}", None) for k in ("ca", "cert", "key")]
    if listen is None:
        for flag in ("peer_advertise", "peer_ca", "peer_cert", "peer_key", "peer_insecure",
                     "peer_tls_secret", "peer_issuer", "group_striping"):
            if getattr(args, flag, None):
                return f"--{flag.replace('_', '-')} needs --peer-listen"
        return None
    problem = _host_port(listen, "--peer-listen", False)
    if problem:
        return problem
    if args.peer_advertise and _host_port(args.peer_advertise, "--peer-advertise", True):
        return _host_port(args.peer_advertise, "--peer-advertise", True)
    if any(tls) and not all(tls):
        return "--peer-ca, --peer-cert and --peer-key go together"
    secret = getattr(args, "peer_tls_secret", None)
    if secret and any(tls):
        return "--peer-tls-secret replaces --peer-ca/--peer-cert/--peer-key; give one"
    issuer = getattr(args, "peer_issuer", None)
    if issuer and not secret:
        return "--peer-issuer needs --peer-tls-secret"
    if issuer and (issuer.partition("/")[0] not in ("Issuer", "ClusterIssuer")
                   or not issuer.partition("/")[2]):
        return f"--peer-issuer {issuer}: not Issuer/NAME or ClusterIssuer/NAME"
    if not any(tls) and not secret and not getattr(args, "peer_insecure", False):
        return ("--peer-listen needs a certificate (--peer-tls-secret, or --peer-ca, "
                "--peer-cert and --peer-key) for mutual TLS, or --peer-insecure (tests only)")
    for flag, path in zip(("--peer-ca", "--peer-cert", "--peer-key"), tls, strict=True):
        if path and not os.path.isfile(path):
            return f"{flag} {path}: no such file"
    return None


def peer_lane_listen(args: argparse.Namespace) -> str | None:
    """Where the block lane listens: --peer-listen's host, the port after its own (None
    with --no-peer-lane, or an ephemeral port 0)."""
    host, _, port = str(args.peer_listen).rpartition(":")
    if not getattr(args, "peer_lane", True) or not port.isdigit() or not 0 < int(port) < 65535:
        return None
    return f"{host}:{int(port) + 1}"


def peer_advertise(args: argparse.Namespace) -> str:
    """The endpoint published for peers: --peer-advertise, else $POD_IP:PORT, else :PORT
    (the Node's InternalIP, read from ``status.addresses`` by every agent)."""
    if args.peer_advertise:
        return str(args.peer_advertise)
    port = args.peer_listen.rpartition(":")[2]
    pod_ip = os.environ.get("POD_IP", "")
    return f"{pod_ip}:{port}" if pod_ip else f":{port}"


WATCH_POOL_SIZE = 64


def load_api_client(kubeconfig: str | None) -> Any:
    from kubernetes import client, config

    if not kubeconfig and not os.environ.get("KUBERNETES_SERVICE_HOST"):
        kubeconfig = os.environ.get("KUBECONFIG") or None
    if kubeconfig:
        cfg = client.Configuration()
        try:
            config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
        except config.ConfigException as e:  # a context or user it lacks: bad input
            text = " ".join(str(e).split()).removeprefix("Invalid kube-config file. ")
            raise ValueError(f"kubeconfig {kubeconfig}: {text}") from None
    else:
        config.load_incluster_config()
        cfg = client.Configuration.get_default_copy()
    # One connection per open watch (up to ~25 with every training-work CRD installed) plus
    # GETs and Node patches: the default (5 x CPUs) would discard connections under load.
    cfg.connection_pool_maxsize = max(cfg.connection_pool_maxsize or 0, WATCH_POOL_SIZE)
    return client.ApiClient(cfg)


def _install_stop_handlers(stop: threading.Event) -> None:
    def on_signal(signum: int, _frame: object) -> None:
        log.info("signal %d: stopping", signum)
        stop.set()

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, on_signal)


def run(args: argparse.Namespace, warm: WarmFn | None = None,
        release: ReleaseFn | None = None) -> int:
    """Entry point for ``prefetchd run --kubernetes``; SIGTERM/SIGINT stop it gracefully.

    Without ``warm``/``release`` the real ones are wired: a WarmWorker on ``args.cache_dir``
    (see :mod:`prefetchd.k8s.worker`) that also publishes the Node and feeds the metrics.
    Injected callbacks replace both (no cache, no Node patches: a test or dry-run seam).
    """
    from prefetchd.k8s import credentials as credentials_mod
    from prefetchd.k8s import metrics as metrics_mod
    from prefetchd.k8s import worker as worker_mod

    problem = check_arguments(args)
    if problem:
        raise ValueError(problem)
    stop = threading.Event()
    _install_stop_handlers(stop)
    striping = bool(getattr(args, "group_striping", False))
    config = AgentConfig(node_name=args.node_name, replicas=args.replicas,
                         namespace=None if args.all_namespaces else args.namespace,
                         striping=striping)
    peer_listen = getattr(args, "peer_listen", None)
    membership = None
    if peer_listen:
        from fusecache.group import TlsFiles
        from prefetchd.k8s import group_watch

        tls = TlsFiles(args.peer_ca, args.peer_cert, args.peer_key) if args.peer_ca else None
        if getattr(args, "peer_tls_secret", None):
            tls = TlsFiles(*(os.path.join(args.cache_dir, PEER_TLS_DIR, f)
                             for f in ("ca.crt", "tls.crt", "tls.key")))
        membership = group_watch.GroupMembership(args.node_name, args.cache_dir, args.replicas,
                                                 striping, tls)
    metrics = metrics_mod.AgentMetrics(args.node_name)
    server = None
    with load_api_client(args.kubeconfig) as api_client:
        from prefetchd.k8s import workload_watch

        worker = None
        held: list[tuple[str, str]] = []
        workload = workload_watch.WorkloadConfig(
            node_name=args.node_name, replicas=args.replicas, namespace=config.namespace,
            paced=warm is None, metrics=metrics, striping=striping)
        if warm is None:
            worker = worker_mod.WarmWorker(
                worker_mod.WorkerConfig(
                    cache_dir=args.cache_dir, node_name=args.node_name,
                    endpoint_url=args.endpoint_url, concurrency=args.concurrency,
                    bandwidth=args.bandwidth_limit, pin_ttl=args.pin_ttl,
                    pod_pin_ttl=args.pod_pin_ttl, publish_interval=args.publish_interval,
                    striping=striping, replicas=args.replicas),
                worker_mod.NodePublisher(api_client, args.node_name), metrics, stop,
                store_configs=credentials_mod.VolumeCredentials(
                    api_client, args.endpoint_url).store_config)
            worker.publish()  # before watching: placement counts only annotated nodes
            worker.start()
            warm, release = worker.warm, worker.release
            held = worker.held()
            workload = dataclasses.replace(
                workload, queued_limit_bytes=int(getattr(args, "queued_share", 0.5) *
                                                 worker.cache_limit()),
                finished_hooks=worker.finished_hooks)
        if args.metrics_port is not None:
            server = metrics.serve(args.metrics_port)
            log.info("metrics on :%d/metrics", args.metrics_port)
        peers = None
        try:
            if getattr(args, "peer_tls_secret", None):
                _peer_certificate(api_client, args, stop)
            if membership is not None and not stop.is_set():
                membership.write()  # a group of none until the Nodes are listed
                if worker is not None:
                    membership.on_change.append(_rebalance_on_change(worker))
                peers = _start_peer_server(args, membership.path)
                if worker is not None:
                    worker.set_peer_endpoint(peer_advertise(args), peers.lane_port)
            run_kubernetes(api_client, config, warm, release, stop, metrics.observe_workflow,
                           held, workload,
                           node_hooks=[membership.on_node] if membership is not None else [])
        finally:
            if peers is not None:
                peers.stop()
            if worker is not None:
                worker.stop()
            if server is not None:
                server.shutdown()
    log.info("prefetchd agent stopped")
    return 0


def _rebalance_on_change(worker: Any) -> Callable[[Any, Any], None]:
    """A group-change hook: when the members or their weights change, the striped records
    are warmed again (this node's new share)."""
    def hook(group: Any, old: Any) -> None:
        def shape(g: Any) -> Any:
            return None if g is None else sorted((m.name, m.weight) for m in g.members)

        if shape(group) != shape(old):
            worker.rebalance()

    return hook


PEER_TLS_DIR = "peer-tls"  # under --cache-dir: the CSI plugin's mounts read it too
PEER_TLS_WAIT = 300.0  # how long to wait for the certificate's Secret at start


def _peer_certificate(api_client: Any, args: argparse.Namespace, stop: threading.Event) -> None:
    """This node's peer certificate from its Secret (asked of cert-manager first with
    --peer-issuer): waits for it (bounded), then refreshes it every --publish-interval."""
    from prefetchd.k8s import peer_tls

    tls = peer_tls.PeerTls(api_client, args.peer_tls_namespace, args.peer_tls_secret,
                           args.node_name, os.path.join(args.cache_dir, PEER_TLS_DIR),
                           args.peer_issuer)
    deadline = time.monotonic() + PEER_TLS_WAIT
    while True:
        try:
            tls.ensure_certificate()
            tls.refresh()
            break
        except peer_tls.PeerTlsError as e:
            if time.monotonic() > deadline:
                raise ValueError(f"no peer certificate: {e}") from None
            log.info("waiting for the peer certificate: %s", e)
        if stop.wait(2.0):
            return

    def loop() -> None:
        while not stop.wait(args.publish_interval):
            try:
                tls.refresh()
            except Exception as e:  # noqa: BLE001 - keep the files we have; retry later
                log.warning("peer certificate not refreshed: %s", e)

    threading.Thread(target=loop, name="prefetchd-peer-tls", daemon=True).start()


def _start_peer_server(args: argparse.Namespace, group_file: Any) -> Any:
    """The peer server (fusecache.peer_server) on --peer-listen, in this process: it serves
    this node cache's blocks to the members of the group file the agent keeps."""
    from fusecache import peer_server

    server = peer_server.PeerServer(args.cache_dir, args.peer_listen, group_path=group_file,
                                    insecure=bool(getattr(args, "peer_insecure", False)),
                                    lane_listen=peer_lane_listen(args))
    try:
        server.start()
    except peer_server.PeerConfigError as e:
        raise ValueError(str(e)) from None
    log.info("serving this node cache to the cache group on %s", args.peer_listen)
    return server


def add_webhook_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``prefetchd webhook``."""
    parser.add_argument("--kubeconfig",
                        help="kubeconfig file (default: in-cluster config, else $KUBECONFIG)")
    parser.add_argument("--port", type=int, default=8443,
                        help="HTTPS port the API server calls (default 8443)")
    parser.add_argument("--tls-cert-file", required=True, help="serving certificate (PEM)")
    parser.add_argument("--tls-key-file", required=True, help="its private key (PEM)")
    parser.add_argument("--replicas", type=int, default=1,
                        help="must equal the agents' --replicas (default 1)")
    parser.add_argument("--group-striping", action="store_true",
                        help="the agents run with --group-striping: steer no pod, since no "
                             "node holds a dataset whole (default off)")


def check_webhook_arguments(args: argparse.Namespace) -> str | None:
    """A one-line reason why these ``webhook`` arguments cannot work, or None."""
    for flag, path in (("--tls-cert-file", args.tls_cert_file),
                       ("--tls-key-file", args.tls_key_file)):
        if not os.path.isfile(path):
            return f"{flag} {path}: no such file"
    if args.replicas < 1:
        return "--replicas must be at least 1"
    if not 0 <= args.port < 65536:
        return f"--port {args.port}: not a port"
    if not args.kubeconfig and not os.environ.get("KUBERNETES_SERVICE_HOST") \
            and not os.environ.get("KUBECONFIG"):
        return "not in a pod: give --kubeconfig FILE (or set $KUBECONFIG)"
    if args.kubeconfig and not os.path.isfile(args.kubeconfig):
        return f"--kubeconfig {args.kubeconfig}: no such file"
    return tls_problem(args.tls_cert_file, args.tls_key_file) or \
        kubeconfig_problem(args.kubeconfig)


def tls_problem(cert: str, key: str) -> str | None:
    """Why the serving certificate and key cannot be loaded, naming the file at fault;
    None when they load (an ``SSLError: [SSL] PEM lib`` at start was exit 1)."""
    import ssl

    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_verify_locations(cafile=cert)
    except ssl.SSLError:
        return f"--tls-cert-file {cert}: not a PEM certificate"
    except OSError as e:
        return f"--tls-cert-file {cert}: cannot read: {e.strerror or e}"
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert, key)
    except ssl.SSLError as e:
        if e.reason == "KEY_VALUES_MISMATCH":
            return f"--tls-key-file {key}: not the private key of --tls-cert-file {cert}"
        return f"--tls-key-file {key}: not a PEM private key (or an encrypted one)"
    except OSError as e:
        return f"--tls-key-file {key}: cannot read: {e.strerror or e}"
    return None


def run_webhook(args: argparse.Namespace) -> int:
    """Entry point for ``prefetchd webhook``; SIGTERM stops it."""
    from prefetchd.k8s import webhook

    problem = check_webhook_arguments(args)
    if problem:
        raise ValueError(problem)
    stop = threading.Event()
    _install_stop_handlers(stop)
    with load_api_client(args.kubeconfig) as api_client:
        view = ds_mod.ApiClusterView(api_client)
        with webhook.WebhookServer(view, webhook.WebhookConfig(replicas=args.replicas,
                                                         striping=args.group_striping),
                                   args.tls_cert_file, args.tls_key_file,
                                   port=args.port) as server:
            log.info("prefetchd webhook listening on :%d", server.port)
            stop.wait()
    log.info("prefetchd webhook stopped")
    return 0
