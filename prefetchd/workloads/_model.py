"""The common model of upcoming training work: what every adapter yields, whatever the kind.

Who uses it: the adapters (``_batch``, ``_jobset``, ``_kubeflow``, ``_trainjob``, ``_katib``,
``_kueue``) build :class:`UpcomingWork`; ``prefetchd plan`` renders it (``plan_cli``); the node
agent (:mod:`prefetchd.k8s.workload_watch`) and the webhook (:mod:`prefetchd.k8s.job_steering`)
consume it with no kind-specific branch.

Data flow: one API object (plus runtimes / ConfigMaps / priority classes from a
:class:`~prefetchd.workloads._library.Library`) -> one ``UpcomingWork``:

* ``groups``: one :class:`PodGroup` per pod template that will run (a replica type, a
  replicated Job, a Kueue pod set), with the number of pods made from it, its PodSpec as the
  controller will build it, the datasets it names (:class:`DatasetRef`) and the groups that
  must finish before it starts (``after``: JobSet ``dependsOn``). Every pod of a group is
  counted as a node of its own: a worker of a distributed job is sized to a node and the
  scheduler spreads them, and with a shuffling distributed sampler every worker reads the
  whole dataset (TrainJob ``numProcPerNode`` is processes inside one pod, not pods).
* ``state`` (:class:`State`), the Kueue ``queue`` / ``priority_class`` / ``priority`` and
  ``created`` (queue order), and ``copies`` (how many runs of the groups go at once: a Katib
  Experiment's ``parallelTrialCount``; 1 otherwise).
* ``release_key``: the pins of this work are recorded and released under it. A Trial shares
  its Experiment's key (the dataset stays until the Experiment ends); a Kueue Workload
  shares its job's. ``owner`` is the key of the controller object that made this one, when
  that owner is a kind prefetchd reads (a TrainJob's JobSet, a JobSet's Jobs, a Trial's run
  object, a job's Workload): the owner already describes the same pods. ``queue_record``
  marks work whose state and priority are its owner's place in a queue (a Kueue Workload).

:meth:`UpcomingWork.targets` turns that into what placement needs: per dataset and per set of
scheduling constraints, how many nodes should hold it; :func:`order_key` is the warm order.
Everything here is pure: no API reads (PVC claims are resolved by a caller-given function).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from prefetchd.k8s import placement
from prefetchd.pipeline._model import warmable_uri
from prefetchd.pipeline._uri import location_under

PLACEHOLDER = "${"  # Katib's ${trialParameters.x} / ${trialSpec.Name}: only known per Trial


class WorkloadError(ValueError):
    """An object prefetchd cannot read; the message is one line naming the object and field."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split("\n")) if "\n" in str(message) else message)


class State(enum.StrEnum):
    """Where the work is in its life; only the first three can still use warm data."""


    QUEUED = "queued"  # suspended, or its Kueue Workload has no quota yet: free lead time
    ADMITTED = "admitted"  # may start now (pods being made or Pending): warm first of all
    RUNNING = "running"  # pods running; later pods (restarts, next trials) still read
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    INACTIVE = "inactive"  # a Kueue Workload deactivated (spec.active: false): will not run

    @property
    def done(self) -> bool:
        """Nothing of it will run (again): its pins can go."""
        return self in (State.SUCCEEDED, State.FAILED, State.INACTIVE)

    @property
    def why_nothing(self) -> str:
        """Why work in this state is not warmed (a ``done`` state)."""
        return ("nothing of it runs while it stays inactive" if self is State.INACTIVE
                else "nothing of it will run again")


@dataclass(frozen=True)
class MadeClaim:
    """A claim a work makes from a template (a JobSet's ``volumeClaimPolicies``): its name and
    the StorageClass its template names (a fusecache class with a fixed prefix holds a
    dataset; another's is new and empty)."""

    name: str
    storage_class: str | None = None


