"""Where a job waiting in a Kueue queue will run: the ResourceFlavors its ClusterQueue can
give each pod set, so its data is warmed on those flavors' nodes while it waits, and not at
all while no flavor can ever take it.

Who calls this: :func:`prefetchd.workloads._registry.read`, after every adapter (a Workload
names its queue in ``spec.queueName``, a job in its ``kueue.x-k8s.io/queue-name`` label: both
are ``work.queue``); ``prefetchd plan`` checks the queue objects of its files with
:func:`problem`. Work that is admitted, or whose quota is reserved, already carries the
flavors Kueue assigned (:mod:`._kueue`); this is for the time before, which is the lead time
prefetch lives on.

Data flow: ``work.queue`` -> LocalQueue (the work's namespace) ``spec.clusterQueue`` ->
ClusterQueue ``spec.resourceGroups[]`` -> for each pod group in order, each resource group
covering a resource its pods request gives one flavor, among those Kueue's flavor assigner
could give it: the flavor's ``nodeLabels`` agree with the pods' node selector and required
node affinity, its ``nodeTaints`` (NoSchedule, NoExecute) are tolerated by the pods or by the
flavor's own ``tolerations`` (which Kueue adds to them), and its quota holds the pod set with
what the pod sets before it took (Kueue assigns a workload's pod sets in order, each the
first flavor that fits, and sums their usage). A flavor's quota is its ``nominalQuota``, and
in a cohort what it may borrow: the other ClusterQueues' quota of that flavor in the cohort
(their ``lendingLimit`` where set), at most its ``borrowingLimit``; a cohort that is a
``Cohort`` object (which may hold quota of its own, not read) is not judged. Then the group's
template gets the candidates' node labels (one candidate: a ``nodeSelector``, as Kueue adds
on admission; several: one required node-affinity term per candidate, a node of any of them
matches) and their tolerations (all candidates': the pods get one flavor's, so placement may
also pick a node only another flavor's tolerations allow; without them no tainted flavor's
node was eligible at all).

A job Kueue can never admit (a pod set no flavor can take, a resource no resource group
covers) is warmed nowhere: its groups have no pods while it waits, and a note says why.
Nothing is added when the queue objects are not held (the agent watches LocalQueues,
ClusterQueues, ResourceFlavors and Cohorts, and never GETs them for this: a cluster without
Kueue would be asked again and again; ``prefetchd plan`` has them given with the job); a
LocalQueue or ClusterQueue named but missing is said when queue objects are known at all. Every
note starts with :data:`WHILE_QUEUED`: admitted, the queue record's flavors replace them.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import replace
from fractions import Fraction
from typing import Any

from prefetchd.k8s import placement
from prefetchd.workloads._library import Library
from prefetchd.workloads._model import WHILE_QUEUED, PodGroup, State, UpcomingWork

MAX_ALTERNATIVES = 16  # node-affinity terms at most (flavors of several resource groups)
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
Usage = dict[tuple[str, str], Fraction]  # (flavor, resource) -> amount


def apply(work: UpcomingWork, library: Library) -> None:
    """Constrain the pod groups of queued *work* to the nodes of the flavors its ClusterQueue
    can give them, or to none while it can take none (in place; see the module docstring)."""
    if not work.queue or work.state is not State.QUEUED or work.reserved:
        return

    def say(text: str) -> None:
        work.notes.append(f"{WHILE_QUEUED}{text}")

    where = f"LocalQueue {work.namespace}/{work.queue}"
    local = library.held("LocalQueue", work.namespace, work.queue)
    if local is None:
        if library.holds_any("LocalQueue"):
            say(f"{where} not found: Kueue keeps the job waiting until it exists; which "
                "flavors its pods get is not known")
        return
    if why := problem(local):
        say(f"{where}: {why}")
        return
    cq_name = str(local["spec"]["clusterQueue"])
    cq = library.held("ClusterQueue", None, cq_name)
    if cq is None:
        if library.holds_any("ClusterQueue"):
            say(f"{where} feeds ClusterQueue {cq_name}, which is not found: Kueue keeps the "
                "job waiting until it exists")
        return
    if why := problem(cq):
        say(f"ClusterQueue {cq_name}: {why}")
        return
    where = f"ClusterQueue {cq_name} ({where})"
    resource_groups = cq.get("spec", {}).get("resourceGroups") or []
    most = _quota(cq, library)
    used: Usage = {}
    groups, waits = [], []
    for g in work.groups:
        if not g.pods:
            groups.append(g)
            continue
        new, note, wait = _constrain(g, resource_groups, most, used, library)
        groups.append(new)
        if note:
            say(f"{where}: {note}")
        if wait:
            waits.append(g.name)
    if waits:
        say(f"{where}: Kueue cannot admit it as it is (pod set {', '.join(waits)}): nothing is "
            "warmed while it waits")
        groups = [replace(g, pods=0) for g in groups]
    work.groups = groups


def _quota(cq: Mapping[str, Any], library: Library
           ) -> dict[tuple[str, str], Fraction | None]:
    """(flavor, resource) -> the most of it the ClusterQueue can ever give (None: not judged,
    a cohort with a Cohort object)."""
    spec = cq.get("spec") or {}
    cohort = _cohort(spec)
    own = _nominal(cq)
    if not cohort:
        return {k: q for k, (q, _, _) in own.items()}
    if library.held("Cohort", None, str(cohort)) is not None:
        return {k: None for k in own}
    name = (cq.get("metadata") or {}).get("name")
    lent: dict[tuple[str, str], Fraction] = {}
    for other in library.objects("ClusterQueue"):
        if (other.get("metadata") or {}).get("name") == name or problem(other) or \
                _cohort(other.get("spec") or {}) != cohort:
            continue
        for k, (q, _, lend) in _nominal(other).items():
            lent[k] = lent.get(k, Fraction(0)) + (lend if lend is not None else q)
    out: dict[tuple[str, str], Fraction | None] = {}
    for k, (q, borrow, _) in own.items():
        may = lent.get(k, Fraction(0))
        out[k] = q + (min(may, borrow) if borrow is not None else may)
    return out


def _cohort(spec: Mapping[str, Any]) -> Any:
    """The cohort a ClusterQueue spec names (v1beta2 ``cohortName``, v1beta1 ``cohort``)."""
    return spec.get("cohortName") or spec.get("cohort")


def _nominal(cq: Mapping[str, Any]
             ) -> dict[tuple[str, str], tuple[Fraction, Fraction | None, Fraction | None]]:
    """(flavor, resource) -> (nominalQuota, borrowingLimit, lendingLimit) of a valid CQ."""
    out = {}
    for rg in (cq.get("spec") or {}).get("resourceGroups") or []:
        for f in rg["flavors"]:
            for r in f["resources"]:
                out[(str(f["name"]), str(r["name"]))] = tuple(
                    placement.parse_quantity(r[k]) if r.get(k) is not None else None
                    for k in ("nominalQuota", "borrowingLimit", "lendingLimit"))
    return out  # type: ignore[return-value]


def _constrain(group: PodGroup, resource_groups: list[Any],
               most: Mapping[tuple[str, str], Fraction | None], used: Usage,
               library: Library) -> tuple[PodGroup, str | None, bool]:
    """*group* limited to the nodes of the flavors it may get, a note saying which (or why
    none), and whether Kueue can never admit it; *used* gets what its first fit takes."""
    per_pod = {k: v for k, v in placement.pod_requests(group.spec).items() if v > 0}
    per_pod["pods"] = Fraction(1)
    choices: list[list[tuple[str, Mapping[str, Any]]]] = []  # per resource group: candidates
    covered: set[str] = set()
    passed_over: list[str] = []
    for rg in resource_groups:
        names = [str(r) for r in rg["coveredResources"]]
        covered |= set(names)
        needed = {r: q * group.pods for r, q in per_pod.items() if r in names}
        if not needed:
            continue
        fits = []
        for f in rg["flavors"]:
            flavor = library.held("ResourceFlavor", None, str(f["name"]))
            if flavor is None:
                return group, (f"ResourceFlavor {f['name']} not found: which flavor pod set "
                               f"{group.name} gets is not known"), False
            if why := problem(flavor):
                return group, f"ResourceFlavor {f['name']}: {why}", False
            why = _why_not(group, str(f["name"]), flavor, needed, most, used)
            if why:
                passed_over.append(f"{f['name']}: {why}")
            else:
                fits.append((str(f["name"]), flavor.get("spec") or {}))
        if not fits:
            return group, (f"no flavor can take pod set {group.name} "
                           f"({'; '.join(passed_over)})"), True
        first = fits[0][0]  # (what Kueue gives it when all is free, and counts)
        for r, amount in needed.items():
            used[(first, r)] = used.get((first, r), Fraction(0)) + amount
        choices.append(fits)
    missing = sorted(r for r in per_pod if r not in covered and r != "pods")
    if missing:
        return group, (f"pod set {group.name} requests {', '.join(missing)}, which no resource "
                       "group covers"), True
    if not choices:
        return group, None, False
    alternatives = []
    for combo in itertools.islice(itertools.product(*choices), MAX_ALTERNATIVES + 1):
        labels: dict[str, str] = {}
        for _, fspec in combo:
            for k, v in (fspec.get("nodeLabels") or {}).items():
                labels[str(k)] = str(v)
        if not labels:
            return group, None, False  # a flavor with no node labels: pods may run anywhere
        alternatives.append(labels)
    if len(alternatives) > MAX_ALTERNATIVES:
        return group, None, False
    tolerations = [t for fits in choices for _, fspec in fits
                   for t in fspec.get("tolerations") or []]
    new = _with_nodes(group.template, alternatives, tolerations)
    if new is None:
        return group, None, False
    gets = " and ".join(" or ".join(name for name, _ in fits) for fits in choices)
    note = f"pod set {group.name} gets flavor {gets}: warmed on its nodes" + (
        f" ({'; '.join(passed_over)})" if passed_over else "")
    return replace(group, template=new), note, False


def _why_not(group: PodGroup, name: str, flavor: Mapping[str, Any],
             needed: Mapping[str, Fraction],
             most: Mapping[tuple[str, str], Fraction | None], used: Usage) -> str | None:
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
    for resource, amount in needed.items():
        if (name, resource) not in most:
            return f"no quota for {resource}"
        cap = most[(name, resource)]
        before = used.get((name, resource), Fraction(0))
        if cap is not None and amount + before > cap:
            return (f"{resource} quota {placement.quantity_str(cap)} is less than the pod "
                    f"set's {placement.quantity_str(amount)}" + (
                        f" with the {placement.quantity_str(before)} of the pod sets before "
                        "it" if before else ""))
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


# ---------------------------------------------------------------- shapes


def problem(obj: Mapping[str, Any]) -> str | None:
    """What is wrong with a LocalQueue, ClusterQueue, ResourceFlavor or Cohort as Kueue's
    CRDs validate them (None: nothing, or another kind), naming the field: the API server
    refuses such objects, but a file given to ``prefetchd plan`` may hold one."""
    kind = obj.get("kind")
    spec = obj.get("spec")
    if kind not in ("LocalQueue", "ClusterQueue", "ResourceFlavor", "Cohort"):
        return None
    if spec is None and kind in ("ResourceFlavor", "Cohort"):
        return None
    if not isinstance(spec, Mapping):
        return "spec: not a mapping"
    if kind == "LocalQueue":
        cq = spec.get("clusterQueue")
        return None if isinstance(cq, str) and cq else "spec.clusterQueue: not set"
    if kind == "ResourceFlavor":
        return _flavor_problem(spec)
    if kind == "Cohort":
        return None
    return _cq_problem(spec)


def _flavor_problem(spec: Mapping[str, Any]) -> str | None:
    labels = spec.get("nodeLabels")
    if labels is not None and (not isinstance(labels, Mapping) or not all(
            isinstance(v, str) for v in labels.values())):
        return "spec.nodeLabels: not a mapping of label to text"
    for field in ("nodeTaints", "tolerations"):
        items = spec.get(field)
        if items is None:
            continue
        if not isinstance(items, list) or not all(isinstance(t, Mapping) for t in items):
            return f"spec.{field}: not a list of mappings"
        for i, t in enumerate(items):
            effect = t.get("effect")
            if (field == "nodeTaints" or effect) and effect not in TAINT_EFFECTS:
                return (f"spec.{field}[{i}].effect: {effect!r} is not one of "
                        f"{', '.join(TAINT_EFFECTS)}")
            if field == "nodeTaints" and not t.get("key"):
                return f"spec.nodeTaints[{i}].key: not set"
            if field == "tolerations" and t.get("operator") not in (None, "Equal", "Exists"):
                return f"spec.tolerations[{i}].operator: {t.get('operator')!r} is not Equal " \
                    "or Exists"
    return None


def _cq_problem(spec: Mapping[str, Any]) -> str | None:
    groups = spec.get("resourceGroups")
    if groups is None:
        return None
    if not isinstance(groups, list):
        return "spec.resourceGroups: not a list"
    cohort = _cohort(spec)
    seen_resources: set[str] = set()
    seen_flavors: set[str] = set()
    for i, rg in enumerate(groups):
        at = f"spec.resourceGroups[{i}]"
        if not isinstance(rg, Mapping):
            return f"{at}: not a mapping"
        covered = rg.get("coveredResources")
        if not isinstance(covered, list) or not covered or not all(
                isinstance(r, str) and r for r in covered):
            return f"{at}.coveredResources: not a list of resource names"
        if twice := seen_resources & set(covered):
            return f"{at}.coveredResources: {sorted(twice)[0]} is in another resource group"
        seen_resources |= set(covered)
        flavors = rg.get("flavors")
        if not isinstance(flavors, list) or not flavors:
            return f"{at}.flavors: not a list of flavors"
        for j, f in enumerate(flavors):
            fat = f"{at}.flavors[{j}]"
            if not isinstance(f, Mapping) or not isinstance(f.get("name"), str) or \
                    not f.get("name"):
                return f"{fat}.name: not set"
            if f["name"] in seen_flavors:
                return f"{fat}.name: flavor {f['name']} is listed twice"
            seen_flavors.add(f["name"])
            resources = f.get("resources")
            if not isinstance(resources, list) or not all(
                    isinstance(r, Mapping) for r in resources):
                return f"{fat}.resources: not a list of mappings"
            names = [r.get("name") for r in resources]
            if names != covered:
                return (f"{fat}.resources: names {names} are not the coveredResources "
                        f"{covered}, in that order")
            for k, r in enumerate(resources):
                for q in ("nominalQuota", "borrowingLimit", "lendingLimit"):
                    if q == "nominalQuota" and r.get(q) is None:
                        return f"{fat}.resources[{k}].nominalQuota: not set"
                    if r.get(q) is None:
                        continue
                    try:
                        placement.parse_quantity(r[q])
                    except ValueError:
                        return f"{fat}.resources[{k}].{q}: {r[q]!r} is not a quantity"
                    if q != "nominalQuota" and not cohort:
                        return f"{fat}.resources[{k}].{q}: set without a cohort"
    return None
