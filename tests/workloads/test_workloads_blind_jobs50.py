"""Blind job round 50 (mistakes users make in training-work manifests): work the API server or
its operator refuses, or that never runs, was planned with exit 0 and nothing said. Each is now
refused naming the field (exit 2 from ``plan``), or, where the API server takes it, its effect
is said: a ``64GB`` memory limit, an MPIJob's ``Master`` replicas, an unquoted
``rayStartParams`` number, a Kueue queue name with a ``/``, two containers of one name, a
JobSet replicated job with no name, ``nodeSelecter``, a ConfigMap over 1 MiB (refused); a claim
that never binds its PV, a ``$(VAR)`` no env var sets (said)."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from prefetchd import workloads
from prefetchd.workloads.plan_cli import FileClusterView

CONTAINER = {"name": "train", "image": "ghcr.io/acme/train:1.0",
             "args": ["--data", "s3://bucket-a/data/train/"]}


def _job(**spec_more: Any) -> dict[str, Any]:
    pod = {"restartPolicy": "Never", "containers": [copy.deepcopy(CONTAINER)], **spec_more}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "q", "namespace": "ml"},
            "spec": {"template": {"spec": pod}}}


def _refused(obj: dict[str, Any], *words: str) -> None:
    with pytest.raises(workloads.WorkloadError) as e:
        workloads.read(obj)
    for w in words:
        assert w in str(e.value), str(e.value)


def test_what_the_api_server_refuses_in_a_pod_template_is_named() -> None:
    job = _job()
    job["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"memory": "64GB"}}
    _refused(job, "containers[train].resources.limits.memory: '64GB' is no quantity")
    job = _job()
    job["spec"]["template"]["spec"]["containers"].append(copy.deepcopy(CONTAINER))
    _refused(job, "a second container named 'train'")
    _refused(_job(nodeSelecter={"gpu": "a100"}),
             "spec.template.spec.nodeSelecter: unknown field (did you mean nodeSelector?")
    job = _job()
    job["spec"]["template"]["spec"]["containers"][0]["volumeMount"] = []
    _refused(job, "volumeMount: unknown field (did you mean volumeMounts?")
    job = _job()
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "team/gpu-queue"}
    _refused(job, "label value 'team/gpu-queue' is not valid")


def test_what_passes_the_checks() -> None:
    """A field of an API newer than the list (not a near miss), placeholders a controller
    fills in, good quantities and labels: all planned."""
    job = _job(someFutureField={"x": 1}, nodeSelector={"gpu": "a100"})
    c = job["spec"]["template"]["spec"]["containers"][0]
    c["resources"] = {"requests": {"memory": "64Gi", "cpu": "500m", "nvidia.com/gpu": 1},
                      "limits": {"nvidia.com/gpu": "${trialParameters.gpus}"}}
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "gpu-queue", "team": "vision",
                                 "run": "{{workflow.name}}"}
    work = workloads.read(job)
    assert [r.uri for g in work.groups for r in g.datasets] == ["s3://bucket-a/data/train/"]


def test_an_operators_replica_types_and_a_crds_shapes() -> None:
    pod = {"spec": {"containers": [copy.deepcopy(CONTAINER)]}}
    mpi = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
           "metadata": {"name": "m", "namespace": "ml"},
           "spec": {"mpiReplicaSpecs": {"Master": {"replicas": 1, "template": pod},
                                        "Worker": {"replicas": 2, "template": pod}}}}
    _refused(mpi, "spec.mpiReplicaSpecs.Master: not a replica type", "Launcher, Worker")
    ray = {"apiVersion": "ray.io/v1", "kind": "RayJob",
           "metadata": {"name": "r", "namespace": "ml"},
           "spec": {"entrypoint": "python train.py", "rayClusterSpec": {
               "headGroupSpec": {"rayStartParams": {"num-cpus": 0}, "template": pod}}}}
    _refused(ray, "headGroupSpec.rayStartParams.num-cpus: 0 is not a string")
    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
              "metadata": {"name": "j", "namespace": "ml"},
              "spec": {"replicatedJobs": [{"replicas": 1, "template": {"spec": {
                  "template": {"spec": {"restartPolicy": "Never", **pod["spec"]}}}}}]}}
    _refused(jobset, "spec.replicatedJobs[0].name: missing")


def test_a_claim_that_never_binds_its_pv_and_an_unset_var_are_said() -> None:
    job = _job(volumes=[{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}])
    c = job["spec"]["template"]["spec"]["containers"][0]
    c["args"] = ["--data=/data/train/", "--eval=$(DATA_ROOT)/eval/"]
    c["env"] = [{"name": "DATASET_ROOT", "value": "/scratch"}]
    c["volumeMounts"] = [{"name": "d", "mountPath": "/data"}]
    pv = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv-a"},
          "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadOnlyMany"],
                   "storageClassName": "", "claimRef": {"namespace": "ml", "name": "data"},
                   "csi": {"driver": "csi.fusecache.io", "volumeHandle": "pv-a",
                           "volumeAttributes": {"bucket": "bucket-a"}}}}
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
           "metadata": {"name": "data", "namespace": "ml"},
           "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "",
                    "volumeName": "pv-a", "resources": {"requests": {"storage": "10Gi"}}}}
    work = workloads.read(job)
    assert any("$(DATA_ROOT) is set by no env var" in n for g in work.groups for n in g.notes)
    view = FileClusterView([pv, pvc])
    resolve = workloads.resolver_from_view(view, "ml")
    assert work.targets(resolve) == []  # it never binds: no pod using it starts
    pvc["spec"]["accessModes"] = ["ReadOnlyMany"]  # as the PV offers: it binds
    assert [t.dataset for t in work.targets(workloads.resolver_from_view(
        FileClusterView([pv, pvc]), "ml"))] == ["s3://bucket-a/train"]


def test_plan_refuses_a_configmap_over_a_mebibyte(tmp_path: Path) -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "files", "namespace": "ml"},
          "data": {"list.txt": "s3://bucket-a/x\n" * 70_000}}
    f = tmp_path / "job.yaml"
    f.write_text(yaml.safe_dump_all([cm, _job()]))
    r = subprocess.run([sys.executable, "-m", "prefetchd.cli", "plan", str(f)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "more than the 1048576 (1 MiB)" in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr


def test_what_each_index_writes_is_not_warmed_for_a_later_job() -> None:
    """Blind job round 52: an Indexed Job's per-index output (``shard=$(JOB_COMPLETION_INDEX)``)
    was no write, so a later replicated job's read of ``shard=0/`` was warmed before it
    existed."""
    def rj(name: str, args: list[str], **job: Any) -> dict[str, Any]:
        return {"name": name, "replicas": 1, "template": {"spec": {**job, "template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": name, "image": "busybox",
                                                       "args": args}]}}}}}
    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
              "metadata": {"name": "prep-then-train", "namespace": "recsys"},
              "spec": {"replicatedJobs": [
                  rj("prep", ["--input=s3://raw/day/shard=$(JOB_COMPLETION_INDEX)/",
                              "--output=s3://feat/v5/shard=$(JOB_COMPLETION_INDEX)/"],
                     completionMode="Indexed", completions=2, parallelism=2),
                  {**rj("train", ["--train-data=s3://feat/v5/shard=0/",
                                  "--vocab=s3://feat/vocab.txt"]),
                   "dependsOn": [{"name": "prep", "status": "Complete"}]}]}}
    work = workloads.read(jobset)
    assert [t.dataset for t in work.targets()] == ["s3://raw/day/shard=0/", "s3://raw/day/shard=1/",
                                                    "s3://feat/vocab.txt"]
    [prep] = [g for g in work.groups if g.name == "prep"]
    assert set(prep.writes) == {"s3://feat/v5/shard=0/", "s3://feat/v5/shard=1/"}
