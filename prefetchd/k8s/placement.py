"""Which nodes should hold a dataset: eligibility of a pod on a node, and a shared ranking.

Who calls this: every prefetchd node agent (:mod:`prefetchd.k8s.agent`) to decide whether
*its* node warms a step's datasets, and the webhook (:mod:`prefetchd.k8s.webhook`) to steer the
step's pod toward the same nodes. Both must reach the same answer without talking to each
other, so everything here is a pure function of API objects every agent sees (Node objects,
the pod or workflow template spec) and the dataset URI.

Eligibility mirrors the scheduler's hard filters that can be judged from the spec alone:
``nodeSelector``; required node affinity (terms ORed, expressions ANDed, operators In, NotIn,
Exists, DoesNotExist, Gt, Lt, and ``matchFields`` on ``metadata.name``); taints with effect
NoSchedule or NoExecute against tolerations (Equal/Exists, empty key with Exists tolerates
everything, empty effect matches all effects; PreferNoSchedule never blocks);
``spec.unschedulable``; and resource requests (cpu, memory, GPUs and other extended resources)
against the node's allocatable. Allocatable is compared with what the pod asks for, not with
what is free right now: usage changes by the second, and a warm on a node the pod fits on
in principle is still the best bet. Only nodes that run a fusecache agent (they publish
``CACHE_FREE_ANNOTATION``) are candidates.

Ranking is weighted rendezvous (highest-random-weight) hashing: each (dataset, node) pair
gets ``score = -weight / ln(u)`` with ``u`` in (0, 1) drawn from SHA-256 of the pair, and the
``replicas`` highest-scoring eligible nodes are chosen. Properties the tests check: any input
order gives the same answer; removing a node that was not chosen changes nothing (only the
datasets that node held move when it leaves); with equal weights the load spreads evenly;
a node's share grows in proportion to its weight. The weight is the free cache space on a
log2 scale (1 + floor(log2(1 + free GiB))), so a node twice as empty counts one step more,
and small changes in free space do not reshuffle placements.

Node labels: a node says what it holds with at most ``LABEL_BUCKETS`` labels
``holds.fusecache.io/bNN=true`` (dataset URI hashed into NN), never a label per object or per
dataset, so label count and churn stay bounded whatever the cache holds.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

from fusecache.group import rendezvous_score

CACHE_FREE_ANNOTATION = "fusecache.io/cache-free-bytes"
HOLDS_LABEL_PREFIX = "holds.fusecache.io/"
LABEL_BUCKETS = 32  # at most 32 labels per node; a false match is only a softer preference
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")

_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")
_SUFFIX = {
    "": 1, "m": Fraction(1, 1000), "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
    "P": 10**15, "E": 10**18, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40,
    "Pi": 2**50, "Ei": 2**60,
}


def parse_quantity(value: Any) -> Fraction:
    """A Kubernetes quantity ("500m", "4Gi", "1e3", 2) as an exact number."""
    m = _QUANTITY.match(str(value).strip())
    if not m or m.group(2) not in _SUFFIX:
        raise ValueError(f"not a quantity: {value!r}")
    return Fraction(m.group(1)) * _SUFFIX[m.group(2)]


# ---------------------------------------------------------------- model


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.operator == "Exists":
            return not self.key or self.key == taint.key
        return self.key == taint.key and self.value == taint.value


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        op = self.operator
        if op == "In":
            return present and labels[self.key] in self.values
        if op == "NotIn":
            return not present or labels[self.key] not in self.values
        if op == "Exists":
            return present
        if op == "DoesNotExist":
            return not present
        if op in ("Gt", "Lt"):
            if not present or len(self.values) != 1:
                return False
            try:
                have, want = int(labels[self.key]), int(self.values[0])
            except ValueError:
                return False
            return have > want if op == "Gt" else have < want
        return False  # unknown operator: the API server would have rejected the pod


@dataclass(frozen=True)
class Term:
    """One nodeSelectorTerm: all expressions and fields must match; an empty term matches none."""

    expressions: tuple[Requirement, ...] = ()
    fields: tuple[Requirement, ...] = ()

    def matches(self, node: NodeInfo) -> bool:
        if not self.expressions and not self.fields:
            return False
        names = {"metadata.name": node.name}
        return (all(r.matches(node.labels) for r in self.expressions)
                and all(r.matches(names) for r in self.fields))


@dataclass(frozen=True)
class NodeInfo:
    """What placement needs to know about a node, read from its Node object."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    allocatable: Mapping[str, Fraction] = field(default_factory=dict)
    unschedulable: bool = False
    cache_free_bytes: int | None = None  # None: no fusecache agent on this node

    @classmethod
    def from_node(cls, node: Mapping[str, Any]) -> NodeInfo:
        meta, spec = node.get("metadata") or {}, node.get("spec") or {}
        alloc = {}
        for k, v in ((node.get("status") or {}).get("allocatable") or {}).items():
            try:
                alloc[k] = parse_quantity(v)
            except ValueError:
                continue
        free = (meta.get("annotations") or {}).get(CACHE_FREE_ANNOTATION)
        try:
            free_bytes = int(free) if free is not None else None
        except ValueError:
            free_bytes = None
        return cls(
            name=meta.get("name", ""),
            labels=dict(meta.get("labels") or {}),
            taints=tuple(Taint(t.get("key", ""), t.get("value", "") or "", t.get("effect", ""))
                         for t in spec.get("taints") or []),
            allocatable=alloc,
            unschedulable=bool(spec.get("unschedulable")),
            cache_free_bytes=free_bytes,
        )

    @property
    def weight(self) -> int:
        """Rendezvous weight from free cache space on a log2 scale (see module docstring)."""
        free_gib = max(0, self.cache_free_bytes or 0) / 2**30
        return 1 + int(math.log2(1 + free_gib))


