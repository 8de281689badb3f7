"""Blind job round 60 (data that arrives late or changes): a location in a job's args whose
bucket is no bucket name (``s3:///x``, ``s3://Bad_Bucket!/x``) was listed to warm, and
`prefetchd warm` then refused it or failed in boto3; a Workload left from an earlier Job of
the same name (another owner uid) made the new, suspended Job "admitted"; a StorageClass
typo's hint left out ``prefixPolicy``; a suspended CronJob said only its schedule."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from prefetchd import cli, workloads
from prefetchd.workloads._library import Library


def job(args: list[str], **meta: object) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "broken-uri", "namespace": "ml", **meta},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "main", "image": "x:1", "args": args}]}}}}


def test_a_location_whose_bucket_is_no_bucket_name_is_not_warmed(tmp_path: Path,
                                                                  capsys) -> None:
    work = workloads.read(job(["--data", "s3:///shards/train/", "--val",
                               "s3://Bad_Bucket!/val/", "--ok", "s3://vision/v7/"]),
                          Library())
    assert [t.dataset for t in work.targets()] == ["s3://vision/v7/"]
    f = tmp_path / "job.yaml"
    f.write_text(yaml.safe_dump(job(["--val", "s3://Bad_Bucket!/val/"])))
    assert cli.main(["plan", str(f)]) == 0
    out = capsys.readouterr().out
    assert "['Bad_Bucket!' is not an S3 bucket name: not warmed]" in out
    assert "warm: nothing" in out


def test_warm_refuses_a_bucket_that_is_no_bucket_name_in_its_own_words(tmp_path: Path,
                                                                       capsys) -> None:
    assert cli.main(["warm", "s3://Bad_Bucket!/val/", "--cache-dir", str(tmp_path / "c"),
                     "--endpoint-url", "http://127.0.0.1:1", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "'Bad_Bucket!' is not an S3 bucket name" in err and "ParamValidation" not in err


WORKLOAD = {
    "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
    "metadata": {"name": "job-recreated-old99", "namespace": "ml", "ownerReferences": [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "broken-uri",
         "uid": "uid-1", "controller": True}]},
    "spec": {"queueName": "team-q", "podSets": [{"name": "main", "count": 1, "template": {
        "spec": {"restartPolicy": "Never", "containers": [
            {"name": "main", "image": "x:1", "args": ["--data", "s3://vision/v7/"]}]}}}]},
    "status": {"conditions": [{"type": "Admitted", "status": "True", "reason": "Admitted",
                               "message": "", "lastTransitionTime": "2026-12-01T10:00:00Z"}]},
}


@pytest.mark.parametrize("uid, state, said", [
    ("uid-2", "queued", "left from an earlier job ml/broken-uri"),
    ("uid-1", "admitted", "its owner's: job ml/broken-uri"),
])
def test_a_workload_lends_its_state_only_to_the_job_whose_uid_it_names(
        tmp_path: Path, capsys, uid: str, state: str, said: str) -> None:
    new = job(["--data", "s3://vision/v7/"], uid=uid,
              labels={"kueue.x-k8s.io/queue-name": "team-q"})
    new["spec"]["suspend"] = True
    f = tmp_path / "all.yaml"
    f.write_text(yaml.safe_dump_all([new, WORKLOAD]))
    assert cli.main(["plan", str(f)]) == 0
    out = capsys.readouterr().out
    assert f"Job ml/broken-uri  [batch/v1]  {state} in queue team-q" in out, out
    assert said in out


def test_a_storage_class_typo_names_prefix_policy_among_the_known(tmp_path: Path,
                                                                  capsys) -> None:
    sc = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
          "metadata": {"name": "fc-typo"}, "provisioner": "csi.fusecache.io",
          "parameters": {"bucket": "b", "prefixPolcy": "fixed"}}
    pod = job(["--data", "/d"])
    spec = pod["spec"]["template"]["spec"]
    spec["containers"][0]["volumeMounts"] = [{"name": "d", "mountPath": "/d"}]
    spec["volumes"] = [{"name": "d", "ephemeral": {"volumeClaimTemplate": {"spec": {
        "storageClassName": "fc-typo", "accessModes": ["ReadOnlyMany"],
        "resources": {"requests": {"storage": "1Gi"}}}}}}]
    f = tmp_path / "job.yaml"
    f.write_text(yaml.safe_dump_all([sc, pod]))
    assert cli.main(["plan", str(f)]) == 2
    err = capsys.readouterr().err
    assert "unknown volume attribute(s) prefixPolcy" in err and "prefixPolicy" in \
        err.split("known:", 1)[1]


def test_a_suspended_cron_job_says_it_is_suspended() -> None:
    cron = {"apiVersion": "batch/v1", "kind": "CronJob",
            "metadata": {"name": "weekly-audit", "namespace": "ml"},
            "spec": {"schedule": "0 6 * * 1", "suspend": True, "jobTemplate": {"spec": {
                "template": {"spec": {"restartPolicy": "OnFailure", "containers": [
                    {"name": "a", "image": "x:1", "args": ["s3://recs-lake/audit/"]}]}}}}}}
    work = workloads.read(cron, Library())
    assert any("suspended: nothing is warmed until it is resumed" in n for n in work.notes)
