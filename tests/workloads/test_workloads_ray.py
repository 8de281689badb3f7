"""KubeRay's RayJob as prefetchd reads it: a head and worker groups counted as KubeRay starts
them, the entrypoint read where Ray runs its tasks, Kueue's queue and pod-set names, and the
pods KubeRay makes (labels) traced back to the RayJob. Objects follow the KubeRay v1 API
(ray-operator/apis/ray/v1) as its samples write them."""

from __future__ import annotations

import copy
import subprocess
import sys
from typing import Any

import pytest
import yaml

from prefetchd import workloads
from prefetchd.workloads import State, WorkloadError

DRIVER = "csi.fusecache.io"


def rayjob(**spec: Any) -> dict[str, Any]:
    """A RayJob of a CPU-less head and one GPU worker group (4 replicas of 1..8), its workers
    mounting a fusecache volume at /data, submitted to the Kueue queue ``ray-batch`` (Kueue's
    webhook has suspended it)."""
    out = {
        "apiVersion": "ray.io/v1", "kind": "RayJob",
        "metadata": {"name": "embed", "namespace": "ray",
                     "labels": {"kueue.x-k8s.io/queue-name": "ray-batch"}},
        "spec": {
            "suspend": True,
            "entrypoint": "python /home/ray/embed.py --input s3://corpus/news/2026/ "
                          "--output s3://vectors/news/2026/ --labels /data/labels/v3.csv",
            "shutdownAfterJobFinishes": True,
            "rayClusterSpec": {
                "rayVersion": "2.40.0",
                "headGroupSpec": {
                    "rayStartParams": {"num-cpus": "0", "dashboard-host": "0.0.0.0"},
                    "template": {"spec": {"containers": [{
                        "name": "ray-head", "image": "rayproject/ray:2.40.0",
                        "resources": {"limits": {"cpu": "4", "memory": "16Gi"}}}]}}},
                "workerGroupSpecs": [{
                    "groupName": "gpu", "replicas": 4, "minReplicas": 1, "maxReplicas": 8,
                    "rayStartParams": {},
                    "template": {"spec": {
                        "nodeSelector": {"node.kubernetes.io/instance-type": "g5.2xlarge"},
                        "containers": [{
                            "name": "ray-worker", "image": "rayproject/ray:2.40.0-gpu",
                            "resources": {"limits": {"nvidia.com/gpu": 1}},
                            "volumeMounts": [{"name": "meta", "mountPath": "/data"}]}],
                        "volumes": [{"name": "meta", "csi": {
                            "driver": DRIVER,
                            "volumeAttributes": {"bucket": "corpus-meta",
                                                 "prefix": "shared"}}}]}}}]}}}
    out["spec"].update(spec)
    return out


def targets(work: workloads.UpcomingWork) -> set[tuple[str, int, tuple[str, ...]]]:
    """(dataset, nodes, groups) of each warm target: one per dataset and set of constraints."""
    return {(t.dataset, t.nodes, t.groups) for t in work.targets()}


def test_the_entrypoint_is_read_on_the_workers_and_narrows_their_mount() -> None:
    work = workloads.read(rayjob())
    assert work.key == "rayjob ray/embed" and work.state is State.QUEUED
    assert work.queue == "ray-batch"
    assert [(g.name, g.pods) for g in work.groups] == [("head", 1), ("gpu", 4)]
    assert work.nodes == 5
    # the head starts with no CPUs: only the driver runs there, Ray's tasks on the workers
    assert targets(work) == {
        ("s3://corpus-meta/shared/labels/v3.csv", 4, ("gpu",)),  # not the whole mount
        ("s3://corpus/news/2026/", 4, ("gpu",)),
    }
    gpu = work.groups[1]
    assert gpu.requirements.node_selector == {"node.kubernetes.io/instance-type": "g5.2xlarge"}
    assert "s3://vectors/news/2026/" in gpu.writes  # the output: never warmed


def test_a_head_with_cpus_runs_tasks_too_and_runtime_env_vars_serve_the_entrypoint() -> None:
    job = rayjob(entrypoint="python train.py --train $(TRAIN_URI) --epochs 3",
                 runtimeEnvYAML="pip: [torch]\nenv_vars:\n  TRAIN_URI: s3://corpus/train/\n")
    job["spec"]["rayClusterSpec"]["headGroupSpec"]["rayStartParams"] = {}
    assert targets(workloads.read(job)) == {
        ("s3://corpus/train/", 1, ("head",)),  # the head's own target: other constraints
        ("s3://corpus/train/", 4, ("gpu",)),
        ("s3://corpus-meta/shared/", 4, ("gpu",)),  # named by nothing: the whole mount
    }


