"""What a live Argo Workflow's ``status`` says: which steps have started, and whether it is done.

Who calls this: :func:`prefetchd.pipeline._analyze_one` (:func:`apply`, for every plan of a
Workflow object that carries a ``status``: ``prefetchd plan`` on ``kubectl get -o yaml`` output
and the node agent's API objects alike) and :mod:`prefetchd.k8s.agent` (the phase sets, and the
steps' phases through the plan).

Data flow: ``status.nodes`` (keyed by node id) -> :func:`node_phases`, ``{displayName: phase}``
-> ``Step.phase`` of the step whose id is that display name (a DAG task's or step's name; a
loop's items and a retry's attempts have their own nodes, ``name(0:a)``/``name(0)``, and count
only through a node of the step's own name, as the controller writes a DAG loop's TaskGroup
or a retry's Retry node) and ``Suspend.phase`` the same way; ``status.phase`` -> ``Plan.phase``.
:meth:`prefetchd.pipeline.Plan.datasets` then leaves out what started steps read, and
everything once the workflow is done. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# A step in one of these has a pod (or was decided against): warming for it is late or moot.
STARTED_PHASES = ("Running", "Succeeded", "Failed", "Error", "Skipped", "Omitted")
# ... and in one of these it reads nothing any more: its datasets may go.
FINISHED_PHASES = ("Succeeded", "Failed", "Error", "Skipped", "Omitted")
# A workflow in one of these runs no step again.
DONE_WORKFLOW_PHASES = ("Succeeded", "Failed", "Error")


def status_of(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ``status`` of a Workflow object when the controller has written one (a phase or
    nodes); else None: a definition (the KFP compiler writes ``status: {startedAt: null,
    finishedAt: null}`` into the Workflows it makes)."""
    status = obj.get("status") if obj.get("kind") == "Workflow" else None
    if isinstance(status, dict) and (status.get("phase") or status.get("nodes")):
        return status
    return None


def node_phases(obj: Mapping[str, Any]) -> dict[str, str]:
    """``{displayName: phase}`` from ``status.nodes``; for a name several nodes share, the
    last one's (the agent's reading since it first used status, kept in one place); a
    running loop (TaskGroup) as Pending."""
    status = obj.get("status")
    nodes = status.get("nodes") if isinstance(status, dict) else None
    if not isinstance(nodes, dict):
        return {}
    # a loop's TaskGroup runs while its items start one by one (parallelism): those not
    # started yet still want their data (blind job round 42), so it has not started as a
    # whole until it is done
    return {n.get("displayName"): "Pending" if n.get("type") == "TaskGroup"
            and n.get("phase") == "Running" else n.get("phase")
            for n in nodes.values() if isinstance(n, dict)}


def apply(plan: Any, obj: Mapping[str, Any]) -> None:
    """Mark *plan* (a :class:`prefetchd.pipeline.Plan` of *obj*) with what *obj*'s status says:
    the workflow's phase, each step's and each suspend step's. No status: the plan is left as it
    is (a definition's plan does not change)."""
    status = status_of(obj)
    if status is None:
        return
    phases = node_phases(obj)
    plan.observed = True
    phase = status.get("phase")
    plan.phase = phase if isinstance(phase, str) else None
    for item in [*plan.steps, *plan.suspends]:
        ph = phases.get(item.id)
        item.phase = ph if isinstance(ph, str) else None
