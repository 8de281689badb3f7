"""The standalone mpi-operator's MPIJob (kubeflow.org/v2beta1): the MPIJob Kueue queues.

The job is the mpi-operator's own "pi" example with a dataset argument; its pods carry the
labels the mpi-operator sets (operator-name "mpi-operator", job-role launcher/worker, no
replica-type), and the launcher's pod also the Job controller's (the launcher is a Job).
"""

from __future__ import annotations

import copy
from typing import Any

from prefetchd import workloads
from prefetchd.k8s import job_steering, placement

DATASET = "s3://datasets/mnist/"
_TEMPLATE = {"spec": {"containers": [{
    "image": "mpioperator/mpi-pi:openmpi", "name": "mpi-worker",
    "command": ["/usr/sbin/sshd", "-De"],
    "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}}
# the launcher starts the program on the workers: its command line names what they read
_LAUNCHER = copy.deepcopy(_TEMPLATE)
_LAUNCHER["spec"]["containers"][0].update(
    name="mpi-launcher", command=["mpirun", "-n", "2", "/home/mpiuser/pi", f"--data={DATASET}"])


def mpijob_v2(suspend: bool = True, conditions: list[dict] | None = None) -> dict:
    return {
        "apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
        "metadata": {"name": "pi", "namespace": "ml", "uid": "7f1c",
                     "labels": {"kueue.x-k8s.io/queue-name": "user-queue"},
                     "creationTimestamp": "2026-12-03T10:00:00Z"},
        "spec": {"slotsPerWorker": 1, "runPolicy": {"cleanPodPolicy": "Running",
                                                    "suspend": suspend},
                 "mpiImplementation": "OpenMPI",
                 "mpiReplicaSpecs": {
                     "Launcher": {"replicas": 1, "template": copy.deepcopy(_LAUNCHER)},
                     "Worker": {"replicas": 2, "template": copy.deepcopy(_TEMPLATE)}}},
        "status": {"conditions": conditions or []},
    }


def _pod(name: str, **labels: str) -> dict:
    return {"metadata": {"name": name, "namespace": "ml", "labels": labels},
            "spec": copy.deepcopy(_TEMPLATE["spec"])}


def worker_pod(index: int) -> dict:
    return _pod(f"pi-worker-{index}", **{
        "training.kubeflow.org/operator-name": "mpi-operator",
        "training.kubeflow.org/job-name": "pi",
        "training.kubeflow.org/job-role": "worker",
        "training.kubeflow.org/replica-index": str(index)})


def launcher_pod() -> dict:
    return _pod("pi-launcher-x7k2p", **{
        "training.kubeflow.org/operator-name": "mpi-operator",
        "training.kubeflow.org/job-name": "pi",
        "training.kubeflow.org/job-role": "launcher",
        "batch.kubernetes.io/job-name": "pi-launcher", "job-name": "pi-launcher",
        "batch.kubernetes.io/controller-uid": "c0ffee", "controller-uid": "c0ffee"})


def test_v2beta1_mpijob_reads_like_v1_with_its_launcher_and_workers() -> None:
    work = workloads.read(mpijob_v2())
    assert work.key == "mpijob ml/pi"
    assert [(g.name, g.pods) for g in work.groups] == [("Launcher", 1), ("Worker", 2)]
    assert work.state is workloads.State.QUEUED
    # read on the workers' nodes, not on the launcher's (it only starts them) ...
    [target] = work.targets()
    assert target.dataset == DATASET and target.nodes == 2 and target.groups == ("Worker",)
    # ... unless the launcher runs a rank too
    job = mpijob_v2()
    job["spec"]["runLauncherAsWorker"] = True
    [target] = workloads.read(job).targets()
    assert target.dataset == DATASET and target.nodes == 3
    running = workloads.read(mpijob_v2(False, [{"type": "Running", "status": "True"}]))
    assert running.state is workloads.State.RUNNING
    kind = next(k for k in workloads.KINDS if k.kind == "MPIJob")
    assert kind.versions == ("v1", "v2beta1") and kind.plural == "mpijobs"


def test_an_unread_version_is_still_named_in_the_error() -> None:
    job = mpijob_v2()
    job["apiVersion"] = "kubeflow.org/v3"
    try:
        workloads.read(job)
    except workloads.WorkloadError as e:
        assert "MPIJob ml/pi" in str(e) and "kubeflow.org/v2beta1" in str(e)
    else:
        raise AssertionError("an MPIJob of an unknown version was read")


def test_mpi_operator_pods_map_to_the_job_and_their_role() -> None:
    assert workloads.pod_work(worker_pod(1)) == [("mpijob ml/pi", "worker")]
    assert workloads.pod_work(launcher_pod()) == [("mpijob ml/pi", "launcher")]
    assert workloads.sibling_selector(worker_pod(0)) == (
        "training.kubeflow.org/job-name=pi,training.kubeflow.org/operator-name=mpi-operator")
    assert workloads.object_paths("mpijob ml/pi") == [
        "/apis/kubeflow.org/v1/namespaces/ml/mpijobs/pi",
        "/apis/kubeflow.org/v2beta1/namespaces/ml/mpijobs/pi"]


class _V2Cluster:
    """What the webhook's steering reads, from a cluster serving only MPIJob v2beta1."""

    def __init__(self, job: dict, pods: list[dict]) -> None:
        self.job, self._pods = job, pods
        self.gets: list[str] = []

    def get_json(self, path: str) -> dict | None:
        self.gets.append(path)
        return self.job if path == "/apis/kubeflow.org/v2beta1/namespaces/ml/mpijobs/pi" \
            else None

    def pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        assert namespace == "ml" and "job-name=pi" in selector
        return self._pods


def _node(name: str) -> placement.NodeInfo:
    return placement.NodeInfo.from_node({
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name},
                     "annotations": {placement.CACHE_FREE_ANNOTATION: str(500 << 30)}},
        "status": {"allocatable": {"cpu": "64", "memory": "512Gi"}}})


def test_each_pod_of_a_v2beta1_mpijob_is_steered_to_a_distinct_warm_node() -> None:
    """The job's object is found under the version the cluster serves; the second worker
    avoids the node the first is bound to, within the 3 nodes the job was warmed on."""
    nodes = [_node(f"node-{i}") for i in range(6)]
    req = placement.PodRequirements.from_pod_spec(_TEMPLATE["spec"])
    warmed = placement.choose(DATASET, nodes, req, 3)
    first = worker_pod(0)
    first["spec"]["nodeName"] = warmed[0]
    view = _V2Cluster(mpijob_v2(False), [first])
    chosen = job_steering.job_node(worker_pod(1), DATASET, nodes, req, 1, view)
    assert chosen is not None and len(chosen) == 1
    assert chosen[0] in warmed and chosen[0] != warmed[0]
    assert view.gets[-1].startswith("/apis/kubeflow.org/v2beta1/")


def test_the_agent_watches_the_mpijob_version_the_crd_serves() -> None:
    """The mpi-operator's CRD (mpijobs.kubeflow.org, the name the training-operator's v1 CRD
    has too) serves v2beta1 only: the agent's watch takes that version."""
    from prefetchd.k8s import workload_watch

    [mpi] = [w for w in workload_watch.watchables() if w.kind == "MPIJob"]
    crd = {"metadata": {"name": "mpijobs.kubeflow.org"},
           "spec": {"group": "kubeflow.org", "names": {"kind": "MPIJob", "plural": "mpijobs"},
                    "versions": [{"name": "v2beta1", "served": True, "storage": True}]},
           "status": {"conditions": [{"type": "Established", "status": "True"}]}}
    assert workload_watch.established_version(crd, mpi.versions) == "v2beta1"
    crd["spec"]["versions"] = [{"name": "v1", "served": True, "storage": True}]
    assert workload_watch.established_version(crd, mpi.versions) == "v1"
