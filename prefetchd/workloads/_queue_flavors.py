"""Where a job waiting in a Kueue queue will run: the ResourceFlavors its ClusterQueue can
give each pod set, so its data is warmed on those flavors' nodes while it waits.

Who calls this: :func:`prefetchd.workloads._registry.read`, after every adapter (a Workload
names its queue in ``spec.queueName``, a job in its ``kueue.x-k8s.io/queue-name`` label: both
are ``work.queue``). Work that is admitted, or whose quota is reserved, already carries the
flavors Kueue assigned (:mod:`._kueue`); this is for the time before, which is the lead time
prefetch lives on.

Data flow: ``work.queue`` -> LocalQueue (the work's namespace) ``spec.clusterQueue`` ->
ClusterQueue ``spec.resourceGroups[]`` -> for each pod group, each resource group covering a
resource its pods request gives one flavor, among those that could take the pod set as
Kueue's flavor assigner checks them (the flavor's ``nodeLabels`` do not contradict the pods'
node selector or required node affinity, its ``nodeTaints`` are tolerated (by the pods or by
the flavor's own ``tolerations``, which Kueue adds to them), its quota can hold
the pod set: ``nominalQuota``, plus ``borrowingLimit`` in a cohort, unbounded in a cohort
without one) -> the group's template gets the candidates' node labels (one candidate: as
Kueue adds them on admission, a ``nodeSelector``; several: one required node-affinity term
per candidate, a node of any of them matches) and their tolerations (all candidates': the
pods get one flavor's, so placement may also pick a node only another flavor's tolerations
allow; without them no tainted flavor's node was eligible at all).

Nothing is added when a queue object is not held (the agent watches LocalQueues,
ClusterQueues and ResourceFlavors, and never GETs them for this: a cluster without Kueue would
be asked for them again and again; ``prefetchd plan`` has them given with the job), or when a
candidate flavor has no node labels (its pods may run anywhere). A pod set no flavor can take
is said in a note (Kueue would leave it waiting).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import replace
from fractions import Fraction
from typing import Any

from prefetchd.k8s import placement
from prefetchd.workloads._library import Library
from prefetchd.workloads._model import PodGroup, State, UpcomingWork

MAX_ALTERNATIVES = 16  # node-affinity terms at most (flavors of several resource groups)


def apply(work: UpcomingWork, library: Library) -> None:
    """Constrain the pod groups of queued *work* to the nodes of the flavors its ClusterQueue
    can give them (in place; see the module docstring)."""
    if not work.queue or work.state is not State.QUEUED or work.reserved:
        return
    local = library.held("LocalQueue", work.namespace, work.queue)
    cq_name = ((local or {}).get("spec") or {}).get("clusterQueue")
    if not cq_name:
        return
    cq = library.held("ClusterQueue", None, str(cq_name))
    if cq is None:
        return
    spec = cq.get("spec") or {}
    in_cohort = bool(spec.get("cohortName") or spec.get("cohort"))
    groups = []
    for g in work.groups:
        new, note = _constrain(g, spec.get("resourceGroups") or [], in_cohort, library)
        groups.append(new)
        if note:
            work.notes.append(f"ClusterQueue {cq_name} (LocalQueue {work.namespace}/"
                              f"{work.queue}): {note}")
    work.groups = groups


def _constrain(group: PodGroup, resource_groups: list[Any], in_cohort: bool,
               library: Library) -> tuple[PodGroup, str | None]:
    """*group* limited to the nodes of the flavors it may get, and a note saying which."""
    per_pod = {k: v for k, v in placement.pod_requests(group.spec).items() if v > 0}
    per_pod["pods"] = Fraction(1)
    choices: list[list[tuple[str, Mapping[str, Any]]]] = []  # per resource group: candidates
    covered: set[str] = set()
    passed_over: list[str] = []
    for rg in resource_groups:
        if not isinstance(rg, Mapping):
            continue
        names = {str(r) for r in rg.get("coveredResources") or []}
        covered |= names
        needed = {r: q * group.pods for r, q in per_pod.items() if r in names}
        if not needed:
            continue
        fits = []
        for f in rg.get("flavors") or []:
            if not isinstance(f, Mapping) or not f.get("name"):
                continue
            flavor = library.held("ResourceFlavor", None, str(f["name"]))
            if flavor is None:
                return group, (f"ResourceFlavor {f['name']} unknown: which flavor pod set "
                               f"{group.name} gets is not known")
            why = _why_not(group, f, flavor, needed, in_cohort)
            if why:
                passed_over.append(f"{f['name']}: {why}")
            else:
                fits.append((str(f["name"]), flavor.get("spec") or {}))
        if not fits:
            return group, (f"no flavor can take pod set {group.name} "
                           f"({'; '.join(passed_over) or 'none listed'}): it waits")
        choices.append(fits)
    missing = sorted(r for r in per_pod if r not in covered and r != "pods")
    if missing:
        return group, (f"pod set {group.name} requests {', '.join(missing)}, which no resource "
                       "group covers: it waits")
    if not choices:
        return group, None
    alternatives = []
    for combo in itertools.islice(itertools.product(*choices), MAX_ALTERNATIVES + 1):
        labels: dict[str, str] = {}
        for _, fspec in combo:
            for k, v in (fspec.get("nodeLabels") or {}).items():
                labels[str(k)] = str(v)
        if not labels:
            return group, None  # a flavor with no node labels: its pods may run anywhere
        alternatives.append(labels)
    if len(alternatives) > MAX_ALTERNATIVES:
        return group, None
    tolerations = [t for fits in choices for _, fspec in fits
                   for t in fspec.get("tolerations") or []]
    new = _with_nodes(group.template, alternatives, tolerations)
    if new is None:
        return group, None
    gets = " and ".join(" or ".join(name for name, _ in fits) for fits in choices)
    note = f"pod set {group.name} gets flavor {gets}: warmed on its nodes while queued" + (
        f" ({'; '.join(passed_over)})" if passed_over else "")
    return replace(group, template=new), note


def _why_not(group: PodGroup, quota: Mapping[str, Any], flavor: Mapping[str, Any],
             needed: Mapping[str, Fraction], in_cohort: bool) -> str | None:
    """Why Kueue could never give this flavor to the pod set (None: it could)."""
    fspec = flavor.get("spec") or {}
    labels = {str(k): str(v) for k, v in (fspec.get("nodeLabels") or {}).items()}
    selector = group.spec.get("nodeSelector") or {}
    for k, v in selector.items():
        if k in labels and labels[k] != str(v):
            return f"its node label {k}={labels[k]} is not the pods' nodeSelector {k}={v}"
    terms = group.requirements.required_terms
    if terms is not None and labels:
        relevant = [tuple(r for r in t.expressions if r.key in labels) for t in terms]
        if not any(all(r.matches(labels) for r in exprs) for exprs in relevant):
            return "its node labels do not match the pods' required node affinity"
    # (the flavor's own tolerations count: Kueue adds them to the pods it admits)
    tolerations = group.requirements.tolerations + placement.PodRequirements.from_pod_spec(
        {"tolerations": fspec.get("tolerations") or []}).tolerations
    for t in fspec.get("nodeTaints") or []:
        taint = placement.Taint(str(t.get("key", "")), str(t.get("value", "") or ""),
                                str(t.get("effect", "")))
        if taint.effect not in ("NoSchedule", "NoExecute"):
            continue  # (PreferNoSchedule is not evaluated at admission)
        if not any(tol.tolerates(taint) for tol in tolerations):
            return f"the pods do not tolerate its taint {taint.key}"
    limits = {str(r.get("name")): r for r in quota.get("resources") or [] if isinstance(r, Mapping)}
    for name, amount in needed.items():
        r = limits.get(name)
        if r is None:
            return f"no quota for {name}"
        try:
            most = placement.parse_quantity(r.get("nominalQuota", 0))
            if in_cohort:
                if r.get("borrowingLimit") is None:
                    continue
                most += placement.parse_quantity(r["borrowingLimit"])
        except ValueError:
            continue  # (the API server validates quantities; a file may not: do not judge)
        if amount > most:
            return (f"{name} quota {placement.quantity_str(most)} is less than the pod set's "
                    f"{placement.quantity_str(amount)}")
    return None


def _with_nodes(template: Mapping[str, Any], alternatives: list[dict[str, str]],
                tolerations: list[Any]) -> dict[str, Any] | None:
    """*template* whose pods run on a node of one of *alternatives* (label sets), tolerating
    *tolerations* too; None when that takes more node-affinity terms than we write."""
    out = dict(template)
    spec = dict(out.get("spec") or {})
    if len(alternatives) == 1:
        spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **alternatives[0]}
    else:
        affinity = dict(spec.get("affinity") or {})
        node = dict(affinity.get("nodeAffinity") or {})
        required = node.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
        terms = [t for t in required.get("nodeSelectorTerms") or [] if isinstance(t, Mapping)]
        flavor_terms = [[{"key": k, "operator": "In", "values": [v]}
                         for k, v in sorted(labels.items())] for labels in alternatives]
        # (each of the pods' own terms with one flavor's labels: a node matching any pair)
        merged = [{**t, "matchExpressions": [*(t.get("matchExpressions") or []), *f]}
                  for t in terms or [{}] for f in flavor_terms]
        if len(merged) > MAX_ALTERNATIVES:
            return None  # (fewer terms would wrongly rule nodes out)
        node["requiredDuringSchedulingIgnoredDuringExecution"] = {
            **required, "nodeSelectorTerms": merged}
        affinity["nodeAffinity"] = node
        spec["affinity"] = affinity
    kept = list(spec.get("tolerations") or [])
    for t in tolerations:
        if t not in kept:
            kept.append(t)
    if kept:
        spec["tolerations"] = kept
    out["spec"] = spec
    return out
