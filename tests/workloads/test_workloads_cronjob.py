"""batch/v1 CronJob: training that comes back on a schedule is one piece of work with its Jobs.

The Job is made as the CronJob controller makes it (pkg/controller/cronjob), by the builder
the Kubernetes suites use (tests/k8s/training_objects.cronjob_run): named
``<cronjob>-<scheduled time in minutes since the epoch>``, the template's labels and
annotations plus ``batch.kubernetes.io/cronjob-scheduled-timestamp``, controller-owned by
the CronJob.
"""

from __future__ import annotations

import pytest

from prefetchd import workloads
from tests.k8s.training_objects import cronjob_run

DATASET = "s3://datasets/coco/train/"


def cronjob(suspend: bool = False, active: bool = False) -> dict:
    obj = {
        "apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": {"name": "nightly", "namespace": "ml", "uid": "3d9e-cj",
                     "creationTimestamp": "2026-12-01T00:00:00Z"},
        "spec": {"schedule": "0 2 * * *", "timeZone": "Etc/UTC", "suspend": suspend,
                 "concurrencyPolicy": "Forbid",
                 "jobTemplate": {
                     "metadata": {"labels": {"kueue.x-k8s.io/queue-name": "user-queue"}},
                     "spec": {"parallelism": 2, "completions": 2, "suspend": True,
                              "template": {"spec": {"restartPolicy": "Never", "containers": [{
                                  "name": "train", "image": "python:3.11",
                                  "command": ["python", "train.py", "--data", DATASET],
                                  "resources": {"requests": {"cpu": "2"}}}]}}}}},
        "status": {},
    }
    if active:
        obj["status"]["active"] = [{"apiVersion": "batch/v1", "kind": "Job", "namespace": "ml",
                                    "name": "nightly-29412120", "uid": "j1"}]
    return obj


def test_a_cronjob_is_its_job_template_with_the_queue_of_its_jobs() -> None:
    work = workloads.read(cronjob())
    assert work.key == "cronjob ml/nightly" and work.release_key == work.key
    assert [(g.name, g.pods) for g in work.groups] == [("main", 2)]
    assert work.queue == "user-queue"  # the template's label, which its Jobs carry
    assert work.state is workloads.State.QUEUED  # the next run is lead time
    [target] = work.targets()
    assert (target.dataset, target.nodes) == (DATASET, 2)
    assert any("0 2 * * *" in n and "Etc/UTC" in n for n in work.notes)


def test_state_follows_suspend_and_running_jobs() -> None:
    assert workloads.read(cronjob(active=True)).state is workloads.State.RUNNING
    suspended = workloads.read(cronjob(suspend=True))
    assert suspended.state is workloads.State.INACTIVE and suspended.state.done
    # Suspending stops the next runs; the one under way still reads its data.
    assert workloads.read(cronjob(suspend=True, active=True)).state is workloads.State.RUNNING


def test_the_jobs_it_makes_belong_to_it() -> None:
    """Each run's Job has the CronJob as owner and release key: its pins are the CronJob's,
    kept between runs; the agent skips the Job (its owner describes the same pods)."""
    job = workloads.read(cronjob_run(cronjob(), 29412120))
    assert job.owner == "cronjob ml/nightly" and job.release_key == "cronjob ml/nightly"
    assert [t.dataset for t in job.targets()] == [DATASET]


@pytest.mark.parametrize("spec,message", [
    ({"schedule": "* * * * *"}, "spec.jobTemplate.spec: no Job spec"),
    ({"schedule": "* * * * *", "jobTemplate": []}, "spec.jobTemplate: expected a mapping"),
    ({"jobTemplate": {"spec": {"parallelism": -1, "template": {}}}},
     "spec.jobTemplate.spec.parallelism"),
])
def test_a_malformed_cronjob_is_named_in_the_error(spec: dict, message: str) -> None:
    obj = {"apiVersion": "batch/v1", "kind": "CronJob",
           "metadata": {"name": "bad", "namespace": "ml"}, "spec": spec}
    with pytest.raises(workloads.WorkloadError) as err:
        workloads.read(obj)
    assert "CronJob ml/bad" in str(err.value) and message in str(err.value)