@dataclass(frozen=True)
class DatasetRef:
    """One place a pod template reads data from, as written (before PVC resolution).

    Exactly one of: ``uri`` (an object-store URI; only s3/s3a can be warmed), ``claim`` (a PVC
    by name, with ``path`` under the volume, to be resolved by the caller to its PV's
    bucket/prefix), or ``pattern`` (text still holding a placeholder: only known at run time).
    ``direction`` "unknown": the pod may read or write it (``--checkpoint-dir``,
    ``--model_dir``: prefetchd/pipeline/_uri.py); shown, never warmed, as in a pipeline's plan.
    """

    origin: str  # "arg", "env NAME", "storageUri", "pvc VOLUME", "csi VOLUME"
    container: str = ""
    uri: str | None = None
    claim: str | None = None
    path: str = ""  # under the claim's volume (pipeline/_pvc.py dataset_under: "a/" a folder)
    pattern: str | None = None
    direction: str = "read"  # or "unknown"
    made: bool = False  # a claim the work makes from a template (volumeClaimPolicies): new
    # a generic ephemeral volume's claim, made per pod (``<pod>-VOLUME``) from a template of
    # this StorageClass ("" the default one): a fusecache class's is a dataset
    ephemeral_class: str | None = None

    @property
    def scheme(self) -> str | None:
        if self.uri and "://" in self.uri:
            return self.uri.split("://", 1)[0].lower()
        return None

    @property
    def warmable(self) -> bool:
        """An S3 location known now that the pod reads (a PVC still needs resolving)."""
        return warmable_uri(self.uri) and self.direction == "read"

    def describe(self) -> str:
        if self.uri:
            return self.uri
        if self.claim:
            return f"pvc {self.claim}" + (f" /{self.path}" if self.path else "")
        return f"(runtime: {self.pattern})"

    def to_json(self, resolve: Resolver | None = None) -> dict[str, Any]:
        """*resolve*: the location to warm it at, as ``resolved`` (null: none, not warmed)."""
        out: dict[str, Any] = {"origin": self.origin, "container": self.container}
        for k in ("uri", "claim", "pattern"):
            if getattr(self, k) is not None:
                out[k] = getattr(self, k)
        if self.claim:
            out["path"] = self.path
            out["made"] = self.made
            if self.ephemeral_class is not None:
                out["ephemeralStorageClass"] = self.ephemeral_class
        out["direction"] = self.direction
        resolved = (resolve or s3_only)(self)
        out["resolved"] = resolved
        out["warmable"] = resolved is not None
        return out