@dataclass(frozen=True)
class PodRequirements:
    """The scheduling constraints of a pod (or of a workflow step's pod template)."""

    node_selector: Mapping[str, str] = field(default_factory=dict)
    required_terms: tuple[Term, ...] | None = None  # None: no required node affinity
    tolerations: tuple[Toleration, ...] = ()
    requests: Mapping[str, Fraction] = field(default_factory=dict)
    # the node affinity of the PVs its claims are bound to (a local PV's host, a zonal
    # disk's zone): each one's terms must match too, as the scheduler's VolumeBinding has it
    volume_terms: tuple[tuple[Term, ...], ...] = ()

    @classmethod
    def from_pod_spec(cls, spec: Mapping[str, Any]) -> PodRequirements:
        """Read a PodSpec dict (camelCase, as in the API)."""
        affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {})
        required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
        terms = node_selector_terms(required) if required is not None else None
        tolerations = tuple(
            Toleration(t.get("key", "") or "", t.get("operator", "Equal") or "Equal",
                       t.get("value", "") or "", t.get("effect", "") or "")
            for t in spec.get("tolerations") or []
        )
        return cls(dict(spec.get("nodeSelector") or {}), terms, tolerations,
                   pod_requests(spec))


    def pinned(self, volume_terms: tuple[tuple[Term, ...], ...]) -> PodRequirements:
        """These requirements, and the node affinity of the PVs the pod's claims are bound
        to (``volume_terms``: ``prefetchd.k8s.datasets.volume_pins``)."""
        return replace(self, volume_terms=self.volume_terms + volume_terms) \
            if volume_terms else self


def node_selector_terms(selector: Mapping[str, Any]) -> tuple[Term, ...]:
    """The terms of a NodeSelector (a pod's required node affinity, a PV's
    ``nodeAffinity.required``): a node matches one of them."""
    return tuple(
        Term(tuple(_req(e) for e in t.get("matchExpressions") or []),
             tuple(_req(e) for e in t.get("matchFields") or []))
        for t in selector.get("nodeSelectorTerms") or [] if isinstance(t, Mapping))


