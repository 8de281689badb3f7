"""Adapter: Kueue Workload (kueue.x-k8s.io/v1beta2; v1beta1 read alike) -> UpcomingWork.

Who calls this: :mod:`prefetchd.workloads._registry`. A Workload is Kueue's copy of a queued
job's pods: ``spec.podSets[]`` (``name``, ``count``, full pod ``template``), in LocalQueue
``spec.queueName``, with priority ``spec.priority`` (else the value of the
WorkloadPriorityClass named by ``spec.priorityClassRef`` / v1beta1 ``priorityClassName``, from
the Library). Its ``owner`` and ``release_key`` are the job's (its controller owner), so the
job and its Workload are one piece of work; the Workload adds the queue state.

State: ``Finished`` -> succeeded (failed when its reason is ``Failed``); ``spec.active: false``
-> inactive; ``Evicted`` -> queued (its pods go, it waits for quota again: the flavor it
had is no longer its own, even while ``Admitted`` is still True); ``Admitted`` -> running
once ``PodsReady``, else admitted; otherwise queued (quota not reserved yet, or reserved
while admission checks are pending). Once its quota is reserved (``QuotaReserved``: admitted,
or waiting only for admission checks such as a ProvisioningRequest),
``status.admission.podSetAssignments[]`` gives each pod set's ``count`` and its
ResourceFlavors, whose ``nodeLabels`` and ``tolerations`` Kueue adds to the job's pods: they
are added to the group's constraints when the Library has the flavor.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from prefetchd.workloads import _common, _podspec
from prefetchd.workloads._library import Library
from prefetchd.workloads._model import (
    MadeClaim,
    State,
    UpcomingWork,
    WorkloadError,
    condition,
    count,
    mapping,
    sequence,
)


def _state(obj: Mapping[str, Any], spec: Mapping[str, Any]) -> State:
    finished = condition(obj, "Finished")
    if finished:
        return State.FAILED if finished.get("reason") == "Failed" else State.SUCCEEDED
    if spec.get("active") is False:
        return State.INACTIVE
    if condition(obj, "Evicted"):
        return State.QUEUED  # (blind job round 46: an evicted one was planned on its old flavor)
    if condition(obj, "Admitted"):
        return State.RUNNING if condition(obj, "PodsReady") else State.ADMITTED
    return State.QUEUED


def read(obj: Mapping[str, Any], library: Library) -> UpcomingWork:
    work = _common.start(obj, library)
    work.queue_record = True
    spec = mapping(obj.get("spec"), "spec")
    work.state = _state(obj, spec)
    work.queue = str(spec["queueName"]) if spec.get("queueName") else work.queue
    ref = mapping(spec.get("priorityClassRef"), "spec.priorityClassRef")
    pclass = ref.get("name") or spec.get("priorityClassName")
    if pclass:
        work.priority_class = str(pclass)
    prio = spec.get("priority")
    if isinstance(prio, int) and not isinstance(prio, bool):
        work.priority = prio
    elif work.priority_class:
        work.priority = library.priority(work.priority_class)
    admission = mapping(mapping(obj.get("status"), "status").get("admission"),
                        "status.admission")
    assigned = {}
    # (a reservation waiting on admission checks has its flavor: blind job round 46)
    work.reserved = work.state in (State.ADMITTED, State.RUNNING) or (
        work.state is State.QUEUED and condition(obj, "QuotaReserved") is not None
        and not condition(obj, "Evicted"))
    if work.reserved:
        for a in sequence(admission.get("podSetAssignments"),
                          "status.admission.podSetAssignments"):
            a = mapping(a, "status.admission.podSetAssignments[]")
            assigned[str(a.get("name"))] = a
    owner_name = (work.owner or work.key).rsplit("/", 1)[-1]
    for i, ps in enumerate(sequence(spec.get("podSets"), "spec.podSets")):
        at = f"spec.podSets[{i}]"
        ps = mapping(ps, at)
        name = str(ps.get("name") or f"podset{i}")
        pods = count(ps.get("count"), f"{at}.count")
        template = copy.deepcopy(dict(mapping(ps.get("template"), f"{at}.template")))
        a = assigned.get(name)
        if a is not None:
            if a.get("count") is not None:
                pods = count(a.get("count"), f"status.admission.podSetAssignments {name}.count")
            _add_flavors(template, a, library, work.notes)
        work.groups.append(_podspec.group(name, pods, template, f"{at}.template",
                                          claim_templates=_made_claims(template, owner_name)))
    if not work.groups:
        raise WorkloadError("spec.podSets: none")
    return work


def _made_claims(template: Mapping[str, Any], owner_name: str) -> dict[str, MadeClaim]:
    """The volumes a pod set's containers mount that its template does not hold: claims its
    job's controller adds to the pods (a JobSet's ``volumeClaimPolicies``, a TrainJob
    runtime's), named ``<volume>-<owner>`` as JobSet names them. Kueue copies the job's
    template as it is, so such a Workload is no bad input (blind job round 58: refused)."""
    spec = template.get("spec")
    if not isinstance(spec, Mapping):
        return {}
    return {vol: MadeClaim(f"{vol}-{owner_name}")
            for _, vol in _podspec.mounts_without_volume(spec)}


def _add_flavors(template: dict[str, Any], assignment: Mapping[str, Any], library: Library,
                 notes: list[str]) -> None:
    """Add the assigned ResourceFlavors' node labels and tolerations, as Kueue does on admission."""
    spec = template.setdefault("spec", {})
    for flavor_name in sorted({str(f) for f in mapping(assignment.get("flavors"),
                                                        "flavors").values()}):
        flavor = library.flavor(flavor_name)
        if flavor is None:
            notes.append(f"ResourceFlavor {flavor_name} unknown: its node labels are not applied")
            continue
        fspec = mapping(flavor.get("spec"), f"ResourceFlavor {flavor_name} spec")
        if fspec.get("nodeLabels"):
            spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}),
                                    **mapping(fspec["nodeLabels"], "nodeLabels")}
        if fspec.get("tolerations"):
            spec["tolerations"] = [*(spec.get("tolerations") or []),
                                   *sequence(fspec["tolerations"], "tolerations")]
