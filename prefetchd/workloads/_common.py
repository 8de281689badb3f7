"""What every adapter reads the same way: metadata, Kueue labels, owners, release keys.

Who calls this: the adapter modules, first thing for each object (:func:`start`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from prefetchd.k8s import datasets as k8s_datasets
from prefetchd.workloads import _podspec, _validate
from prefetchd.workloads._library import Library
from prefetchd.workloads._model import DatasetRef, PodGroup, UpcomingWork, mapping, work_key

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
EXPERIMENT_LABEL = "katib.kubeflow.org/experiment"
GENERATED = "<generated>"  # a generateName object read from a file has no name yet

# Controller owners that describe the same pods as the object they made: a TrainJob's JobSet,
# a JobSet's Jobs, a Trial's run object, a job's Kueue Workload, a CronJob's Jobs, a RayJob's
# submitter Job (its one pod only hands the entrypoint to the cluster the RayJob describes).
# (Experiment -> Trial is not one: the Trial is the rendered instance, read on its own.)
SAME_PODS_OWNERS = {
    "trainer.kubeflow.org": {"TrainJob"},
    "jobset.x-k8s.io": {"JobSet"},
    "kubeflow.org": {"Trial", "PyTorchJob", "TFJob", "MPIJob", "JAXJob", "XGBoostJob",
                     "PaddleJob"},
    "batch": {"Job", "CronJob"},
    "ray.io": {"RayJob"},
}


def start(obj: Mapping[str, Any], library: Library) -> UpcomingWork:
    """An UpcomingWork with what the object's metadata says (no groups, state ADMITTED)."""
    meta = mapping(obj.get("metadata"), "metadata")
    labels = mapping(meta.get("labels"), "metadata.labels")
    _validate.check_labels(labels, "metadata.labels")
    namespace = str(meta.get("namespace") or "default")
    name = str(meta.get("name") or "")
    if not name:
        gen = meta.get("generateName")
        name = f"{gen}{GENERATED}" if gen else GENERATED
    work = UpcomingWork(
        api_version=str(obj.get("apiVersion")), kind=str(obj.get("kind")),
        namespace=namespace, name=name, uid=str(meta.get("uid") or ""),
        created=str(meta.get("creationTimestamp") or ""),
    )
    kueue_labels(work, labels, library)
    work.owner = same_pods_owner(meta, namespace)
    if work.owner is not None:
        work.owner_uid = str(_same_pods_ref(meta).get("uid") or "")
    exp = labels.get(EXPERIMENT_LABEL)
    work.release_key = (work_key("Experiment", namespace, str(exp)) if exp
                        else work.owner or work.key)
    return work


def kueue_labels(work: UpcomingWork, labels: Mapping[str, Any], library: Library) -> None:
    """The Kueue queue and priority class that *labels* name, where *work* has none yet (the
    object's own labels first; a CronJob's job-template labels after them)."""
    queue, pclass = labels.get(QUEUE_LABEL), labels.get(PRIORITY_LABEL)
    if queue and not work.queue:
        work.queue = str(queue)
    if pclass and not work.priority_class:
        work.priority_class = str(pclass)
        work.priority = library.priority(str(pclass))


def pod_priority(work: UpcomingWork, library: Library) -> None:
    """Work with no Kueue priority class takes its pods' ``priorityClassName`` (the first
    group's that names one): Kueue's priority for such a job, and the scheduler's."""
    if work.priority_class or work.priority is not None:
        return
    for g in work.groups:
        name = g.spec.get("priorityClassName")
        if name:
            work.priority_class = str(name)
            work.priority = library.pod_priority(str(name))
            return


def same_pods_owner(meta: Mapping[str, Any], namespace: str) -> str | None:
    """The key of the controller owner that describes the same pods, if it is one we read."""
    ref = _same_pods_ref(meta)
    return work_key(str(ref["kind"]), namespace, str(ref.get("name", ""))) if ref else None


def _same_pods_ref(meta: Mapping[str, Any]) -> Mapping[str, Any]:
    """The owner reference of same_pods_owner ({}: none)."""
    for ref in meta.get("ownerReferences") or []:
        if not isinstance(ref, Mapping) or not ref.get("controller"):
            continue
        group = str(ref.get("apiVersion") or "").split("/", 1)[0]
        if ref.get("kind") in SAME_PODS_OWNERS.get(group, ()):
            return ref
    return {}


def launched_on_workers(work: UpcomingWork, launcher: str, workers: str,
                        launcher_works: bool) -> None:
    """An MPI launcher only starts the program (``mpirun ... train.py --data s3://...``) on
    the workers, which usually name nothing themselves: what its command line reads is read
    on the workers' nodes, and on the launcher's only when it runs a rank too
    (``runLauncherAsWorker`` of an MPIJob, ``runLauncherAsNode`` of a Trainer MPI runtime).
    Without workers, whatever runs, runs beside the launcher."""
    lg = next((g for g in work.groups if g.name == launcher), None)
    if lg is None or not any(g.name == workers for g in work.groups):
        return
    # (the launcher's init containers run in its own pod: what they read stays there)
    inits = {str(c.get("name", "")) for c in lg.spec.get("initContainers") or []
             if isinstance(c, Mapping)}
    words = [w for c in lg.spec.get("containers") or []
             if isinstance(c, Mapping) for w in k8s_datasets.container_words(c)]
    launched = [d for d in lg.datasets if not _on_mount(d) and d.container not in inits]
    for i, g in enumerate(work.groups):
        if g.name == workers:
            work.groups[i] = with_program(g, words, launched)
        elif g is lg and not launcher_works:
            work.groups[i] = replace(g, datasets=tuple(d for d in g.datasets
                                                       if d.container in inits))


def with_program(group: PodGroup, words: Sequence[_podspec.Word],
                 refs: Sequence[DatasetRef]) -> PodGroup:
    """*group* running a program started from elsewhere (an MPI launcher's command line, a
    RayJob's entrypoint), whose *words* and the locations they name (*refs*) are read on its
    pods: its own mounts narrowed by the paths the words name under them, and *refs* added."""
    mounted = [d for d in _podspec.template_refs(group.spec, {}, words) if _on_mount(d)]
    redone = {d.origin for d in mounted}
    own = tuple(d for d in group.datasets if not (_on_mount(d) and d.origin in redone))
    have = {replace(d, container="") for d in own}
    more = tuple(d for d in (*mounted, *refs) if replace(d, container="") not in have)
    return replace(group, datasets=own + more)


def without_program_mounts(group: PodGroup, words: Sequence[_podspec.Word]) -> PodGroup:
    """*group* beside a program that runs elsewhere (a RayJob's head that runs no tasks):
    of the volumes it shares with the program's pods, those the program names paths under
    are the program's to read, not this group's."""
    def by_volume(refs: Sequence[DatasetRef]) -> dict[str, set[DatasetRef]]:
        out: dict[str, set[DatasetRef]] = {}
        for d in refs:
            if _on_mount(d):
                out.setdefault(d.origin, set()).add(replace(d, container=""))
        return out

    alone = by_volume(_podspec.template_refs(group.spec, {}))
    narrowed = {o for o, refs in by_volume(_podspec.template_refs(group.spec, {}, words)
                                           ).items() if refs != alone.get(o)}
    return replace(group, datasets=tuple(d for d in group.datasets
                                         if not (_on_mount(d) and d.origin in narrowed)))


def _on_mount(ref: DatasetRef) -> bool:
    """A dataset a pod reads through one of its volumes (named by the volume: origin)."""
    return ref.origin.startswith(("pvc ", "csi "))
