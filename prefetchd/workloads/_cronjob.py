"""Adapter: batch/v1 CronJob -> UpcomingWork (the Job it makes on schedule: one group, ``main``).

Who calls this: :mod:`prefetchd.workloads._registry`. A CronJob is training that comes back
(a nightly fine-tune, a weekly retrain): its ``spec.jobTemplate.spec`` is the Job each run
makes, read as :mod:`._batch` reads a Job. The Jobs the CronJob controller makes are
controller-owned by it (``_common.SAME_PODS_OWNERS``), so they are one piece of work with it:
the dataset is warmed once the CronJob is seen and stays pinned between runs, until the
CronJob is suspended or deleted.

State: a Job of it running (``status.active``) -> running (suspending a CronJob stops its
next runs, not this one); else ``spec.suspend`` -> inactive (no run will start: pins go);
else queued (the next run is lead time). The schedule is kept
as a note (``plan`` shows it); prefetchd does not time the warm by it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prefetchd.workloads import _common, _podspec
from prefetchd.workloads._batch import job_pods
from prefetchd.workloads._library import Library
from prefetchd.workloads._model import State, UpcomingWork, WorkloadError, mapping


def read(obj: Mapping[str, Any], library: Library) -> UpcomingWork:
    work = _common.start(obj, library)
    spec = mapping(obj.get("spec"), "spec")
    template = mapping(spec.get("jobTemplate"), "spec.jobTemplate")
    job_spec = mapping(template.get("spec"), "spec.jobTemplate.spec")
    if not job_spec:
        raise WorkloadError("spec.jobTemplate.spec: no Job spec")
    # Kueue's labels go on the Jobs the CronJob makes: they are the template's.
    _common.kueue_labels(work, mapping(mapping(template.get("metadata"),
                                               "spec.jobTemplate.metadata").get("labels"),
                                       "spec.jobTemplate.metadata.labels"), library)
    work.groups.append(_podspec.job_group(
        "main", job_pods(job_spec, "spec.jobTemplate.spec"), job_spec, "spec.jobTemplate.spec"))
    status = mapping(obj.get("status"), "status")
    if status.get("active"):  # a run goes on (suspend stops only the next ones)
        work.state = State.RUNNING
    elif spec.get("suspend"):
        work.state = State.INACTIVE
    else:
        work.state = State.QUEUED
    if spec.get("schedule"):
        zone = f" ({spec['timeZone']})" if spec.get("timeZone") else ""
        work.notes.append(f"runs on schedule {spec['schedule']!r}{zone}")
    return work
