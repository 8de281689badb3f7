"""Upcoming training work beyond pipelines: Kubeflow Trainer, v1 jobs, Katib, Job, CronJob,
JobSet, Kueue, KubeRay.

Public API (callers: ``prefetchd plan`` through :mod:`prefetchd.workloads.plan_cli`; the node
agent's :mod:`prefetchd.k8s.workload_watch` and the webhook's :mod:`prefetchd.k8s.job_steering`
call :func:`read` on watched / fetched objects, see docs/prefetchd.md):

    read(obj, library=None) -> UpcomingWork
        One API object (a dict, as the API server serves it) of a kind in KINDS.
    Library(objects)  runtimes, trial-template ConfigMaps, WorkloadPriorityClasses and
        ResourceFlavors that some kinds need; is_library_object(obj) tells them apart.
    UpcomingWork: groups (PodGroup: name, pods, template, datasets, after, requirements),
        state (State), queue, priority_class, priority, created, copies, owner, release_key,
        key, nodes, targets(resolve) -> [WarmTarget], to_json(resolve).
    order_key(work)  the warm order (admitted first, then queued by priority and age).
    group_datasets(targets, group)  the datasets a pod of that group needs.
    KINDS  what is read: group, kind, versions, plural, scope (for watches and RBAC).
    object_paths(key), sibling_selector(pod)  the API paths of a work key's object; the
        label selector of a pod's siblings (same work), for the webhook.
    LIBRARY_WATCHES  the lookup kinds the agent watches to fill a Library; fetcher(get_json)
        a Library.fetch that GETs a missing one (api_path gives its path).
    pod_work(pod) -> [(work key, group name)]  which work a pod belongs to, from the labels
        its controller sets (for the webhook).
    WorkloadError: bad input; str(e) is one line naming the object and the field.

One module per kind (``_batch``, ``_cronjob``, ``_jobset``, ``_kubeflow``, ``_trainjob``,
``_katib``, ``_kueue``, ``_ray``; ``_argo_run`` for a Katib trial that is an Argo Workflow), each
turning its object into the common model of ``_model`` through ``_podspec`` (pod template ->
datasets and trustworthy constraints; ``_argo_run`` through the pipeline analysis).
Everything is pure: no API reads; PVC claims are named and resolved by the caller
(``resolver_from_view``, ``resolver_from_map`` in ``_resolve``).
"""

from __future__ import annotations

from prefetchd.workloads._library import (
    LIBRARY_WATCHES,
    Library,
    api_path,
    fetcher,
    is_library_object,
)
from prefetchd.workloads._model import (
    DatasetRef,
    PodGroup,
    State,
    UpcomingWork,
    WarmTarget,
    WorkloadError,
    group_datasets,
    order_key,
    record_of,
    s3_only,
    with_queue_record,
    work_key,
)
from prefetchd.workloads._registry import (
    KINDS,
    Kind,
    describe,
    lookup,
    object_paths,
    pod_work,
    read,
    sibling_selector,
)
from prefetchd.workloads._resolve import pins_from_view, resolver_from_map, resolver_from_view

__all__ = [
    "KINDS",
    "LIBRARY_WATCHES",
    "DatasetRef",
    "Kind",
    "Library",
    "PodGroup",
    "State",
    "UpcomingWork",
    "WarmTarget",
    "WorkloadError",
    "api_path",
    "describe",
    "fetcher",
    "is_library_object",
    "lookup",
    "object_paths",
    "group_datasets",
    "order_key",
    "pod_work",
    "read",
    "pins_from_view",
    "resolver_from_map",
    "resolver_from_view",
    "s3_only",
    "sibling_selector",
    "record_of",
    "with_queue_record",
    "work_key",
]