def _req(expr: Mapping[str, Any]) -> Requirement:
    return Requirement(expr.get("key", ""), expr.get("operator", ""),
                       tuple(str(v) for v in expr.get("values") or []))


def quantity_str(v: Any) -> str:
    """A quantity for people: 4Gi rather than 4294967296, 500m rather than 0.5."""
    if v != int(v):
        return f"{int(v * 1000)}m" if v * 1000 == int(v * 1000) else str(float(v))
    n = int(v)
    for suffix, unit in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20)):
        if n >= unit and n % unit == 0:
            return f"{n // unit}{suffix}"
    return str(n)


def describe(spec: Mapping[str, Any]) -> list[str]:
    """A PodSpec's own scheduling constraints for people, one part each: its nodeSelector,
    tolerations, whether it has a required node affinity, and its requests (the training
    jobs' plan and a pipeline step's alike; blind job round 54: a Workflow step's were
    shown nowhere)."""
    parts = []
    sel = spec.get("nodeSelector") or {}
    if sel:
        parts.append("nodeSelector " + ",".join(f"{k}={v}" for k, v in sorted(sel.items())))
    tols = spec.get("tolerations") or []
    if tols:
        parts.append("tolerates " + ",".join(
            f"{t.get('key') or '*'}{'=' + str(t['value']) if t.get('value') else ''}"
            f"{':' + t['effect'] if t.get('effect') else ''}" for t in tols))
    if ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"):
        parts.append("node affinity")
    req = pod_requests(spec)
    if req:
        parts.append("requests " + " ".join(f"{k}={quantity_str(v)}"
                                            for k, v in sorted(req.items())))
    return parts


def pod_requests(spec: Mapping[str, Any]) -> dict[str, Fraction]:
    """Effective requests as the scheduler counts them: the containers' sum plus the sidecars
    (init containers with ``restartPolicy: Always``), or the peak of the init phase if higher.

    A limit without a request counts as the request (Kubernetes defaults it so); extended
    resources such as ``nvidia.com/gpu`` are usually given only as limits.
    """

    def of(container: Mapping[str, Any]) -> dict[str, Fraction]:
        res = container.get("resources") or {}
        merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        out = {}
        for k, v in merged.items():
            try:
                out[k] = parse_quantity(v)
            except ValueError:
                continue
        return out

    def add(into: dict[str, Fraction], more: Mapping[str, Fraction]) -> None:
        for k, v in more.items():
            into[k] = into.get(k, Fraction(0)) + v

    total: dict[str, Fraction] = {}
    for c in spec.get("containers") or []:
        add(total, of(c))
    # init containers run one at a time before them; a sidecar (restartPolicy: Always) goes
    # on running beside the ones after it and beside the containers (the scheduler's sum)
    sidecars: dict[str, Fraction] = {}
    peak: dict[str, Fraction] = {}
    for c in spec.get("initContainers") or []:
        if c.get("restartPolicy") == "Always":
            add(total, of(c))
            add(sidecars, of(c))
            during = dict(sidecars)
        else:
            during = dict(sidecars)
            add(during, of(c))
        for k, v in during.items():
            peak[k] = max(peak.get(k, Fraction(0)), v)
    for k, v in peak.items():
        total[k] = max(total.get(k, Fraction(0)), v)
    return total


# ---------------------------------------------------------------- eligibility


def eligible(pod: PodRequirements, node: NodeInfo) -> bool:
    """True if the scheduler's hard filters would let ``pod`` onto ``node`` (module docstring)."""
    return not ineligibility_reason(pod, node)


def labels_fit(pod: PodRequirements, node: NodeInfo) -> bool:
    """Whether ``node``'s labels (and name) satisfy ``pod``'s node selector, required node
    affinity and its volumes' node affinity: what the pod asks of a node, leaving out what
    changes with the node's state (taints, cordons, free resources)."""
    return not _labels_reason(pod, node)


