"""Blind job round 47 (batch/v1 CronJobs and Jobs as their controllers write them): an Indexed
Job's done indexes (``completedIndexes``, ``failedIndexes``) were warmed again; a Job suspended
by hand (no Kueue queue label) was warmed as queued work; a CronJob schedule the API server
refuses (six fields, minute 61) or an unknown ``timeZone`` was planned and warmed, exit 0."""

from __future__ import annotations

import copy
import zoneinfo
from typing import Any

import pytest

from prefetchd import workloads

POD = {"spec": {"restartPolicy": "Never", "containers": [{
    "name": "score", "image": "s:1",
    "args": ["--shard", "s3://modsafe/shards/shard-$(JOB_COMPLETION_INDEX).tar"]}]}}


def _job(**more: Any) -> dict[str, Any]:
    job: dict[str, Any] = {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "rescore", "namespace": "ts"},
        "spec": {"completionMode": "Indexed", "completions": 5, "parallelism": 2,
                 "template": copy.deepcopy(POD)}}
    for k, v in more.items():
        job[k] = {**job.get(k, {}), **v}
    return job


def _uris(obj: dict[str, Any]) -> list[str | None]:
    return [r.uri for g in workloads.read(obj).groups for r in g.datasets]


def test_an_indexed_jobs_done_indexes_are_not_read_again() -> None:
    assert len(_uris(_job())) == 5
    job = _job(status={"active": 2, "completedIndexes": "0-1", "failedIndexes": "2"})
    assert _uris(job) == ["s3://modsafe/shards/shard-3.tar", "s3://modsafe/shards/shard-4.tar"]


def test_a_job_suspended_by_hand_is_not_warmed_but_one_kueue_holds_is() -> None:
    held = workloads.read(_job(spec={"suspend": True}))
    assert held.state is workloads.State.INACTIVE and held.state.done
    queued = workloads.read(_job(spec={"suspend": True}, metadata={
        "labels": {"kueue.x-k8s.io/queue-name": "batch"}}))
    assert queued.state is workloads.State.QUEUED


def _cron(schedule: str, zone: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"schedule": schedule, "jobTemplate": {"spec": {
        "template": copy.deepcopy(POD)}}}
    if zone:
        spec["timeZone"] = zone
    return {"apiVersion": "batch/v1", "kind": "CronJob",
            "metadata": {"name": "pacing", "namespace": "ads"}, "spec": spec}


@pytest.mark.parametrize("schedule", ["0 */15 * * * *", "61 25 * * *", "0 3 * * 9",
                                      "0 3 1 13 *", "*/0 * * * *"])
def test_a_schedule_the_api_server_refuses_is_refused(schedule: str) -> None:
    with pytest.raises(workloads.WorkloadError, match="spec.schedule"):
        workloads.read(_cron(schedule))


@pytest.mark.parametrize("schedule", ["0 3 * * *", "*/15 6-18 * * MON-FRI", "@daily",
                                      "0 0 1 jan,jul *", "TZ=UTC 0 3 * * *"])
def test_a_valid_schedule_is_planned(schedule: str) -> None:
    assert workloads.read(_cron(schedule)).groups


@pytest.mark.skipif(not zoneinfo.available_timezones(), reason="no time zone database here")
def test_an_unknown_time_zone_is_refused() -> None:
    assert workloads.read(_cron("0 3 * * *", "Europe/Amsterdam")).groups
    with pytest.raises(workloads.WorkloadError, match="spec.timeZone"):
        workloads.read(_cron("0 3 * * *", "America/NewYork"))


def test_a_trainjobs_initializer_that_succeeded_is_not_warmed_again() -> None:
    """Blind job round 48: ``status.jobsStatus`` showed the dataset initializer succeeded
    (no pod left), yet its ``storageUri`` was still warmed; what it wrote is there now."""
    runtime = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
               "metadata": {"name": "rt", "namespace": "ns"},
               "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": {
                   "replicatedJobs": [
                       {"name": "dataset-initializer", "template": {
                           "metadata": {"labels": {
                               "trainer.kubeflow.org/trainjob-ancestor-step":
                                   "dataset-initializer"}},
                           "spec": {"template": {"spec": {"containers": [{
                               "name": "dataset-initializer", "image": "init"}]}}}}},
                       {"name": "node", "dependsOn": [
                           {"name": "dataset-initializer", "status": "Complete"}],
                        "template": {
                           "metadata": {"labels": {
                               "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                           "spec": {"template": {"spec": {"containers": [{
                               "name": "node", "image": "t",
                               "args": ["--eval", "s3://bkt/eval/"]}]}}}}}]}}}}
    lib = workloads.Library()
    lib.add(runtime)
    job = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
           "metadata": {"name": "tj", "namespace": "ns"},
           "spec": {"runtimeRef": {"name": "rt", "kind": "TrainingRuntime"},
                    "initializer": {"dataset": {"storageUri": "s3://bkt/corpus/"}}},
           "status": {"jobsStatus": [
               {"name": "dataset-initializer", "active": 0, "ready": 0, "succeeded": 1},
               {"name": "node", "active": 1, "ready": 0, "succeeded": 0}]}}
    work = workloads.read(job, lib)
    uris = {g.name: [r.uri for r in g.datasets] for g in work.groups}
    assert uris == {"dataset-initializer": [], "node": ["s3://bkt/eval/"]}
    del job["status"]
    assert "s3://bkt/corpus/" in [r.uri for g in workloads.read(job, lib).groups
                                  for r in g.datasets]


def test_a_location_cut_at_a_command_substitution_is_shown_once_and_whole() -> None:
    """``dt=$(date ...)`` in a shell loop: the shell words cut the location at ``$(``; it was
    shown twice, as ``METERS= s3://...dt=$(`` and ``s3://...dt=$(``."""
    script = ('METERS=""\nfor d in 0 1 2; do\n'
              '  METERS="${METERS} s3://meter/zone=NL/dt=$(date -u -d "-${d} days" +%F)/"\n'
              'done\nexec python -m fit --meters ${METERS}\n')
    job = _job()
    job["spec"]["template"]["spec"]["containers"] = [
        {"name": "fit", "image": "f", "command": ["/bin/sh", "-c"], "args": [script]}]
    refs = [r for g in workloads.read(job).groups for r in g.datasets]
    assert [(r.uri, r.pattern) for r in refs] == [(None, "s3://meter/zone=NL/dt=$(...)")]
