"""Adapter: batch/v1 Job -> UpcomingWork (one pod group, ``main``, as Kueue names it).

Who calls this: :mod:`prefetchd.workloads._registry`. Pods: ``parallelism`` (default 1), or
``completions`` when that is smaller. State: ``Complete`` / ``SuccessCriteriaMet`` -> succeeded,
``Failed`` -> failed, ``spec.suspend`` -> queued (Kueue holds it), active or ready pods ->
running, else admitted. An Indexed Job's locations built from its completion index are read
at each index (``_podspec.job_group``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prefetchd.workloads import _common, _podspec
from prefetchd.workloads._library import Library
from prefetchd.workloads._model import State, UpcomingWork, condition, count, mapping


def job_pods(spec: Mapping[str, Any], where: str) -> int:
    """Pods of a Job spec that run at once: parallelism, capped by completions."""
    par = count(spec.get("parallelism"), f"{where}.parallelism")
    if spec.get("completions") is not None:
        return min(par, count(spec.get("completions"), f"{where}.completions"))
    return par


def job_state(obj: Mapping[str, Any], suspended: bool) -> State:
    if condition(obj, "Complete") or condition(obj, "SuccessCriteriaMet"):
        return State.SUCCEEDED
    if condition(obj, "Failed") or condition(obj, "FailureTarget"):
        return State.FAILED
    if suspended:
        return State.QUEUED
    status = mapping(obj.get("status"), "status")
    if (status.get("active") or 0) > 0 or (status.get("ready") or 0) > 0:
        return State.RUNNING
    return State.ADMITTED


def read(obj: Mapping[str, Any], library: Library) -> UpcomingWork:
    work = _common.start(obj, library)
    spec = mapping(obj.get("spec"), "spec")
    work.groups.append(_podspec.job_group("main", job_pods(spec, "spec"), spec, "spec"))
    work.state = job_state(obj, bool(spec.get("suspend")))
    return work