def test_a_head_that_runs_no_tasks_reads_nothing_of_a_mount_the_entrypoint_reads_under(
        ) -> None:
    """The head's template mounts the workers' volume too (one template copied): what the
    entrypoint names under it is the tasks' to read, on the workers; the head, which runs
    none, holds none of it (it held the whole mount, then the named paths, before)."""
    job = rayjob()
    head = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    wspec = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    head["volumes"] = copy.deepcopy(wspec["volumes"])
    head["containers"][0]["volumeMounts"] = [{"name": "meta", "mountPath": "/data"}]
    assert not [t for t in targets(workloads.read(job)) if "head" in t[2]]


def test_a_group_with_no_pod_holds_nothing() -> None:
    """A suspended worker group (or one of 0 replicas) wants no node now: no target, where
    its mount was a target "on 0 nodes" that warm --pipeline warmed whole."""
    job = rayjob()
    job["spec"]["rayClusterSpec"]["workerGroupSpecs"].append(copy.deepcopy(
        job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]) | {"groupName": "burst",
                                                                 "suspend": True})
    work = workloads.read(job)
    assert [(g.name, g.pods) for g in work.groups] == [("head", 1), ("gpu", 4), ("burst", 0)]
    assert all(t.nodes > 0 and "burst" not in t.groups for t in work.targets())


@pytest.mark.parametrize(("group", "pods"), [
    ({"replicas": 4, "minReplicas": 1, "maxReplicas": 8}, 4),
    ({"replicas": 12, "minReplicas": 1, "maxReplicas": 8}, 8),  # clamped to maxReplicas
    ({"replicas": 0, "minReplicas": 2}, 2),  # raised to minReplicas
    ({"minReplicas": 1}, 1),  # replicas defaults to 0 (the CRD's default)
    ({"replicas": 2, "numOfHosts": 4}, 8),  # multi-host replicas (TPU slices)
    ({"replicas": 4, "suspend": True}, 0),
])
def test_worker_groups_are_counted_as_kuberay_starts_them(group: dict[str, Any],
                                                          pods: int) -> None:
    job = rayjob()
    wg = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    for key in ("replicas", "minReplicas", "maxReplicas"):
        wg.pop(key)
    wg.update(group)
    assert workloads.read(job).groups[1].pods == pods


def test_with_no_worker_running_the_head_runs_the_tasks_whatever_its_cpus() -> None:
    job = rayjob()
    job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replicas"] = 0
    job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["minReplicas"] = 0
    assert ("s3://corpus/news/2026/", 1, ("head",)) in targets(workloads.read(job))


def test_states_follow_the_job_deployment_status() -> None:
    def state(status: dict[str, Any], suspend: bool = False) -> State:
        job = rayjob(suspend=suspend)
        job["status"] = status
        return workloads.read(job).state

    assert state({}) is State.ADMITTED
    assert state({"jobDeploymentStatus": "Initializing"}) is State.ADMITTED
    assert state({"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"}) is State.RUNNING
    assert state({"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"}) \
        is State.SUCCEEDED
    assert state({"jobDeploymentStatus": "Complete", "jobStatus": "STOPPED"}) is State.FAILED
    assert state({"jobDeploymentStatus": "Failed", "jobStatus": "FAILED"}) is State.FAILED
    assert state({"jobDeploymentStatus": "Suspended"}, suspend=True) is State.QUEUED


