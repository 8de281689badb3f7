"""Placement consumes the model with no kind-specific code: targets -> placement.choose."""

from __future__ import annotations

import os

import yaml
from workload_helpers import doc, library

from prefetchd import workloads
from prefetchd.k8s import placement
from prefetchd.workloads import plan_cli

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATASET = "s3://datasets/imagenet/train/"


def node(name: str, gpus: int = 8, **labels: str) -> placement.NodeInfo:
    return placement.NodeInfo.from_node({
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels},
                     "annotations": {placement.CACHE_FREE_ANNOTATION: str(500 << 30)}},
        "status": {"allocatable": {"cpu": "64", "memory": "512Gi",
                                   "nvidia.com/gpu": str(gpus)}}})


def pytorchjob_4_workers() -> dict:
    """The upstream PyTorchJob with 3 workers (1 master + 3), GPUs, reading DATASET."""
    job = doc("kubeflow-trainer/pytorchjob-simple.yaml")
    for rspec in job["spec"]["pytorchReplicaSpecs"].values():
        c = rspec["template"]["spec"]["containers"][0]
        c["command"].append(f"--data={DATASET}")
        c["resources"] = {"limits": {"nvidia.com/gpu": 8}}
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 3
    return job


def test_every_worker_node_gets_the_dataset() -> None:
    work = workloads.read(pytorchjob_4_workers())
    (t,) = work.targets()  # master and workers have one PodSpec shape: one target
    assert (t.dataset, t.nodes, t.groups) == (DATASET, 4, ("Master", "Worker"))
    nodes = [node(f"gpu-{i}") for i in range(6)] + [node("cpu-0", gpus=0)]
    chosen = placement.choose(t.dataset, nodes, t.requirements, max(1, t.nodes))
    assert len(set(chosen)) == 4 and "cpu-0" not in chosen
    # every agent computes the same answer alone, whatever order it lists nodes in
    assert placement.choose(t.dataset, nodes[::-1], t.requirements, t.nodes) == chosen


def test_a_preferred_node_affinity_is_no_constraint_of_its_own() -> None:
    """Workers that only prefer an instance type share the master's nodes: one target on
    four nodes, not one on 1 and another on 3 (which could land the data on 3 nodes)."""
    job = pytorchjob_4_workers()
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    worker["affinity"] = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 50, "preference": {"matchExpressions": [
            {"key": "node.kubernetes.io/instance-type", "operator": "In",
             "values": ["g5.12xlarge"]}]}}]}}
    work = workloads.read(job)
    (t,) = work.targets()
    assert (t.nodes, t.groups) == (4, ("Master", "Worker"))
    text = plan_cli.render([work], [], {}, plan_cli.FileClusterView([]))
    assert "node affinity" not in text
    # a required term is a constraint: the workers get their own target
    worker["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "pool", "operator": "In", "values": ["gpu"]}]}]}
    work = workloads.read(job)
    assert sorted((t.groups, t.nodes) for t in work.targets()) == [
        (("Master",), 1), (("Worker",), 3)]
    assert "Worker x3  stage 0: node affinity" in plan_cli.render(
        [work], [], {}, plan_cli.FileClusterView([]))


def test_groups_with_different_constraints_are_placed_apart() -> None:
    job = pytorchjob_4_workers()
    master = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    master["containers"][0]["resources"] = {}
    master["nodeSelector"] = {"pool": "cpu"}
    work = workloads.read(job)
    by_group = {t.groups: t for t in work.targets()}
    assert by_group[("Master",)].nodes == 1 and by_group[("Worker",)].nodes == 3
    nodes = [node(f"gpu-{i}") for i in range(4)] + [node("cpu-0", gpus=0, pool="cpu")]
    assert placement.choose(DATASET, nodes, by_group[("Master",)].requirements, 1) == ["cpu-0"]
    assert "cpu-0" not in placement.choose(DATASET, nodes, by_group[("Worker",)].requirements, 3)


def test_queued_trainjob_nodes_follow_its_runtime_patches() -> None:
    lib = library("kubeflow-trainer/torch_distributed.yaml")
    job = doc("kubeflow-trainer/trainjob-02-runtime-patches.yaml")
    job["spec"]["suspend"] = True
    job["spec"]["trainer"]["args"] = [f"--data={DATASET}"]
    work = workloads.read(job, lib)
    assert work.state is workloads.State.QUEUED
    (t,) = work.targets()
    nodes = [node(f"n{i}", **{"node-type": "training"}) for i in range(3)] + [node("other")]
    chosen = placement.choose(t.dataset, nodes, t.requirements, t.nodes)
    assert len(chosen) == 2 and "other" not in chosen


def test_pvc_resolved_through_a_cluster_view() -> None:
    """A TFJob's claim resolved as the agent would: PVC -> bound PV -> fusecache attributes
    (manifests/examples/static-pv-pvc.yaml, the objects a user applies)."""
    with open(os.path.join(ROOT, "manifests", "examples", "static-pv-pvc.yaml")) as f:
        view = plan_cli.FileClusterView([d for d in yaml.safe_load_all(f) if d])
    job = doc("kubeflow-trainer/tfjob-multi-worker-pvc.yaml")
    job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["volumes"][0][
        "persistentVolumeClaim"]["claimName"] = "imagenet-train"
    work = workloads.read(job)
    (t,) = work.targets(workloads.resolver_from_view(view, work.namespace))
    assert (t.dataset, t.nodes) == ("s3://my-training-data/imagenet/train/", 2)
    assert work.targets() == []  # without resolution a claim is not a dataset
    assert work.targets(workloads.resolver_from_view(view, "elsewhere")) == []


def test_pods_map_to_their_work_and_group() -> None:
    """From the labels the controllers set on pods, to the work and group the model has."""
    def pod(**labels: str) -> dict:
        return {"metadata": {"name": "p", "namespace": "kubeflow", "labels": labels}}

    work = workloads.read(pytorchjob_4_workers())
    (key, group), = workloads.pod_work(pod(**{
        "training.kubeflow.org/job-name": "pytorch-simple",
        "training.kubeflow.org/replica-type": "worker",
        "training.kubeflow.org/replica-index": "2",
        "training.kubeflow.org/operator-name": "pytorchjob-controller"}))
    assert key == work.key
    assert [g.name for g in work.groups if g.name.lower() == group] == ["Worker"]
    assert workloads.pod_work(pod(**{
        "jobset.sigs.k8s.io/jobset-name": "kueue-example",
        "jobset.sigs.k8s.io/replicatedjob-name": "node",
        "batch.kubernetes.io/job-name": "kueue-example-node-0",
        "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"})) == [
        ("trainjob kubeflow/kueue-example", "node"), ("jobset kubeflow/kueue-example", "node")]
    assert workloads.pod_work(pod(**{
        "batch.kubernetes.io/job-name": "random-7x2kq", "job-name": "random-7x2kq",
        "katib.kubeflow.org/trial": "random-7x2kq"})) == [
        ("trial kubeflow/random-7x2kq", "main"), ("job kubeflow/random-7x2kq", "main")]
    # With Katib's experiment label the Experiment comes last: known before its new Trial.
    assert workloads.pod_work(pod(**{
        "batch.kubernetes.io/job-name": "random-7x2kq", "job-name": "random-7x2kq",
        "katib.kubeflow.org/trial": "random-7x2kq",
        "katib.kubeflow.org/experiment": "random"})) == [
        ("trial kubeflow/random-7x2kq", "main"), ("job kubeflow/random-7x2kq", "main"),
        ("experiment kubeflow/random", "main")]
    assert workloads.pod_work(pod(app="web")) == []
