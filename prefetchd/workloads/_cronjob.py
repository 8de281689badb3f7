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
as a note (``plan`` shows it); prefetchd does not time the warm by it. A schedule or time zone
the API server would refuse (six fields, minute 61, ``America/NewYork``) is refused, naming
the field (blind job round 47: it was planned and warmed).
"""

from __future__ import annotations

import re
import zoneinfo
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
    check_schedule(spec.get("schedule"), spec.get("timeZone"))
    if spec.get("schedule"):
        zone = f" ({spec['timeZone']})" if spec.get("timeZone") else ""
        held = ", suspended: nothing is warmed until it is resumed" \
            if spec.get("suspend") else ""  # (blind job round 60: only the schedule said)
        work.notes.append(f"runs on schedule {spec['schedule']!r}{zone}{held}")
    return work


# the standard five fields' bounds (minute, hour, day of month, month, day of week), names as
# the CronJob controller's parser takes them
_FIELDS = (("minute", 0, 59, ()), ("hour", 0, 23, ()), ("day of month", 1, 31, ()),
           ("month", 1, 12, ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep",
                             "oct", "nov", "dec")),
           ("day of week", 0, 7, ("sun", "mon", "tue", "wed", "thu", "fri", "sat")))
_DESCRIPTORS = frozenset({"@yearly", "@annually", "@monthly", "@weekly", "@daily",
                          "@midnight", "@hourly"})
_PART = re.compile(r"(\*|[0-9a-z]+(?:-[0-9a-z]+)?)(?:/([0-9]+))?|\?")


def check_schedule(schedule: Any, zone: Any) -> None:
    """WorkloadError naming ``spec.schedule`` or ``spec.timeZone`` when the API server would
    refuse it: not five fields (a six-field one with seconds), a value out of its field's
    range, an unknown time zone, or ``TZ=`` in the schedule beside ``timeZone``."""
    if not isinstance(schedule, str) or not schedule.strip():
        raise WorkloadError("spec.schedule: missing (five cron fields, e.g. '0 3 * * *')")
    text = schedule.strip()
    if text.startswith(("TZ=", "CRON_TZ=")):
        if zone:
            raise WorkloadError("spec.schedule: TZ= is not allowed beside spec.timeZone")
        text = text.split(None, 1)[1] if " " in text else ""
    if text.lower() in _DESCRIPTORS or text.lower().startswith("@every "):
        fields: list[str] = []
    else:
        fields = text.split()
        if len(fields) != 5:
            raise WorkloadError(f"spec.schedule: {schedule!r} has {len(fields)} fields, not 5 "
                                "(minute hour day-of-month month day-of-week; no seconds)")
    for value, (name, lo, hi, names) in zip(fields, _FIELDS, strict=False):
        for part in value.lower().split(","):
            m = _PART.fullmatch(part)
            ends = [] if m is None or m.group(1) in (None, "*") else m.group(1).split("-")
            nums = [names.index(e) + (1 if name == "month" else 0) if e in names else
                    int(e) if e.isdigit() else -1 for e in ends]
            if m is None or any(not lo <= n <= hi for n in nums) or \
                    (m.group(2) is not None and int(m.group(2)) == 0):
                raise WorkloadError(f"spec.schedule: {schedule!r}: {part!r} is no {name} "
                                    f"({lo}-{hi})")
    if zone is not None and zoneinfo.available_timezones():  # (no tz database: not judged)
        try:
            zoneinfo.ZoneInfo(str(zone))
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise WorkloadError(f"spec.timeZone: {zone!r} is not a time zone "
                                "(an IANA name such as 'America/New_York')") from None
