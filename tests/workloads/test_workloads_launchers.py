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


def test_the_launchers_paths_narrow_the_workers_volume() -> None:
    """``horovodrun ... --train-dir /data/imagenet/train``: the workers mount the dataset's
    volume (the launcher does not), so those paths name parts of the workers' volume."""
    worker_pod = {"containers": [{"name": "w", "image": "x", "command": ["/usr/sbin/sshd"],
                                  "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                  "volumes": [{"name": "data", "csi": {
                      "driver": "csi.fusecache.io",
                      "volumeAttributes": {"bucket": "vision", "prefix": "imagenet-1k"}}}]}
    launcher = {"containers": [{"name": "l", "image": "x", "command": [
        "horovodrun", "-np", "4", "python", "train.py", "--train-dir", "/data/train",
        "--val-dir", "/data/val"]}]}
    job = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
           "metadata": {"name": "hvd", "namespace": "ml"},
           "spec": {"mpiReplicaSpecs": {
               "Launcher": {"replicas": 1, "template": {"spec": launcher}},
               "Worker": {"replicas": 4, "template": {"spec": worker_pod}}}}}
    targets = {t.dataset: t.nodes for t in workloads.read(job).targets()}
    assert targets == {"s3://vision/imagenet-1k/train": 4, "s3://vision/imagenet-1k/val": 4}


def test_a_kubectl_list_and_a_sub_path_expr(tmp_path) -> None:
    """``kubectl get -o yaml`` prints a ``kind: List``; ``subPathExpr`` is expanded from the
    container's env as the kubelet does."""
    import subprocess
    import sys

    import yaml

    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "g"},
           "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{
               "name": "main", "image": "x", "env": [
                   {"name": "REGION", "value": "eu-west"},
                   # (without it the kubelet does not start the container: round 59)
                   {"name": "POD_NAME", "valueFrom": {"fieldRef": {
                       "fieldPath": "metadata.name"}}}],
               "volumeMounts": [{"name": "tiles", "mountPath": "/tiles",
                                 "subPathExpr": "$(REGION)/$(POD_NAME)"}]}],
               "volumes": [{"name": "tiles", "csi": {
                   "driver": "csi.fusecache.io",
                   "volumeAttributes": {"bucket": "geo", "prefix": "s2/2025"}}}]}}}}
    path = tmp_path / "list.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [job],
                                    "metadata": {"resourceVersion": ""}}))
    r = subprocess.run([sys.executable, "-m", "prefetchd.cli", "plan", "--json", str(path)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    import json
    [work] = json.loads(r.stdout)["work"]
    assert [t["dataset"] for t in work["warm"]] == ["s3://geo/s2/2025/eu-west/"]


def test_multikueue_work_is_warmed_on_its_worker_cluster_not_here() -> None:
    """``spec.managedBy: kueue.x-k8s.io/multikueue``: the job's pods run on a worker
    cluster; this cluster's nodes are not given its data (said in a note)."""
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "a"},
           "spec": {"managedBy": "kueue.x-k8s.io/multikueue", "suspend": True,
                    "template": {"spec": {"restartPolicy": "Never", "containers": [{
                        "name": "main", "image": "x", "args": ["--data", DATA]}]}}}}
    work = workloads.read(job)
    assert work.targets() == [] and any("multikueue" in n for n in work.notes)
    del job["spec"]["managedBy"]
    assert [t.dataset for t in workloads.read(job).targets()] == [DATA]


def test_a_trainjobs_flat_pod_spec_overrides_mount_a_dataset() -> None:
    """The earlier TrainJob API's ``podSpecOverrides`` (PodSpec fields beside ``targetJobs``)
    patch the runtime's pods as ``podTemplateOverrides`` do."""
    lib = library("kubeflow-trainer/torch_distributed.yaml")
    job = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
           "metadata": {"name": "t", "namespace": "ml"},
           "spec": {"runtimeRef": {"name": "torch-distributed"},
                    "trainer": {"numNodes": 2, "args": ["--data", "/data/train"]},
                    "podSpecOverrides": [{
                        "targetJobs": [{"name": "node"}],
                        "volumes": [{"name": "d", "csi": {
                            "driver": "csi.fusecache.io",
                            "volumeAttributes": {"bucket": "audio", "prefix": "tokens"}}}],
                        "containers": [{"name": "node", "volumeMounts": [
                            {"name": "d", "mountPath": "/data"}]}]}]}}
    [target] = workloads.read(job, lib).targets()
    assert (target.dataset, target.nodes) == ("s3://audio/tokens/train", 2)