def test_its_kueue_workload_is_the_jobs_queue_record_with_kueues_pod_set_names() -> None:
    """Kueue names a RayJob's pod sets "head" and each worker group's name in lower case;
    once admitted, the admitted counts replace the job's."""
    job = rayjob()
    job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["groupName"] = "GPU"
    job["metadata"]["uid"] = "0b7c4f3e-0000-4000-8000-000000000001"
    wg = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    record = {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
        "metadata": {"name": "rayjob-embed-3c8a1", "namespace": "ray",
                     "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayJob",
                                          "name": "embed", "uid": job["metadata"]["uid"],
                                          "controller": True, "blockOwnerDeletion": True}]},
        "spec": {"queueName": "ray-batch", "podSets": [
            {"name": "head", "count": 1, "template": copy.deepcopy(
                job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"])},
            {"name": "gpu", "count": 4, "template": copy.deepcopy(wg["template"])}]},
        "status": {"conditions": [
            {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"},
            {"type": "Admitted", "status": "True", "reason": "Admitted"}],
            "admission": {"clusterQueue": "cq", "podSetAssignments": [
                {"name": "head", "count": 1}, {"name": "gpu", "count": 2}]}}}
    as_record = workloads.read(record)
    assert as_record.queue_record and as_record.owner == "rayjob ray/embed"
    merged = workloads.with_queue_record(workloads.read(job), as_record)
    assert merged.state is State.ADMITTED
    assert [(g.name, g.pods) for g in merged.groups] == [("head", 1), ("GPU", 2)]


def test_pods_kuberay_makes_are_traced_to_their_rayjob() -> None:
    """KubeRay names a RayJob's cluster "<rayjob>-<5 random characters>" and labels its pods
    with the cluster and the group ("headgroup" for the head)."""
    def pod(group: str, node_type: str) -> dict[str, Any]:
        return {"metadata": {"namespace": "ray", "labels": {
            "ray.io/cluster": "embed-x7k2q", "ray.io/group": group,
            "ray.io/node-type": node_type, "ray.io/is-ray-node": "yes",
            "ray.io/identifier": f"embed-x7k2q-{node_type}",
            "app.kubernetes.io/name": "kuberay",
            "app.kubernetes.io/created-by": "kuberay-operator"}}}

    assert workloads.pod_work(pod("headgroup", "head")) == [("rayjob ray/embed", "head")]
    assert workloads.pod_work(pod("gpu", "worker")) == [("rayjob ray/embed", "gpu")]
    assert workloads.sibling_selector(pod("gpu", "worker")) == "ray.io/cluster=embed-x7k2q"
    assert workloads.object_paths("rayjob ray/embed") == [
        "/apis/ray.io/v1/namespaces/ray/rayjobs/embed"]


def test_a_job_on_an_existing_cluster_warms_nothing_and_says_why() -> None:
    job = rayjob(clusterSelector={"ray.io/cluster": "shared-cluster"})
    del job["spec"]["rayClusterSpec"]
    work = workloads.read(job)
    assert work.groups == [] and work.targets() == []
    assert any("clusterSelector" in n for n in work.notes)


@pytest.mark.parametrize(("change", "names"), [
    (lambda s: s.pop("rayClusterSpec"), "spec.rayClusterSpec"),
    (lambda s: s["rayClusterSpec"]["workerGroupSpecs"][0].pop("groupName"),
     "spec.rayClusterSpec.workerGroupSpecs[0].groupName"),
    (lambda s: s["rayClusterSpec"]["workerGroupSpecs"][0].update(replicas="four"),
     "spec.rayClusterSpec.workerGroupSpecs[0].replicas"),
    (lambda s: s.update(runtimeEnvYAML="env_vars: [unclosed"), "spec.runtimeEnvYAML"),
    (lambda s: s.update(runtimeEnvYAML="env_vars: [a, b]"), "spec.runtimeEnvYAML.env_vars"),
])
def test_bad_input_names_the_field(change: Any, names: str) -> None:
    job = rayjob()
    change(job["spec"])
    with pytest.raises(WorkloadError) as e:
        workloads.read(job)
    assert "RayJob ray/embed" in str(e.value) and names in str(e.value)


def test_prefetchd_plan_reads_a_rayjob_file(tmp_path) -> None:
    """As a user runs it: the file with the RayJob; a bad one exits 2 naming the field."""
    f = tmp_path / "rayjob.yaml"
    f.write_text(yaml.safe_dump(rayjob()))
    res = subprocess.run([sys.executable, "-m", "prefetchd.cli", "plan", str(f)],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert "RayJob ray/embed" in res.stdout and "queued in queue ray-batch" in res.stdout
    assert "s3://corpus/news/2026/  on 4 nodes  for gpu" in res.stdout
    bad = rayjob()
    bad["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replicas"] = "four"
    f.write_text(yaml.safe_dump(bad))
    res = subprocess.run([sys.executable, "-m", "prefetchd.cli", "plan", str(f)],
                         capture_output=True, text=True)
    assert res.returncode == 2 and "workerGroupSpecs[0].replicas" in res.stderr
    assert "Traceback" not in res.stderr


class _RayCluster:
    """What the webhook reads: the RayJob (one GET), the cluster's pods, the nodes."""

    def __init__(self, job: dict[str, Any], pods: list[dict[str, Any]],
                 nodes: list[Any]) -> None:
        self.job, self._pods, self._nodes = job, pods, nodes
        self.gets: list[str] = []

    def get_json(self, path: str) -> dict[str, Any] | None:
        self.gets.append(path)
        return self.job if path == "/apis/ray.io/v1/namespaces/ray/rayjobs/embed" else None

    def pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        assert (namespace, selector) == ("ray", "ray.io/cluster=embed-x7k2q")
        return self._pods

    def nodes(self) -> list[Any]:
        return self._nodes

    def pvc(self, namespace: str, name: str) -> None:
        return None

    def pv(self, name: str) -> None:
        return None


def test_the_webhook_steers_a_ray_worker_that_names_nothing_to_a_warm_node_of_its_own() -> None:
    """A KubeRay worker pod's containers name no dataset (the RayJob's entrypoint does): the
    webhook finds what its group reads through its RayJob and steers each worker to a
    distinct node the agents warmed it on; the head, which runs no tasks, is left alone."""
    from prefetchd.k8s import placement, webhook

    job = rayjob()
    job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"].pop("volumes")
    job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"][
        "containers"][0].pop("volumeMounts")
    nodes = [placement.NodeInfo.from_node({
        "metadata": {"name": f"node-{i}", "labels": {
            "kubernetes.io/hostname": f"node-{i}",
            "node.kubernetes.io/instance-type": "g5.2xlarge"},
            "annotations": {placement.CACHE_FREE_ANNOTATION: str(500 << 30)}},
        "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8"}}})
        for i in range(8)]
    spec = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    warmed = placement.choose("s3://corpus/news/2026/", nodes,
                              placement.PodRequirements.from_pod_spec(spec), 4)

    def pod(group: str, node: str | None = None, suffix: str = "abcde") -> dict[str, Any]:
        body = copy.deepcopy(spec if group != "headgroup" else
                             job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"])
        if node:
            body["nodeName"] = node
        return {"metadata": {"name": f"embed-x7k2q-{group}-worker-{suffix}", "namespace": "ray",
                             "labels": {"ray.io/cluster": "embed-x7k2q", "ray.io/group": group,
                                        "ray.io/node-type": "worker"}}, "spec": body}

    first = pod("gpu", warmed[0], "q8zrk")
    view = _RayCluster(job, [first], nodes)
    terms, chosen = webhook.affinity_terms(pod("gpu"), view, webhook.WebhookConfig())
    assert len(chosen) == 1 and chosen[0] in warmed[1:]  # not the node its sibling has
    assert terms and view.gets == ["/apis/ray.io/v1/namespaces/ray/rayjobs/embed"]
    assert webhook.affinity_terms(pod("headgroup"), view, webhook.WebhookConfig()) == ([], [])


def test_the_submitter_reads_nothing_its_entrypoint_names() -> None:
    """KubeRay's submitter (a Job's pod in K8sJobMode, a head sidecar in SidecarMode) runs
    ``ray job submit ... -- <entrypoint>`` (ray-operator/controllers/ray/common/job.go): the
    cluster runs the entrypoint, so the submitter's node is warmed for nothing of it; what
    the same script reads itself still counts."""
    from prefetchd.k8s import datasets as ds_mod

    script = ("until python -c \"import urllib.request\" >/dev/null 2>&1 ; do sleep 2 ; done ; "
              "if ! ray job status --address http://embed-head-svc:8265 embed-q8zrk >/dev/null "
              "2>&1 ; then ray job submit --address http://embed-head-svc:8265 --no-wait "
              "--submission-id embed-q8zrk -- python /home/ray/embed.py --input "
              "s3://corpus/news/2026/ ; fi ; ray job logs --address "
              "http://embed-head-svc:8265 --follow embed-q8zrk ; "
              "aws s3 cp s3://corpus/manifests/run.json /tmp/run.json")
    pod = {"metadata": {"name": "embed-7xk2p", "namespace": "ray", "labels": {
        "batch.kubernetes.io/job-name": "embed", "job-name": "embed",
        "ray.io/originated-from-cr-name": "embed", "ray.io/originated-from-crd": "RayJob"}},
        "spec": {"containers": [{"name": "ray-job-submitter", "image": "rayproject/ray:2.40.0",
                                 "command": ["/bin/bash", "-lc", "--"], "args": [script]}]}}
    assert ds_mod.pod_datasets(pod, None) == ["s3://corpus/manifests/run.json"]