def _together_on_a_host(spec: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether a required pod affinity with the host as its topology selects the pods of
    this very template (``matchLabels`` and ``In``/``Exists`` expressions on its labels)."""
    terms = (((spec.get("affinity") or {}).get("podAffinity") or {})
             .get("requiredDuringSchedulingIgnoredDuringExecution") or [])
    for term in terms if isinstance(terms, list) else []:
        if not isinstance(term, Mapping) or term.get("topologyKey") != "kubernetes.io/hostname":
            continue
        sel = term.get("labelSelector") or {}
        if not isinstance(sel, Mapping) or not sel:
            continue
        want = sel.get("matchLabels") or {}
        exprs = sel.get("matchExpressions") or []
        ok = isinstance(want, Mapping) and all(labels.get(k) == v for k, v in want.items())
        for e in exprs if isinstance(exprs, list) else [None]:
            op = e.get("operator") if isinstance(e, Mapping) else None
            if op == "In":
                ok = ok and labels.get(e.get("key")) in (e.get("values") or [])
            elif op == "Exists":
                ok = ok and e.get("key") in labels
            else:
                ok = False
        if ok:
            return True
    return False


# a place in a claim a group writes, among its writes: pvc://CLAIM/PATH
WRITTEN_CLAIM = "pvc://"


def claim_place(claim: str, path: str) -> str:
    """A place in a claim as a group's writes hold it (``WRITTEN_CLAIM``)."""
    return f"{WRITTEN_CLAIM}{claim}/{path}"


@dataclass(frozen=True)
class PodGroup:
    """Pods made from one template; ``pods`` of them run at once (each counted as one node)."""

    name: str
    pods: int
    template: Mapping[str, Any]  # PodTemplateSpec as the controller builds it (camelCase)
    datasets: tuple[DatasetRef, ...] = ()
    after: tuple[str, ...] = ()  # groups that must complete first
    notes: tuple[str, ...] = ()  # constraints left out because they are not known yet
    # object-store locations its pods write, and places in claims (WRITTEN_CLAIM): never
    # warmed for another group of the work
    writes: tuple[str, ...] = ()

    @property
    def spec(self) -> Mapping[str, Any]:
        return self.template.get("spec") or {}

    @property
    def labels(self) -> Mapping[str, str]:
        return (self.template.get("metadata") or {}).get("labels") or {}

    @property
    def nodes(self) -> int:
        """Nodes its pods take: one each, or one for all when a required pod affinity on
        the host puts them together (blind job round 39: eight co-located pods asked for
        eight warm nodes)."""
        return min(self.pods, 1) if _together_on_a_host(self.spec, self.labels) else self.pods

    @property
    def requirements(self) -> placement.PodRequirements:
        """Scheduling constraints for placement (placeholders already left out, see notes)."""
        return placement.PodRequirements.from_pod_spec(self.spec)

    def to_json(self, resolve: Resolver | None = None) -> dict[str, Any]:
        spec = self.spec
        req = placement.pod_requests(spec)
        return {
            "name": self.name,
            "pods": self.pods,
            "after": list(self.after),
            "writes": list(self.writes),
            "nodeSelector": dict(spec.get("nodeSelector") or {}),
            "tolerations": list(spec.get("tolerations") or []),
            "nodeAffinity": ((spec.get("affinity") or {}).get("nodeAffinity")),
            "requests": {k: placement.quantity_str(v) for k, v in sorted(req.items())},
            "datasets": [d.to_json(resolve) for d in self.datasets],
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class WarmTarget:
    """One dataset for placement: warm it on ``nodes`` eligible nodes under ``requirements``."""

    dataset: str
    requirements: placement.PodRequirements
    nodes: int
    groups: tuple[str, ...]
    stage: int


Resolver = Callable[[DatasetRef], str | None]  # a ref -> s3://bucket/prefix/ or None
# a PodSpec -> the node affinity of the PVs its claims are bound to (`_resolve.pins_from_view`)
Pins = Callable[[Mapping[str, Any]], tuple[tuple[placement.Term, ...], ...]]


def s3_only(ref: DatasetRef) -> str | None:
    """The default resolver: S3 URIs as they are (s3a:// as s3://); PVCs stay unresolved."""
    if ref.warmable and ref.uri:
        return "s3://" + ref.uri.split("://", 1)[1]
    return None


def _one_spelling(resolve: Resolver, refs: Iterable[DatasetRef]) -> Resolver:
    """*resolve*, but a folder named both with and without its trailing ``/`` (a path
    argument ``/ms/obs`` beside a ``subPath: obs`` mount of the same claim) is one dataset:
    its ``/`` spelling, which says it is a folder (warming lists a prefix the same way)."""
    folders = {u for u in map(resolve, refs) if u and u.endswith("/")}
    if not folders:
        return resolve

    def res(ref: DatasetRef) -> str | None:
        uri = resolve(ref)
        return uri + "/" if uri and uri + "/" in folders else uri
    return res


@dataclass
class UpcomingWork:
    """What one object says will run: pod groups, datasets, constraints, state (see module doc)."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str = ""
    groups: list[PodGroup] = field(default_factory=list)
    state: State = State.ADMITTED
    queue: str | None = None
    priority_class: str | None = None
    priority: int | None = None
    created: str = ""  # metadata.creationTimestamp (RFC 3339 sorts as text): queue order
    copies: int = 1
    owner: str | None = None
    # the uid its owner reference names: a leftover of an earlier object of the owner's name
    # (deleted, made again) names another than the one listed (record_of)
    owner_uid: str = ""
    release_key: str = ""
    notes: list[str] = field(default_factory=list)
    # True for a record of its owner's place in a queue (a Kueue Workload): its state and
    # priority are the owner's (``release_key``), its pods are the owner's pods.
    queue_record: bool = False
    # a queue record whose quota is reserved (admitted, or waiting on admission checks): its
    # groups carry the counts and flavor constraints the pods will run with
    reserved: bool = False

    def __post_init__(self) -> None:
        if not self.release_key:
            self.release_key = self.key

    @property
    def key(self) -> str:
        """``"<kind> <namespace>/<name>"``, lower-case kind, as the agent names its sources."""
        return work_key(self.kind, self.namespace, self.name)

    @property
    def stages(self) -> dict[str, int]:
        """Group name -> start order (0 first), from ``after``; unknown names are ignored."""
        names = {g.name for g in self.groups}
        after = {g.name: [a for a in g.after if a in names and a != g.name] for g in self.groups}
        stage: dict[str, int] = {}
        for _ in range(len(self.groups) + 1):  # longest chain is at most len(groups)
            changed = False
            for g in self.groups:
                s = 1 + max((stage.get(a, 0) for a in after[g.name]), default=-1)
                if stage.get(g.name) != s:
                    stage[g.name], changed = s, True
            if not changed:
                break
        return stage

    @property
    def nodes(self) -> int:
        """Nodes the work occupies at its widest stage (times ``copies``)."""
        stages = self.stages
        width: dict[int, int] = {}
        for g in self.groups:
            width[stages[g.name]] = width.get(stages[g.name], 0) + g.nodes
        return self.copies * max(width.values(), default=0)

    def made_by_another(self, group: str, ref: DatasetRef, uri: str | None) -> str | None:
        """Another group of this work that writes what *ref* of *group* names: its object-store
        location *uri* (or a folder holding it), first, else its place in a claim; None when
        none does. What *group* reads is then made by the work itself: as it runs beside it
        (a trainer's checkpoints an eval watcher follows), or before it, by an earlier stage
        (a JobSet's data-prep the trainers depend on). Warming it when the work is submitted
        would fetch an old copy or nothing, and list the folder as it was then (a finished
        group's writes are there: its reader drops them, _jobset.read)."""
        for place in (uri, claim_place(ref.claim, ref.path) if ref.claim else None):
            for g in self.groups if place else ():
                if g.name != group and any(location_under(place, w) for w in g.writes):
                    return g.name
        return None

    def targets(self, resolve: Resolver = s3_only, pins: Pins | None = None
                ) -> list[WarmTarget]:
        """Datasets to warm, earliest stage first: one target per (dataset, constraints).
        *pins*: the node affinity of a group's bound claims, a constraint too (a local PV).

        Groups of one stage with the same constraints that read a dataset add up (a master
        and three workers of one PodSpec shape need it on four nodes); groups with different
        constraints get their own target, since different nodes fit them. Groups of later
        stages run after earlier ones finish, so they count at their own stage: a dataset's
        node count is its widest stage's. Times ``copies``.
        """
        stages = self.stages
        resolve = _one_spelling(resolve, [ref for g in self.groups if g.pods
                                          for ref in g.datasets])
        acc: dict[tuple[str, str], list[Any]] = {}  # (dataset, constraints) -> stage, groups
        order: list[tuple[str, str]] = []
        per_stage: dict[tuple[str, str, int], int] = {}
        reqs: dict[str, placement.PodRequirements] = {}
        for g in sorted(self.groups, key=lambda g: stages[g.name]):
            if not g.pods:  # none wanted now (a suspended or empty group): nothing to hold
                continue
            req = constraints_key(g.spec)
            if req not in reqs:
                reqs[req] = g.requirements.pinned(pins(g.spec)) if pins else g.requirements
            seen: set[str] = set()
            for ref in g.datasets:
                uri = resolve(ref)
                if not uri or uri in seen or self.made_by_another(g.name, ref, uri):
                    continue
                seen.add(uri)
                k = (uri, req)
                if k not in acc:
                    acc[k] = [stages[g.name], []]
                    order.append(k)
                acc[k][1].append(g.name)
                sk = (uri, req, stages[g.name])
                per_stage[sk] = per_stage.get(sk, 0) + g.nodes
        out = []
        for uri, req in order:
            stage, groups = acc[(uri, req)]
            width = max(n for (u, r, _), n in per_stage.items() if u == uri and r == req)
            out.append(WarmTarget(uri, reqs[req], self.copies * width, tuple(groups), stage))
        return sorted(out, key=lambda t: t.stage)

    def _warmed_by(self, group: str, resolve: Resolver) -> Resolver:
        """*resolve*, but None (not warmed) for what another group writes as the job runs."""
        def res(ref: DatasetRef) -> str | None:
            uri = resolve(ref)
            return None if uri and self.made_by_another(group, ref, uri) else uri
        return res

    def to_json(self, resolve: Resolver = s3_only, pins: Pins | None = None) -> dict[str, Any]:
        return {
            "schema": "prefetchd-work/1",
            "apiVersion": self.api_version,
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
            "key": self.key,
            "release_key": self.release_key,
            "owner": self.owner,
            "state": self.state.value,
            "queue": self.queue,
            "priority_class": self.priority_class,
            "priority": self.priority,
            "copies": self.copies,
            "nodes": 0 if self.state.done else self.nodes,  # (no pods to come)
            "groups": [g.to_json(self._warmed_by(g.name, resolve))
                       for g in self.groups],
            # (work that is done warms nothing, as the text plan says)
            "warm": [] if self.state.done else [
                {"dataset": t.dataset, "nodes": t.nodes, "groups": list(t.groups),
                 "stage": t.stage} for t in self.targets(resolve, pins)],
            "notes": list(self.notes),
        }


# a Job suspended with no Kueue queue label (_batch): held by hand, unless a Workload shows
# Kueue holds it after all
HELD_BY_HAND = "suspended, and no Kueue queue holds it: nothing is warmed until it is resumed"


# notes on what the flavors of a queued job's ClusterQueue mean for it (_queue_flavors):
# dropped once its quota is reserved (the assigned flavors say it then)
WHILE_QUEUED = "while queued: "


def record_of(record: UpcomingWork, work: UpcomingWork) -> bool:
    """Whether *record* (a Kueue Workload) is *work*'s: Kueue ties them by the owner's uid,
    so a Workload left from an earlier Job of the same name is not (a blind test: a
    suspended Job, made again, showed as admitted by its predecessor's Workload). Either
    uid unknown: by name alone."""
    return not (record.owner_uid and work.uid) or record.owner_uid == work.uid


def with_queue_record(work: UpcomingWork, record: UpcomingWork) -> UpcomingWork:
    """*work* with the state, priority and queue its queue record (a Kueue Workload) knows:
    done when either is, running when either is, admitted when the record is not queued;
    once its quota is reserved, with the counts and flavor constraints Kueue gives its pods
    (and the record's notes on them, not the queued ones); queued, with the record's queue's
    flavor constraints when the work names no queue itself (Kueue's default LocalQueue)."""
    state, notes = work.state, work.notes
    if state is State.INACTIVE and not record.state.done:
        state = State.QUEUED  # (a Job suspended with no queue label: Kueue holds it after all)
        notes = [n for n in notes if n != HELD_BY_HAND]
    if record.state.done or state.done:
        state = record.state if record.state.done else work.state
    elif State.RUNNING in (record.state, state):
        state = State.RUNNING
    elif State.ADMITTED in (record.state, state) and record.state is not State.QUEUED:
        state = State.ADMITTED
    else:
        state = State.QUEUED
    groups = work.groups
    reserved = record.state in (State.ADMITTED, State.RUNNING) or record.reserved
    queued_notes = [n for n in record.notes if n.startswith(WHILE_QUEUED)]
    if reserved:
        notes = [n for n in notes if not n.startswith(WHILE_QUEUED)]
        notes += [n for n in record.notes if n not in notes and n not in queued_notes]
    elif queued_notes and not any(n.startswith(WHILE_QUEUED) for n in notes):
        notes = notes + queued_notes
    if reserved or (queued_notes and not work.queue):
        # admitted: the pod sets' admitted counts and flavors' node constraints. Kueue makes a
        # pod set per template of the job, named after it (lower case: "master", "worker");
        # a job of one template has one, whatever its name
        sets = {r.name.lower(): r for r in record.groups}
        one = record.groups[0] if len(record.groups) == len(groups) == 1 else None
        groups = [replace(g, pods=r.pods, template=r.template, notes=g.notes + r.notes)
                  if (r := sets.get(g.name.lower(), one)) is not None else g for g in groups]
    return replace(work, state=state, notes=notes,
                   priority=record.priority if record.priority is not None else work.priority,
                   queue=record.queue or work.queue, created=record.created or work.created,
                   groups=groups)


def work_key(kind: str, namespace: str, name: str) -> str:
    return f"{kind.lower()} {namespace}/{name}"


def group_datasets(targets: Iterable[WarmTarget], group: str) -> list[str]:
    """The datasets of *targets* a pod of *group* needs (group names compared without case:
    pod labels carry v1 replica types lower-cased), whether the pod names them or not (an
    MPI or Ray worker runs what its launcher or the RayJob's entrypoint names)."""
    out: list[str] = []
    for t in targets:
        if group.lower() in (g.lower() for g in t.groups) and t.dataset not in out:
            out.append(t.dataset)
    return out


def order_key(work: UpcomingWork) -> tuple[Any, ...]:
    """Warm order: admitted or running work first, then queued by Kueue priority (highest
    first) and queue order (created earliest first); finished work last."""
    rank = 0 if work.state in (State.ADMITTED, State.RUNNING) else \
        1 if work.state is State.QUEUED else 2
    return (rank, -(work.priority or 0), work.created or "~", work.key)


# ---------------------------------------------------------------- helpers for the adapters


def count(value: Any, where: str, default: int = 1) -> int:
    """A pod count field (replicas, parallelism, numNodes): an int >= 0, else WorkloadError."""
    if value is None:
        return default
    if isinstance(value, bool):
        raise WorkloadError(f"{where}: {value!r} is not a whole number")
    if isinstance(value, int):
        n = value
    elif isinstance(value, float) and value.is_integer():
        n = int(value)  # 2.0: the API server takes it as 2
    elif isinstance(value, str) and value.strip().isdigit():
        n = int(value)
    elif isinstance(value, str) and PLACEHOLDER in value:
        raise WorkloadError(f"{where}: {value!r} is only known when the trial runs")
    else:
        raise WorkloadError(f"{where}: {value!r} is not a whole number")
    if n < 0 or n > 100_000:
        raise WorkloadError(f"{where}: {n} is out of range")
    return n


def condition(obj: Mapping[str, Any], ctype: str) -> Mapping[str, Any] | None:
    """The ``status.conditions`` entry of ``ctype`` with status "True", else None."""
    for c in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(c, Mapping) and c.get("type") == ctype and c.get("status") == "True":
            return c
    return None


def mapping(value: Any, where: str) -> Mapping[str, Any]:
    """``value`` if it is a mapping (None -> {}), else WorkloadError naming ``where``."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise WorkloadError(f"{where}: expected a mapping, got {type(value).__name__}")
    return value


def sequence(value: Any, where: str) -> list[Any]:
    """``value`` if it is a list (None -> []), else WorkloadError naming ``where``."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise WorkloadError(f"{where}: expected a list, got {type(value).__name__}")
    return value


def constraints_key(spec: Mapping[str, Any]) -> str:
    """A hashable summary of what placement reads from a PodSpec (equal specs place alike).
    A preferred node affinity is left out: it limits no node, so a group that only adds a
    preference shares its nodes with one that does not (a master and its workers)."""
    return json.dumps([spec.get("nodeSelector") or {}, spec.get("tolerations") or [],
                       required_node_affinity(spec) or {},
                       sorted((k, str(v)) for k, v in placement.pod_requests(spec).items())],
                      sort_keys=True, default=str)


def required_node_affinity(spec: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The PodSpec's required node affinity (its nodeSelectorTerms), None without one."""
    aff = ((spec.get("affinity") or {}).get("nodeAffinity") or {})
    return aff.get("requiredDuringSchedulingIgnoredDuringExecution") or None