def _labels_reason(pod: PodRequirements, node: NodeInfo) -> str:
    """Which of the pod's node selector, required node affinity and volumes' node affinity
    ``node`` does not satisfy ("" if none)."""
    for key, value in pod.node_selector.items():
        if node.labels.get(key) != value:
            return f"nodeSelector {key}={value}"
    if pod.required_terms is not None and not any(t.matches(node) for t in pod.required_terms):
        return "required node affinity"
    if any(not any(t.matches(node) for t in terms) for terms in pod.volume_terms):
        return "volume node affinity"
    return ""


def ineligibility_reason(pod: PodRequirements, node: NodeInfo) -> str:
    """Why ``pod`` cannot run on ``node`` ("" if it can): what the logs and tests show."""
    if node.cache_free_bytes is None:
        return "no fusecache agent"
    if node.unschedulable and not any(
        t.tolerates(Taint("node.kubernetes.io/unschedulable", "", "NoSchedule"))
        for t in pod.tolerations
    ):
        return "unschedulable"
    if why := _labels_reason(pod, node):
        return why
    for taint in node.taints:
        if taint.effect in BLOCKING_EFFECTS and not any(
            t.tolerates(taint) for t in pod.tolerations
        ):
            return f"taint {taint.key}:{taint.effect}"
    for name, amount in pod.requests.items():
        if amount > 0 and node.allocatable.get(name, Fraction(0)) < amount:
            return f"{name}: wants {amount}, allocatable {node.allocatable.get(name, 0)}"
    return ""


# ---------------------------------------------------------------- ranking


def score(dataset: str, node: NodeInfo) -> float:
    """Weighted rendezvous score; higher wins (the cache group's block ranking is the same)."""
    return rendezvous_score(dataset, node.name, node.weight)


def rank(dataset: str, nodes: Iterable[NodeInfo]) -> list[NodeInfo]:
    """All nodes, best first; ties (astronomically rare) broken by name for determinism."""
    return sorted(nodes, key=lambda n: (-score(dataset, n), n.name))


def choose(
    dataset: str, nodes: Iterable[NodeInfo], pod: PodRequirements | None, replicas: int
) -> list[str]:
    """Names of the ``replicas`` best eligible nodes for ``dataset`` (fewer if fewer fit)."""
    pod = pod or PodRequirements()
    fits = [n for n in nodes if eligible(pod, n)]
    return [n.name for n in rank(dataset, fits)[:max(0, replicas)]]


def should_warm(
    my_node: str, dataset: str, nodes: Iterable[NodeInfo], pod: PodRequirements | None,
    replicas: int,
) -> bool:
    """Whether the agent on ``my_node`` is one of the nodes that warm ``dataset``."""
    return my_node in choose(dataset, nodes, pod, replicas)


# ---------------------------------------------------------------- bounded node labels


def holds_label(dataset: str) -> str:
    """The label key that says "this node holds data of datasets hashing to this bucket".

    A trailing slash does not count: the agent publishes the warmed form (``s3://b/p/train/``)
    of the dataset the webhook names ``s3://b/p/train``.
    """
    key = dataset.rstrip("/").encode()
    bucket = int.from_bytes(hashlib.sha256(key).digest()[:4], "big") % LABEL_BUCKETS
    return f"{HOLDS_LABEL_PREFIX}b{bucket:02d}"


def holds_labels_patch(current: Mapping[str, str], held: Iterable[str]) -> dict[str, Any] | None:
    """A merge patch setting the bucket labels for ``held`` datasets and removing stale ones.

    Returns None when the node's labels already say exactly that (no write needed).
    """
    want = {holds_label(d) for d in held}
    have = {k for k in current if k.startswith(HOLDS_LABEL_PREFIX)}
    changes: dict[str, str | None] = {k: "true" for k in want if current.get(k) != "true"}
    changes.update({k: None for k in have - want})
    return {"metadata": {"labels": changes}} if changes else None
