"""What a live Argo Workflow's ``status`` says: which steps have started, and whether it is done.

Who calls this: :func:`prefetchd.pipeline._analyze_one` (:func:`apply`, for every plan of a
Workflow object that carries a ``status``: ``prefetchd plan`` on ``kubectl get -o yaml`` output
and the node agent's API objects alike) and :mod:`prefetchd.k8s.agent` (the phase sets, and the
steps' phases through the plan).

Data flow: ``status.nodes`` (keyed by node id) -> ``Step.phase``/``Suspend.phase``. An Argo
plan's step knows the name the controller gives its node (``Step.status_node``: ``<wf>.train``,
``<wf>.prep[0].fetch``, ``<wf>.onExit``; the names are unique, so two steps of one name in two
sub-templates are told apart); in a loop it is the loop's group node (a DAG task's TaskGroup, a
steps loop's StepGroup), started as a whole only once it is done, since the items not started
yet still want their data. A plan that does not know the names (KFP v2 from its IR) is matched
by display name (:func:`node_phases`). ``status.phase`` -> ``Plan.phase``; ``spec.suspend``
and ``spec.shutdown`` -> ``Plan.held``, ``Plan.exit_still_runs`` (:func:`_hold`).
:meth:`prefetchd.pipeline.Plan.datasets` then leaves out what started steps read, and
everything once the workflow is done, or while it is held (but a Stop's exit handler). Pure:
no I/O.
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


def _hold(obj: Mapping[str, Any]) -> tuple[str | None, bool]:
    """Why nothing new of *obj* starts, when someone suspended it (``spec.suspend``: ``argo
    suspend`` on a Workflow, a CronWorkflow that makes no runs) or shuts it down
    (``spec.shutdown``: ``argo terminate``, or ``argo stop``, whose exit handler still runs),
    and whether its exit handler still runs; (None, False) when nothing holds it. A suspended
    Workflow's running pods go on (unlike a suspended Job's), so what they read stays warm;
    only the steps still to come wait, for a resume nobody can foresee."""
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return None, False
    shutdown = spec.get("shutdown")
    if obj.get("kind") == "Workflow" and shutdown in ("Stop", "Terminate"):
        # (argo stop / terminate: set before the controller marks the nodes; blind job
        # round 51 warmed steps that would never start)
        stop = shutdown == "Stop"
        return (f"shutting down (spec.shutdown: {shutdown}): no step starts"
                + ("; its exit handler still runs" if stop else "")), stop
    if spec.get("suspend") is not True:
        return None, False
    if obj.get("kind") == "CronWorkflow":
        return "suspended (spec.suspend): the CronWorkflow starts no run until it is resumed", \
            False
    if obj.get("kind") == "Workflow":
        return "suspended (spec.suspend): no step starts until the workflow is resumed", False
    return None, False


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
    # a loop's TaskGroup runs while its items start one by one (parallelism): those not
    # started yet still want their data (blind job round 42), so it has not started as a
    # whole until it is done
    return {n.get("displayName"): "Pending" if n.get("type") == "TaskGroup"
            and n.get("phase") == "Running" else n.get("phase")
            for n in nodes(obj).values()}


def apply(plan: Any, obj: Mapping[str, Any]) -> None:
    """Mark *plan* (a :class:`prefetchd.pipeline.Plan` of *obj*) with what *obj*'s status says:
    the workflow's phase, each step's and each suspend step's. No status: the plan is left as it
    is (a definition's plan does not change)."""
    plan.held, plan.exit_still_runs = _hold(obj)
    status = status_of(obj)
    if status is None:
        return
    items = [*plan.steps, *plan.suspends]
    by_id = nodes(obj)
    by_name = {n.get("name"): _phase(n, by_id) for n in by_id.values()}
    # (a plan that knows its nodes' names: an Argo one; one made from KFP's IR does not)
    by_display = node_phases(obj) if any(i.status_node is None for i in items) else {}
    wf = str((obj.get("metadata") or {}).get("name") or "")
    plan.observed = True
    phase = status.get("phase")
    plan.phase = phase if isinstance(phase, str) else None
    for item in items:
        if item.status_node is None:
            ph = by_display.get(item.id)
        else:
            name, group = item.status_node
            ph = by_name.get(wf + name)
            if group and ph is not None and ph not in FINISHED_PHASES:
                ph = "Pending"  # some items may not have started: they still want their data
        item.phase = ph if isinstance(ph, str) else None


def nodes(obj: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``status.nodes`` by node id (the mappings only; {} without them). The analysis reads a
    finished step's outputs from them too (``_argo``)."""
    status = obj.get("status")
    found = status.get("nodes") if isinstance(status, dict) else None
    if not isinstance(found, dict):
        return {}
    return {k: n for k, n in found.items() if isinstance(n, dict)}


def _phase(node: Mapping[str, Any], by_id: Mapping[str, Mapping[str, Any]]) -> Any:
    """A node's phase as the step's: a Retry node still running is its latest attempt's, and
    Pending while it waits to try again (the attempt failed, the next has no pod yet) or the
    attempt's pod waits for a node (blind job round 45: the next attempt's data was not
    warmed, nor an unschedulable first attempt's)."""
    phase = node.get("phase")
    if node.get("type") != "Retry" or phase in FINISHED_PHASES:
        return phase
    children = [by_id[c] for c in node.get("children") or [] if c in by_id]
    if not children:
        return "Pending"
    last = children[-1].get("phase")
    return "Pending" if last in FINISHED_PHASES or last in (None, "Pending") else last
