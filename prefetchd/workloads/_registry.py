"""The adapters by apiVersion/kind, what the agent must watch to see them, and pods -> work.

Who calls this: :func:`prefetchd.workloads.read` (and the Katib adapter, for a trial's run
object). :data:`KINDS` lists every kind prefetchd reads with its API group, versions and
resource (plural, scope): the agent's watches and the RBAC rules follow from it.
:func:`pod_work` tells, from the labels the controllers put on pods, which work and which pod
group a pod belongs to (for the webhook: steer a worker to a warm node its siblings do not hold).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from prefetchd.workloads import (
    _argo_run,
    _batch,
    _common,
    _cronjob,
    _jobset,
    _katib,
    _kubeflow,
    _kueue,
    _podspec,
    _queue_flavors,
    _ray,
    _trainjob,
)
from prefetchd.workloads._common import EXPERIMENT_LABEL
from prefetchd.workloads._library import Library
from prefetchd.workloads._model import UpcomingWork, WorkloadError, work_key

Adapter = Callable[[Mapping[str, Any], Library], UpcomingWork]


@dataclass(frozen=True)
class Kind:
    group: str
    kind: str
    versions: tuple[str, ...]  # the first is the one to watch
    plural: str
    read: Adapter
    namespaced: bool = True


KINDS: tuple[Kind, ...] = (
    Kind("batch", "Job", ("v1",), "jobs", _batch.read),
    Kind("batch", "CronJob", ("v1",), "cronjobs", _cronjob.read),
    Kind("jobset.x-k8s.io", "JobSet", ("v1alpha2",), "jobsets", _jobset.read),
    Kind("trainer.kubeflow.org", "TrainJob", ("v1alpha1",), "trainjobs", _trainjob.read),
    *(Kind("kubeflow.org", k, _kubeflow.VERSIONS.get(k, ("v1",)), k.lower() + "s", _kubeflow.read)
      for k in _kubeflow.REPLICA_SPECS),
    Kind("kubeflow.org", "Experiment", ("v1beta1",), "experiments", _katib.read_experiment),
    Kind("kubeflow.org", "Trial", ("v1beta1",), "trials", _katib.read_trial),
    Kind("kueue.x-k8s.io", "Workload", ("v1beta2", "v1beta1"), "workloads", _kueue.read),
    Kind("ray.io", "RayJob", ("v1",), "rayjobs", _ray.read),
)
# Read only as a Katib trial's run object, never watched as work of its own (the agent's
# pipeline path watches Workflows): not in KINDS, so neither in the watches nor in the RBAC.
RUN_ONLY_KINDS: tuple[Kind, ...] = (
    Kind("argoproj.io", "Workflow", ("v1alpha1",), "workflows", _argo_run.read),
)
_BY_KIND = {(k.group, k.kind): k for k in KINDS}
GROUPS = frozenset(k.group for k in KINDS)  # the API groups whose kinds are read
_RUN_ONLY = {(k.group, k.kind): k for k in RUN_ONLY_KINDS}


def split_api_version(api_version: Any) -> tuple[str, str]:
    text = str(api_version or "")
    return tuple(text.split("/", 1)) if "/" in text else ("", text)  # type: ignore[return-value]


def lookup(obj: Mapping[str, Any], run_object: bool = False) -> Kind | None:
    """The Kind of an object prefetchd reads; *run_object*: also those read only as a trial's
    run object (RUN_ONLY_KINDS)."""
    group, _ = split_api_version(obj.get("apiVersion"))
    key = (group, str(obj.get("kind")))
    return _BY_KIND.get(key) or (_RUN_ONLY.get(key) if run_object else None)


def misfiled(obj: Mapping[str, Any]) -> str | None:
    """Why an object of a kind we read cannot be read under its apiVersion (``apps/v1 Job``,
    ``kubeflow.org/v1 TrainJob``: a slip, not another kind to ignore), naming the apiVersions
    read for that kind; None when its kind is not one we read, or its group is right (a wrong
    version in the right group is :func:`read`'s message), or another project's (Volcano's
    ``batch.volcano.sh`` Job: a kind of its own, ignored)."""
    kind = str(obj.get("kind"))
    group, _ = split_api_version(obj.get("apiVersion"))
    read_as = [f"{k.group}/{v}" for k in KINDS if k.kind == kind for v in k.versions]
    # (a slip is a group we read, or one of Kubernetes' own: apps, batch, "" - no dot)
    if not read_as or (group, kind) in _BY_KIND or "." in group and group not in GROUPS:
        return None
    return (f"apiVersion {obj.get('apiVersion') or '(none)'} is not read for {kind} (only "
            f"{', '.join(read_as)})")


def describe(obj: Mapping[str, Any]) -> str:
    """``Kind namespace/name`` of an object, for messages (never fails)."""
    if not isinstance(obj, Mapping):
        return f"a {type(obj).__name__}"
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    name = meta.get("name") or (f"{meta['generateName']}*" if meta.get("generateName") else "?")
    ns = meta.get("namespace")
    return f"{obj.get('kind')} {str(ns) + '/' if ns else ''}{name}"


def read(obj: Mapping[str, Any], library: Library | None = None,
         label: str | None = None, run_object: bool = False) -> UpcomingWork:
    """The UpcomingWork of one object; WorkloadError (one line naming it) if it cannot be read.
    *run_object*: the object is a Katib trial's, which may also be a RUN_ONLY_KINDS kind."""
    where = label or describe(obj)
    if not isinstance(obj, Mapping):
        raise WorkloadError(f"{where}: not an object")
    kind = lookup(obj, run_object)
    group, version = split_api_version(obj.get("apiVersion"))
    if kind is None:
        why = misfiled(obj) or (f"{obj.get('kind')} ({obj.get('apiVersion')}) is not a kind "
                                "prefetchd reads")
        raise WorkloadError(f"{where}: {why}")
    if version not in kind.versions:
        raise WorkloadError(f"{where}: {kind.kind} version {version} is not read (only "
                            f"{', '.join(group + '/' + v for v in kind.versions)})")
    library = library or Library()
    try:
        obj = _podspec.with_configmaps(obj, library)
        work = kind.read(obj, library)
        _common.pod_priority(work, library)
        _queue_flavors.apply(work, library)
        return _elsewhere(obj, work)
    except WorkloadError as exc:
        raise WorkloadError(f"{where}: {exc}") from None
    except (AttributeError, TypeError, KeyError, IndexError, ValueError) as exc:
        # A field of an unexpected shape deep inside: name the object, do not crash.
        raise WorkloadError(f"{where}: malformed {kind.kind} ({type(exc).__name__}: {exc})") \
            from None


MULTIKUEUE = "kueue.x-k8s.io/multikueue"


def _elsewhere(obj: Mapping[str, Any], work: UpcomingWork) -> UpcomingWork:
    """Work another cluster runs: ``spec.managedBy`` MultiKueue dispatches it to a worker
    cluster, whose nodes read the data; this cluster's warm nothing for it (said in a note)."""
    spec = obj.get("spec")
    if isinstance(spec, Mapping) and spec.get("managedBy") == MULTIKUEUE:
        work.groups = [replace(g, datasets=()) for g in work.groups]
        work.notes.append(f"spec.managedBy {MULTIKUEUE}: runs on a worker cluster; nothing "
                          "is warmed on this one")
    return work


# Pod labels set by the controllers (training-operator v1, JobSet, the Job controller, Katib).
V1_JOB_LABEL = "training.kubeflow.org/job-name"
V1_REPLICA_LABEL = "training.kubeflow.org/replica-type"  # the replica type, lower-cased
V1_OPERATOR_LABEL = "training.kubeflow.org/operator-name"  # "<kind lower-cased>-controller"
# The standalone mpi-operator (MPIJob kubeflow.org/v2beta1) names itself "mpi-operator" and
# tells launcher from worker by the job-role label, with no replica-type label.
MPI_OPERATOR = "mpi-operator"
V1_ROLE_LABEL = "training.kubeflow.org/job-role"
JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_LABELS = ("batch.kubernetes.io/job-name", "job-name")
TRIAL_LABEL = "katib.kubeflow.org/trial"
# KubeRay labels a RayCluster's pods with the cluster and the worker group ("headgroup" for
# the head); a RayJob's cluster is named "<rayjob>-<5 random characters>".
RAY_CLUSTER_LABEL = "ray.io/cluster"
RAY_GROUP_LABEL = "ray.io/group"
RAY_HEAD_GROUP = "headgroup"
_RAYJOB_CLUSTER = re.compile(r"(.+)-[a-z0-9]{5}")


def object_paths(key: str) -> list[str]:
    """The API paths of the object a work key names (``"pytorchjob ml/train"``), one per
    version read, the preferred first (a cluster serves MPIJob v1 or v2beta1); [] if none."""
    kind_name, _, rest = key.partition(" ")
    namespace, _, name = rest.partition("/")
    kind = next((k for k in KINDS if k.kind.lower() == kind_name), None)
    if kind is None or not name:
        return []
    tail = (f"namespaces/{namespace}/{kind.plural}/{name}" if kind.namespaced
            else f"{kind.plural}/{name}")
    return [f"/apis/{kind.group}/{version}/{tail}" for version in kind.versions]


def sibling_selector(pod: Mapping[str, Any]) -> str | None:
    """A label selector matching the pods of the same work as ``pod`` (every group: a master
    and its workers read the same data and need distinct nodes alike), or None."""
    meta = pod.get("metadata") if isinstance(pod.get("metadata"), Mapping) else {}
    labels = meta.get("labels") if isinstance(meta.get("labels"), Mapping) else {}
    for keys in ((TRIAL_LABEL,), (JOBSET_LABEL,), (V1_JOB_LABEL, V1_OPERATOR_LABEL),
                 (RAY_CLUSTER_LABEL,),
                 JOB_LABELS[:1],
                 JOB_LABELS[1:]):
        if labels.get(keys[0]):
            return ",".join(f"{k}={labels[k]}" for k in keys if labels.get(k))
    return None


def pod_work(pod: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(work key, group name) candidates for a pod, most specific first; [] if none.

    A TrainJob's pods are its JobSet's (same name), so both keys are given; a Trial's pods
    are also its run object's, and its Experiment's (Katib's experiment label), last. Group
    names of v1 jobs come lower-cased in the label: compare them case-insensitively
    (``PodGroup.name``, e.g. "Worker").
    """
    meta = pod.get("metadata") if isinstance(pod.get("metadata"), Mapping) else {}
    labels = meta.get("labels") if isinstance(meta.get("labels"), Mapping) else {}
    ns = str(meta.get("namespace") or "default")
    out: list[tuple[str, str]] = []
    trial = labels.get(TRIAL_LABEL)
    if labels.get(JOBSET_LABEL):
        name, group = str(labels[JOBSET_LABEL]), str(labels.get(REPLICATED_JOB_LABEL, ""))
        out += [(work_key("TrainJob", ns, name), group), (work_key("JobSet", ns, name), group)]
    elif labels.get(V1_JOB_LABEL):
        operator = str(labels.get(V1_OPERATOR_LABEL, ""))
        kind = "mpijob" if operator == MPI_OPERATOR else operator.removesuffix("-controller")
        v1_kinds = {k.kind.lower(): k.kind for k in KINDS if k.group == "kubeflow.org"}
        if kind in v1_kinds:
            group = labels.get(V1_REPLICA_LABEL) or labels.get(V1_ROLE_LABEL) or ""
            out.append((work_key(v1_kinds[kind], ns, str(labels[V1_JOB_LABEL])), str(group)))
    elif labels.get(RAY_CLUSTER_LABEL):
        made = _RAYJOB_CLUSTER.fullmatch(str(labels[RAY_CLUSTER_LABEL]))
        group = str(labels.get(RAY_GROUP_LABEL, ""))
        if made:
            out.append((work_key("RayJob", ns, made.group(1)),
                        _ray.HEAD if group == RAY_HEAD_GROUP else group))
    else:
        job = next((labels[k] for k in JOB_LABELS if labels.get(k)), None)
        if job:
            out.append((work_key("Job", ns, str(job)), "main"))
    if trial and out:
        out.insert(0, (work_key("Trial", ns, str(trial)), out[0][1]))
        experiment = labels.get(EXPERIMENT_LABEL)
        if experiment:  # Katib creates Trial, Job and pod in a second: a watcher may see the
            # pod before its Trial, but the Experiment (which holds the data) is older.
            out.append((work_key("Experiment", ns, str(experiment)), out[0][1]))
    return out
