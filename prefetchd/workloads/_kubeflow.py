"""Adapter: the kubeflow.org/v1 training-operator jobs -> UpcomingWork, one group per replica type.

Who calls this: :mod:`prefetchd.workloads._registry`, for PyTorchJob, TFJob, MPIJob, JAXJob,
XGBoostJob and PaddleJob; and for the standalone mpi-operator's MPIJob (kubeflow.org/v2beta1,
the version Kueue's MPIJob integration uses), whose spec and status have the same shape
(``mpiReplicaSpecs`` Launcher/Worker, ``runPolicy.suspend``, the same conditions). A cluster
serves one MPIJob version or the other (one CRD name).

Every replica spec (``spec.<x>ReplicaSpecs.<Type>``: Master, Worker, Chief, PS, Evaluator,
Launcher) is a group of ``replicas`` pods (default 1), all started together; what an MPIJob's
Launcher names is read by its Workers (``_common.launched_on_workers``). State, from
``status.conditions`` (type with status "True"): ``Succeeded`` -> succeeded, ``Failed`` ->
failed, ``spec.runPolicy.suspend`` (or ``Suspended``) -> queued, ``Running`` -> running, else
admitted (``Created``: pods being made).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prefetchd.workloads import _common, _podspec, _validate
from prefetchd.workloads._library import Library
from prefetchd.workloads._model import State, UpcomingWork, WorkloadError, condition, count, mapping

REPLICA_SPECS = {
    "PyTorchJob": "pytorchReplicaSpecs",
    "TFJob": "tfReplicaSpecs",
    "MPIJob": "mpiReplicaSpecs",
    "JAXJob": "jaxReplicaSpecs",
    "XGBoostJob": "xgbReplicaSpecs",
    "PaddleJob": "paddleReplicaSpecs",
}

# The replica types each kind's operator knows (others: the operator refuses the job).
REPLICA_TYPES = {
    "PyTorchJob": ("Master", "Worker"),
    "TFJob": ("Chief", "Master", "PS", "Worker", "Evaluator"),
    "MPIJob": ("Launcher", "Worker"),
    "JAXJob": ("Worker",),
    "XGBoostJob": ("Master", "Worker"),
    "PaddleJob": ("Master", "Worker"),
}

# Versions read besides v1 (the first version a cluster serves is the one watched).
VERSIONS = {"MPIJob": ("v1", "v2beta1")}


def v1_state(obj: Mapping[str, Any], suspended: bool) -> State:
    if condition(obj, "Succeeded"):
        return State.SUCCEEDED
    if condition(obj, "Failed"):
        return State.FAILED
    if suspended or condition(obj, "Suspended"):
        return State.QUEUED
    if condition(obj, "Running") or condition(obj, "Restarting"):
        return State.RUNNING
    return State.ADMITTED


def read(obj: Mapping[str, Any], library: Library) -> UpcomingWork:
    work = _common.start(obj, library)
    spec = mapping(obj.get("spec"), "spec")
    field = REPLICA_SPECS[work.kind]
    replicas = mapping(spec.get(field), f"spec.{field}")
    if not replicas:
        raise WorkloadError(f"spec.{field}: no replica specs")
    _validate.check_replica_types(replicas, REPLICA_TYPES[work.kind], f"spec.{field}")
    for rtype, rspec in replicas.items():
        at = f"spec.{field}.{rtype}"
        rspec = mapping(rspec, at)
        replicas = count(rspec.get("replicas"), f"{at}.replicas")
        # (a pod's index in its replica type: the operator's replica-index label)
        work.groups.append(_podspec.group(str(rtype), replicas, rspec.get("template"),
                                          f"{at}.template",
                                          indexes={_podspec.REPLICA_INDEX: replicas}))
    if work.kind == "MPIJob":
        _common.launched_on_workers(work, "Launcher", "Worker",
                                    bool(spec.get("runLauncherAsWorker")))
    run_policy = mapping(spec.get("runPolicy"), "spec.runPolicy")
    work.state = v1_state(obj, bool(run_policy.get("suspend")))
    return work
