"""Launchers and the nodes they start: who reads what a launcher's command line names, and
how many nodes run at once (an MPI launcher started once its workers are Ready runs beside
them)."""

from __future__ import annotations

import copy

from workload_helpers import doc, library

from prefetchd import workloads

DATA = "s3://corpus/tulu3/mixture-v2/"


def test_a_trainjob_on_the_deepspeed_runtime_runs_its_ranks_on_numnodes_nodes() -> None:
    """The upstream deepspeed runtime (MPI, runLauncherAsNode): the launcher is one of
    numNodes ranks, the ``node`` job the others; both read what the trainer's command names."""
    lib = library("kubeflow-trainer/deepspeed_distributed.yaml")
    job = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
           "metadata": {"name": "sft", "namespace": "ml"},
           "spec": {"runtimeRef": {"name": "deepspeed-distributed"},
                    "trainer": {"numNodes": 3, "command": [
                        "mpirun", "--hostfile", "/etc/mpi/hostfile", "python", "sft.py",
                        "--data", DATA]}}}
    work = workloads.read(job, lib)
    assert sorted((g.name, g.pods) for g in work.groups) == [("launcher", 1), ("node", 2)]
    assert work.nodes == 3
    [target] = work.targets()
    assert target.dataset == DATA and target.nodes == 3


def test_a_jobset_job_started_when_another_is_ready_runs_beside_it() -> None:
    spec = {"containers": [{"name": "w", "image": "x", "args": ["--data", DATA]}]}

    def rj(name: str, replicas: int, status: str | None = None) -> dict:
        out = {"name": name, "replicas": replicas,
               "template": {"spec": {"template": {"spec": copy.deepcopy(spec)}}}}
        if status:
            out["dependsOn"] = [{"name": "workers", "status": status}]
        return out

    js = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
          "metadata": {"name": "mpi", "namespace": "ml"},
          "spec": {"replicatedJobs": [rj("workers", 4), rj("launcher", 1, "Ready")]}}
    [target] = workloads.read(js).targets()
    assert target.nodes == 5  # side by side
    js["spec"]["replicatedJobs"][1]["dependsOn"][0]["status"] = "Complete"
    [target] = workloads.read(js).targets()
    assert target.nodes == 4  # one after the other: the widest stage's


def test_an_mpijob_without_workers_keeps_its_launchers_datasets() -> None:
    job = doc("kubeflow-trainer/pytorchjob-simple.yaml")
    job["kind"] = "MPIJob"
    job["spec"] = {"mpiReplicaSpecs": {"Launcher": {"replicas": 1, "template": {"spec": {
        "containers": [{"name": "l", "image": "x", "command": ["mpirun", "train", DATA]}]}}}}}
    [target] = workloads.read(job).targets()
    assert target.dataset == DATA and target.groups == ("Launcher",)