def test_a_job_ready_after_a_later_stage_waits_for_its_predecessors() -> None:
    """featurize -> trainer (Complete), monitor beside trainer (Ready): monitor is in
    trainer's stage, after featurize, and their nodes add up there."""
    def rj(name: str, replicas: int, deps: list[tuple[str, str]]) -> dict:
        return {"name": name, "replicas": replicas,
                "dependsOn": [{"name": n, "status": st} for n, st in deps],
                "template": {"spec": {"template": {"spec": {"containers": [
                    {"name": "c", "image": "x", "args": ["--data", DATA]}]}}}}}

    js = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
          "metadata": {"name": "d", "namespace": "ml"},
          "spec": {"replicatedJobs": [rj("featurize", 1, []),
                                      rj("trainer", 4, [("featurize", "Complete")]),
                                      rj("monitor", 1, [("trainer", "Ready")])]}}
    work = workloads.read(js)
    assert work.stages == {"featurize": 0, "trainer": 1, "monitor": 1}
    assert work.nodes == 5


def test_an_admitted_workload_lends_its_job_the_admitted_count_and_flavor() -> None:
    """Kueue admitted 6 of the Job's 10 pods on a spot flavor: the Job's pods are 6, with
    the flavor's node labels (partial admission)."""
    import copy as _copy

    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "sim", "namespace": "rl", "uid": "u1",
                        "labels": {"kueue.x-k8s.io/queue-name": "spot"}},
           "spec": {"parallelism": 10, "completions": 10, "suspend": False,
                    "template": {"spec": {"restartPolicy": "Never", "containers": [{
                        "name": "main", "image": "x", "args": ["--data", DATA]}]}}}}
    wl = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
          "metadata": {"name": "job-sim-1", "namespace": "rl", "ownerReferences": [{
              "apiVersion": "batch/v1", "kind": "Job", "name": "sim", "uid": "u1",
              "controller": True}]},
          "spec": {"queueName": "spot", "podSets": [{
              "name": "main", "count": 10, "minCount": 4,
              "template": _copy.deepcopy(job["spec"]["template"])}]},
          "status": {"admission": {"clusterQueue": "cq", "podSetAssignments": [{
              "name": "main", "count": 6, "flavors": {"cpu": "l4-spot"}}]},
              "conditions": [{"type": "QuotaReserved", "status": "True"},
                             {"type": "Admitted", "status": "True"}]}}
    flavor = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
              "metadata": {"name": "l4-spot"},
              "spec": {"nodeLabels": {"cloud.google.com/gke-spot": "true"}}}
    lib = workloads.Library()
    lib.add(flavor)
    merged = workloads.with_queue_record(workloads.read(job, lib), workloads.read(wl, lib))
    [target] = merged.targets()
    assert target.nodes == 6
    assert target.requirements.node_selector == {"cloud.google.com/gke-spot": "true"}


def test_what_an_mpi_launchers_init_container_reads_stays_on_the_launcher() -> None:
    """The launcher pod's init container (``aws s3 cp`` of a config) runs in that pod only:
    its read is warmed for the launcher, while the ``mpirun`` line's data goes to the
    workers."""
    job = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
           "metadata": {"name": "wd", "namespace": "ml"},
           "spec": {"mpiReplicaSpecs": {
               "Launcher": {"replicas": 1, "template": {"spec": {
                   "initContainers": [{"name": "cfg", "image": "x", "command": [
                       "aws", "s3", "cp", "s3://cfg/wd/run.yaml", "/etc/run.yaml"]}],
                   "containers": [{"name": "l", "image": "x", "command": [
                       "mpirun", "-np", "8", "python", "train.py", "--data", DATA]}]}}},
               "Worker": {"replicas": 4, "template": {"spec": {
                   "containers": [{"name": "w", "image": "x"}]}}}}}}
    work = workloads.read(job)
    by_group = {g: sorted(t.dataset for t in work.targets() if g in t.groups)
                for g in ("Launcher", "Worker")}
    assert by_group == {"Launcher": ["s3://cfg/wd/run.yaml"], "Worker": [DATA]}
