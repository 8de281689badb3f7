"""Blind job round 58 (a platform team's month on a shared GPU cluster, objects as the
controllers write them): a Kueue Workload of a JobSet (or a TrainJob) whose pods mount a
``volumeClaimPolicies`` claim was refused as a mount of no volume, though Kueue copies the
job's template as it is; a running Job was warmed for ``parallelism`` nodes when fewer
completions were left to run."""

from __future__ import annotations

from typing import Any

from prefetchd import workloads
from prefetchd.workloads._library import Library


def _pod(mounts: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    args = ["--data", "s3://corpora/sft/v7/"] + (["--init", "/ckpt/base.pt"] if mounts else [])
    return {"spec": {"restartPolicy": "Never", **extra, "containers": [{
        "name": "main", "image": "trainer:3", "args": args,
        **({"volumeMounts": mounts} if mounts else {})}]}}


def test_a_workload_of_a_jobset_mounting_its_claim_template_is_read() -> None:
    """The Workload Kueue makes for a JobSet with volumeClaimPolicies: the pod set's
    template mounts 'ckpt', which only the JobSet controller adds to the pods."""
    wl = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
          "metadata": {"name": "jobset-sft-4c5d6", "namespace": "ml",
                       "labels": {"kueue.x-k8s.io/job-uid": "b1"},
                       "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2",
                                            "kind": "JobSet", "name": "sft", "uid": "b1",
                                            "controller": True,
                                            "blockOwnerDeletion": True}]},
          "spec": {"active": True, "queueName": "shared-q", "priority": 0, "podSets": [
              {"name": "node", "count": 2,
               "template": _pod([{"name": "ckpt", "mountPath": "/ckpt"}])}]}}
    work = workloads.read(wl, Library())
    (group,) = work.groups
    assert group.pods == 2
    assert [t.dataset for t in work.targets()] == ["s3://corpora/sft/v7/"]
    claims = [d.claim for d in group.datasets if d.claim]
    assert claims == ["ckpt-sft"], claims  # (named as the JobSet controller names it)


def test_a_mount_of_no_volume_in_a_job_of_its_own_is_still_refused() -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "ml"},
           "spec": {"template": _pod([{"name": "ckpt", "mountPath": "/ckpt"}])}}
    try:
        workloads.read(job, Library())
    except workloads.WorkloadError as e:
        assert "volumeMount 'ckpt' names no volume" in str(e)
    else:
        raise AssertionError("a Job whose pods mount no volume was accepted")


def _job(status: dict[str, Any], indexed: bool) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "tok", "namespace": "ml"},
            "spec": {"completions": 8, "parallelism": 8,
                     "completionMode": "Indexed" if indexed else "NonIndexed",
                     "template": _pod()},
            "status": {"active": 1, "ready": 1, **status}}


def test_a_running_job_is_as_wide_as_the_completions_left() -> None:
    """7 of 8 completions done: one pod is left to run, not 8."""
    work = workloads.read(_job({"succeeded": 7}, indexed=False), Library())
    assert work.groups[0].pods == 1 and work.nodes == 1
    work = workloads.read(_job({"succeeded": 5, "completedIndexes": "0-4"}, indexed=True),
                          Library())
    assert work.groups[0].pods == 3
    fresh = workloads.read(_job({}, indexed=False), Library())
    assert fresh.groups[0].pods == 8
