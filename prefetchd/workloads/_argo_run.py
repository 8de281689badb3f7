"""Adapter: an Argo Workflow run by a Katib Trial -> UpcomingWork (one group per step).

Who calls this: :mod:`prefetchd.workloads._registry`, only for a trial's run object (Katib
runs an Experiment's trials as Argo Workflows when its ``trialSpec`` is one: the upstream
``katib-argo-workflow`` example). Workflows themselves are not watched as work: the agent's
pipeline path watches them (:mod:`prefetchd.k8s.agent`), with its DAG-ordered release.

Data flow: the Workflow -> :func:`prefetchd.pipeline.analyze_documents` (the same analysis as
``prefetchd plan`` of a pipeline: parameters, loops, input artifacts, scripts) -> per step a
PodGroup: its pods (one, or one per static loop item), the steps it waits for
(``depends_on``), its scheduling constraints (the template's ``nodeSelector``,
``tolerations``, ``affinity`` and container ``resources``) and its S3 reads known before
the run as datasets (a read only the run decides is kept as a pattern). A Workflow the
analysis refuses is a WorkloadError with its message.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prefetchd import pipeline
from prefetchd.workloads import _common
from prefetchd.workloads._library import Library
from prefetchd.workloads._model import DatasetRef, PodGroup, State, UpcomingWork, WorkloadError

# Steps that run no pod of their own.
_NO_POD = ("k8s-resource",)


def _group(step: pipeline.Step) -> PodGroup:
    sched = dict(step.scheduling or {})
    resources = [c.get("resources") for c in sched.pop("containers", []) or []
                 if isinstance(c, Mapping)]
    containers = [{"name": f"main-{i}" if i else "main", "image": step.image or "",
                   **({"resources": r} if r else {})}
                  for i, r in enumerate(resources or [None])]
    refs: list[DatasetRef] = []
    for r in step.reads:
        if r.supported and r.static:
            refs.append(DatasetRef(origin=f"argo {r.origin}", container="main", uri=r.uri))
        elif r.uri is None and (r.pattern or r.parameter):
            refs.append(DatasetRef(origin=f"argo {r.origin}", container="main",
                                   pattern=r.pattern or f"parameter {r.parameter}"))
    loop = step.loop
    pods = len(loop.items) if loop is not None and loop.items else 1
    return PodGroup(step.id, pods, {"metadata": {}, "spec": {**sched, "containers": containers}},
                    tuple(refs), tuple(step.depends_on))


def read(obj: Mapping[str, Any], library: Library) -> UpcomingWork:
    work = _common.start(obj, library)
    try:
        [plan] = pipeline.analyze_documents([dict(obj)], source=work.key)
    except pipeline.PipelineError as exc:
        raise WorkloadError(str(exc)) from None
    except ValueError:  # more than one plan from one object: not a single Workflow
        raise WorkloadError("not a single runnable Workflow") from None
    steps = [s for s in plan.steps if s.kind not in _NO_POD]
    if not steps:
        raise WorkloadError("spec: no step runs a pod")
    work.groups = [_group(s) for s in steps]
    work.notes += [f"step {s.id} runs once per item of a list only the run knows"
                   for s in steps if s.loop is not None and s.loop.items is None]
    phase = str((obj.get("status") or {}).get("phase") or "")
    work.state = {"Succeeded": State.SUCCEEDED, "Failed": State.FAILED,
                  "Error": State.FAILED, "Running": State.RUNNING}.get(phase, State.ADMITTED)
    return work
