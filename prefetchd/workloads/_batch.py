"""Adapter: batch/v1 Job -> UpcomingWork (one pod group, ``main``, as Kueue names it).

Who calls this: :mod:`prefetchd.workloads._registry`. Pods: ``parallelism`` (default 1), or
``completions`` when that is smaller. State: ``Complete`` / ``SuccessCriteriaMet`` -> succeeded,
``Failed`` / ``FailureTarget`` -> failed, ``spec.suspend`` -> queued when a Kueue queue holds
it (its ``kueue.x-k8s.io/queue-name`` label), else inactive (suspended by hand: nothing runs
until someone resumes it; blind job rounds 44 and 47), active or ready pods -> running, else
admitted. An Indexed Job's locations built from its completion index are read at each index
still to run (``_podspec.job_group``; ``status.completedIndexes``/``failedIndexes`` are done).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prefetchd.workloads import _common, _podspec
from prefetchd.workloads._library import Library
from prefetchd.workloads._model import (
    HELD_BY_HAND,
    State,
    UpcomingWork,
    WorkloadError,
    condition,
    count,
    mapping,
)


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


def index_set(text: Any, where: str) -> set[int]:
    """The indexes of ``completedIndexes``-style text (``"0-2,5"``), as the Job controller
    writes them."""
    out: set[int] = set()
    if not text:
        return out
    for part in str(text).split(","):
        lo, _, hi = part.strip().partition("-")
        if not lo.isdigit() or hi and not hi.isdigit():
            raise WorkloadError(f"{where}: {text!r} is not a list of indexes (0-2,5)")
        out.update(range(int(lo), int(hi or lo) + 1) if int(hi or lo) - int(lo) < 100_000
                   else ())
    return out


def read(obj: Mapping[str, Any], library: Library) -> UpcomingWork:
    work = _common.start(obj, library)
    spec = mapping(obj.get("spec"), "spec")
    status = mapping(obj.get("status"), "status")
    done = index_set(status.get("completedIndexes"), "status.completedIndexes") | index_set(
        status.get("failedIndexes"), "status.failedIndexes")
    pods = job_pods(spec, "spec")
    if spec.get("completions") is not None:
        # the Job controller runs at most the completions still to come (blind job round
        # 58: 7 of 8 done and still warmed for 8 nodes)
        made = len(done) if spec.get("completionMode") == "Indexed" else \
            count(status.get("succeeded"), "status.succeeded", 0)
        pods = max(0, min(pods, count(spec["completions"], "spec.completions") - made))
    work.groups.append(_podspec.job_group("main", pods, spec, "spec", done=done))
    work.state = job_state(obj, bool(spec.get("suspend")))
    if work.state is State.QUEUED and not work.queue:
        work.state = State.INACTIVE
        work.notes.append(HELD_BY_HAND)
    return work
