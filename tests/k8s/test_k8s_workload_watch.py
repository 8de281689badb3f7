"""prefetchd.k8s.workload_watch against the fake API server, in process (real watches, real
client; the warm/release callbacks record what the agent asks of its worker).

CRDs come and go (a kind is watched only while its CRD is Established), an Experiment's
trial-template ConfigMap is fetched, an object prefetchd cannot read is logged once and
skipped, and pins held from before a restart are released once the listing shows their job
gone.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import training_objects as to
import yaml

from prefetchd.k8s import datasets as ds_mod
from prefetchd.k8s import placement as pl
from prefetchd.k8s import watch as kw
from prefetchd.k8s import workload_watch as ww

pytestmark = pytest.mark.k8s

NS = "ml"
PYTORCH_CRD = "kubeflow-trainer/crds/kubeflow.org_pytorchjobs.yaml"


def node_info(name: str) -> pl.NodeInfo:
    """An annotated node with 10 GiB of cache free, as placement sees it."""
    return pl.NodeInfo.from_node({
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name},
                     "annotations": {pl.CACHE_FREE_ANNOTATION: str(10 << 30)}},
        "status": {"allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"}}})


NODE = node_info("n1")


def wait_for(what: str, fn: Any, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := fn()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
    return value


class Recorder:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.warms: list[tuple[str, str]] = []
        self.urgent: list[bool] = []
        self.releases: list[tuple[str, str]] = []

    def warm(self, req: Any) -> None:
        with self.lock:
            self.warms.append((req.source, req.dataset))
            self.urgent.append(req.urgent)

    def release(self, dataset: str, source: str) -> None:
        with self.lock:
            self.releases.append((source, dataset))


@pytest.fixture()
def watching(fake, api) -> Iterator[Any]:
    made: list[ww.WorkloadWatch] = []

    def make(held: list[tuple[str, str]] = (), node_name: str = "n1",
             nodes: list[pl.NodeInfo] | None = None) -> tuple[ww.WorkloadWatch, Recorder]:
        rec = Recorder()
        w = ww.WorkloadWatch(ww.WorkloadConfig(node_name=node_name, paced=False),
                             ds_mod.ApiClusterView(api), lambda: nodes or [NODE], rec.warm,
                             rec.release, held)
        w.start(lambda: kw.ClientTransport(api),
                kw.WatchOptions(timeout_seconds=5, backoff_initial=0.1, backoff_max=0.5))
        made.append(w)
        return w, rec

    yield make
    for w in made:
        w.stop()


def test_a_kind_is_watched_once_its_crd_is_established_and_no_longer_after(fake, watching):
    job = to.pytorchjob("late", NS, "s3://data/late/", workers=1, queue="q")
    job["spec"]["runPolicy"]["suspend"] = False
    fake.create(job)
    w, rec = watching()
    wait_for("the first listings", w.listed)  # CRDs and batch Jobs listed and handed on
    assert "pytorchjobs.kubeflow.org/v1" not in w.watching() and not rec.warms
    crd = fake.create(to.crd(PYTORCH_CRD))
    wait_for("the job warmed once its CRD is in",
             lambda: rec.warms == [("pytorchjob ml/late", "s3://data/late/")])
    fake.delete(crd["apiVersion"], crd["kind"], crd["metadata"]["name"])
    wait_for("the watch stopped", lambda: "pytorchjobs.kubeflow.org/v1" not in w.watching())


def test_an_experiment_s_trial_template_configmap_is_fetched(fake, watching):
    fake.create(to.crd("katib/crds/kubeflow.org_experiments.yaml"))
    exp = to.experiment("cm", NS, "s3://data/hpo/", parallel=2)
    template = exp["spec"]["trialTemplate"].pop("trialSpec")
    exp["spec"]["trialTemplate"]["configMap"] = {
        "configMapName": "trial-templates", "configMapNamespace": NS,
        "templatePath": "batch.yaml"}
    fake.create({"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": "trial-templates", "namespace": NS},
                 "data": {"batch.yaml": yaml.safe_dump(template)}})
    fake.create(exp)
    _, rec = watching()
    wait_for("the experiment warmed", lambda: rec.warms == [("experiment ml/cm",
                                                             "s3://data/hpo/")])


def test_a_job_s_configmaps_are_fetched_for_its_env_and_config_files(fake, watching):
    """The agent reads what a job takes from ConfigMaps as the plan does from files: an
    ``envFrom`` key its script spells out and a mounted config it names (one GET each); a
    ConfigMap that is missing is not asked for again on each of the job's events."""
    job = to.batch_job("cfg", NS, "s3://data/unused/", queue="q", priority="p")
    job["metadata"]["labels"] = {}
    job["spec"]["suspend"] = False
    c = job["spec"]["template"]["spec"]["containers"][0]
    c.update(command=["bash", "-c"], args=['aws s3 cp "${LABELS}" /w/ && '
                                           "python train.py --config /etc/train/config.yaml"],
             envFrom=[{"configMapRef": {"name": "paths"}}, {"configMapRef": {"name": "gone"}}],
             volumeMounts=[{"name": "cfg", "mountPath": "/etc/train"}])
    job["spec"]["template"]["spec"]["volumes"] = [
        {"name": "cfg", "configMap": {"name": "train-cfg"}}]
    fake.create({"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": "paths", "namespace": NS},
                 "data": {"LABELS": "s3://data/labels.json"}})
    fake.create({"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": "train-cfg", "namespace": NS},
                 "data": {"config.yaml": "data:\n  train: s3://data/train/\n"
                                         "trainer:\n  output_dir: s3://runs/cfg/\n"}})
    made = fake.create(job)
    _, rec = watching()
    wait_for("the job's datasets warmed", lambda: sorted(d for _, d in rec.warms) == [
        "s3://data/labels.json", "s3://data/train/"])
    gets = [p for m, p in fake.requests if m == "GET" and "/configmaps/gone" in p]
    assert len(gets) == 1
    for i in range(3):  # more events of the job: the missing one is not asked for again
        made["metadata"].setdefault("annotations", {})["touch"] = str(i)
        made = fake.replace(made)
    time.sleep(1.0)
    assert [p for m, p in fake.requests if m == "GET" and "/configmaps/gone" in p] == gets


def test_a_trial_pod_seen_before_its_trial_is_the_experiment_s(fake, watching):
    """Katib makes Trial, Job and pod within a second and the agent watches each on its own
    stream: a pod seen first must still be the Experiment's, or the agent's pending-pod path
    would pin the data under the pod, and the Experiment's end would leave that pin."""
    fake.create(to.crd("katib/crds/kubeflow.org_experiments.yaml"))
    exp = fake.create(to.experiment("tune", NS, "s3://data/hpo/", parallel=2))
    w, rec = watching()
    wait_for("the experiment warmed", lambda: rec.warms == [("experiment ml/tune",
                                                             "s3://data/hpo/")])
    tr = to.trial(exp, "0.01")  # not created: the watch has not seen it
    pod = to.trial_pod(tr)
    assert w.claim_pod(pod)
    unknown = to.experiment("other", NS, "s3://data/o/", parallel=1)
    unknown["metadata"]["uid"] = "6c1f0c1e-0000-4000-8000-000000000001"
    other = to.trial_pod(to.trial(unknown, "0.1"))
    assert not w.claim_pod(other)  # an Experiment not known here: the pod path decides


def test_a_job_s_pod_bound_to_a_node_placement_passed_over_is_warmed_there_now(fake, watching):
    """A running PyTorchJob (1 master + 1 worker) is warmed on two of five nodes; its worker
    pod is bound to a third (the warm nodes were full). That node's agent warms the pod's
    dataset at once (urgent) under the job, once however many events the pending pod has,
    and releases it with the job; a pod of unknown work is left to the agent's pod path."""
    fake.create(to.crd(PYTORCH_CRD))
    job = to.pytorchjob("run", NS, "s3://data/run/", workers=1, queue="q")
    job["spec"]["runPolicy"]["suspend"] = False
    job = fake.create(job)
    nodes = [node_info(f"n{i}") for i in range(1, 6)]
    chosen = pl.choose("s3://data/run/", nodes, None, 2)
    here = next(n.name for n in nodes if n.name not in chosen)
    w, rec = watching(node_name=here, nodes=nodes)
    wait_for("the job read", lambda: w.claim_pod(to.pytorch_pod(job, "Worker", 0)))
    assert rec.warms == []  # placement chose other nodes
    pod = to.pytorch_pod(job, "Worker", 0)
    pod["metadata"]["uid"] = "7d2e0c1e-0000-4000-8000-000000000002"
    pod["spec"]["nodeName"] = here
    for _ in range(3):  # bound, then the kubelet's status updates while still Pending
        assert w.claim_pod(pod)
    assert rec.warms == [("pytorchjob ml/run", "s3://data/run/")] and rec.urgent == [True]
    stranger = to.pytorchjob("stranger", NS, "s3://data/s/", 1, "q")
    stranger["metadata"]["uid"] = "7d2e0c1e-0000-4000-8000-000000000003"  # not created
    other = to.pytorch_pod(stranger, "Worker", 0)
    other["spec"]["nodeName"] = here
    assert not w.claim_pod(other) and len(rec.warms) == 1
    fake.patch("kubeflow.org/v1", "PyTorchJob", "run", {"status": to.v1_job_status(
        to.cond("Succeeded", reason="PyTorchJobSucceeded"))}, NS)
    wait_for("the job's data released",
             lambda: rec.releases == [("pytorchjob ml/run", "s3://data/run/")])
    assert w.claim_pod(pod) and len(rec.warms) == 1  # finished work: nothing more


def test_a_pod_bound_here_before_its_job_is_known_is_the_job_s_once_it_is(fake, watching):
    """The job's pod and the job come on different watch streams: a pod bound here whose
    PyTorchJob's event has not come yet is left to the agent's pod path (its data warmed at
    once, under the pod), and when the job comes its data is warmed under the job too, so
    the job's end releases it (seen on a real control plane: the pin stayed the pod's)."""
    fake.create(to.crd(PYTORCH_CRD))
    nodes = [node_info(f"n{i}") for i in range(1, 6)]
    chosen = pl.choose("s3://data/late/", nodes, None, 2)
    here = next(n.name for n in nodes if n.name not in chosen)
    w, rec = watching(node_name=here, nodes=nodes)
    job = to.pytorchjob("late", NS, "s3://data/late/", workers=1, queue="q")
    job["spec"]["runPolicy"]["suspend"] = False
    job["metadata"]["uid"] = "8e3f0c1e-0000-4000-8000-000000000004"  # not created yet
    pod = to.pytorch_pod(job, "Worker", 0)
    pod["metadata"]["uid"] = "8e3f0c1e-0000-4000-8000-000000000005"
    pod["spec"]["nodeName"] = here
    assert not w.claim_pod(pod) and rec.warms == []  # unknown work: the pod path's
    fake.create(job)
    wait_for("the job taking its early pod", lambda: rec.warms == [
        ("pytorchjob ml/late", "s3://data/late/")])
    assert rec.urgent == [True] and w.claim_pod(pod) and len(rec.warms) == 1
    # what the pod path pinned under the pod meanwhile is dropped: the job holds it now
    assert rec.releases == [("pod ml/late-worker-0", "s3://data/late/")]


def test_a_trainjob_pod_bound_off_its_data_is_warmed_there_under_the_trainjob(fake, watching):
    """The same for a running TrainJob of 2 nodes: its pods are its JobSet's (labelled with
    the JobSet and an indexed Job, owned by that Job), warmed under the TrainJob."""
    fake.create(to.crd("kubeflow-trainer/crds/trainer.kubeflow.org_trainjobs.yaml"))
    fake.create(to.crd("kubeflow-trainer/crds/trainer.kubeflow.org_clustertrainingruntimes.yaml"))
    rt = fake.create(to.runtime("torch_distributed.yaml"))
    job = to.trainjob("llm", NS, "s3://data/llm/", nodes=2, queue="q")
    job["spec"]["suspend"] = False
    job = fake.create(job)
    nodes = [node_info(f"n{i}") for i in range(1, 6)]
    here = next(n.name for n in nodes if n.name not in pl.choose("s3://data/llm/", nodes,
                                                                   None, 2))
    w, rec = watching(node_name=here, nodes=nodes)
    pod = to.trainjob_pod(job, rt, 1)
    pod["metadata"]["uid"] = "7d2e0c1e-0000-4000-8000-000000000004"
    wait_for("the job read", lambda: w.claim_pod(pod))
    assert rec.warms == []  # unbound, and placement chose other nodes
    pod["spec"]["nodeName"] = here
    assert w.claim_pod(pod) and w.claim_pod(pod)
    assert rec.warms == [("trainjob ml/llm", "s3://data/llm/")] and rec.urgent == [True]


def test_a_queued_rayjob_is_warmed_on_its_workers_nodes_and_its_bound_pod_where_it_lands(
        fake, watching):
    """KubeRay: a RayJob queued in Kueue is warmed ahead on the nodes placement picks for its
    2 workers (its head starts with no CPUs for tasks); once running, a worker pod KubeRay
    made (labelled with its RayCluster, owned by it) bound to another node gets the data
    there at once, under the RayJob, and the data is released when the job completes."""
    fake.create(to.own_crd("ray.io_rayjobs.yaml"))
    job = fake.create(to.rayjob("embed", NS, "s3://data/news/", workers=2, queue="q"))
    nodes = [node_info(f"n{i}") for i in range(1, 6)]
    chosen = pl.choose("s3://data/news/", nodes, None, 2)
    here = next(n.name for n in nodes if n.name not in chosen)
    w, rec = watching(node_name=chosen[0], nodes=nodes)
    wait_for("the queued job warmed on a chosen node",
             lambda: rec.warms == [("rayjob ml/embed", "s3://data/news/")])
    w2, rec2 = watching(node_name=here, nodes=nodes)
    wait_for("the second agent's listings", w2.listed)
    assert rec2.warms == []  # not one of the two nodes placement chose
    cluster = fake.create(to.raycluster_of(job))
    fake.patch("ray.io/v1", "RayJob", "embed", {"spec": {"suspend": False}}, NS)
    fake.patch("ray.io/v1", "RayJob", "embed", {"status": {
        "jobDeploymentStatus": "Running", "jobStatus": "RUNNING",
        "rayClusterName": cluster["metadata"]["name"], "jobId": "embed-q8zrk"}}, NS)
    pod = to.ray_pod(cluster, "gpu")
    pod["metadata"]["uid"] = "7d2e0c1e-0000-4000-8000-000000000005"
    wait_for("the job read", lambda: w2.claim_pod(pod))
    assert rec2.warms == []  # not bound yet
    pod["spec"]["nodeName"] = here
    assert w2.claim_pod(pod) and w2.claim_pod(pod)
    assert rec2.warms == [("rayjob ml/embed", "s3://data/news/")] and rec2.urgent == [True]
    fake.patch("ray.io/v1", "RayJob", "embed", {"status": {
        "jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"}}, NS)
    wait_for("the job's data released on both nodes",
             lambda: rec.releases == rec2.releases == [("rayjob ml/embed", "s3://data/news/")])


def test_a_ray_worker_bound_here_when_only_its_workload_is_known_waits_for_the_rayjob(
        fake, watching):
    """Real control plane, stop 57: the Workload's event reached an agent before its RayJob's
    (separate watch streams), then a Ray worker bound to that node; the job was found by the
    Workload's owner, but with no model of the RayJob the worker (which names no dataset)
    was marked done with nothing warmed, for good. It waits for the RayJob now."""
    nodes = [node_info(f"n{i}") for i in range(1, 6)]
    here = next(n.name for n in nodes if n.name not in pl.choose("s3://data/news/", nodes,
                                                                   None, 2))
    w, rec = watching(node_name=here, nodes=nodes)
    wait_for("the first listings", w.listed)
    job = to.rayjob("embed", NS, "s3://data/news/", workers=2, queue="q")
    job["spec"]["suspend"] = False
    job["metadata"]["uid"] = "7d2e0c1e-0000-4000-8000-000000000006"  # not created yet
    spec = job["spec"]["rayClusterSpec"]
    wl = to.workload_for(job, [("head", 1, spec["headGroupSpec"]["template"]),
                               ("gpu", 2, spec["workerGroupSpecs"][0]["template"])], "q", None)
    wl["status"] = to.admitted(wl)
    fake.create(to.crd("kueue/crds/kueue.x-k8s.io_workloads.yaml"))
    fake.create(wl)
    wait_for("the Workload read", lambda: "rayjob ml/embed" in w._jobs)
    cluster = to.raycluster_of(job)
    cluster["metadata"]["uid"] = "7d2e0c1e-0000-4000-8000-000000000007"
    pod = to.ray_pod(cluster, "gpu")
    pod["metadata"]["uid"] = "7d2e0c1e-0000-4000-8000-000000000008"
    pod["spec"]["nodeName"] = here
    assert not w.claim_pod(pod) and rec.warms == []  # its RayJob not known yet: it waits
    fake.create(to.own_crd("ray.io_rayjobs.yaml"))
    fake.create(job)
    wait_for("the RayJob taking its worker", lambda: rec.warms == [
        ("rayjob ml/embed", "s3://data/news/")])
    assert rec.urgent == [True] and w.claim_pod(pod) and len(rec.warms) == 1


def test_unreadable_object_is_logged_once_and_skipped(fake, watching, log_police, caplog):
    log_police.allow(r"cannot read, skipped: PyTorchJob ml/bad")
    fake.create(to.crd(PYTORCH_CRD))
    bad = to.pytorchjob("bad", NS, "s3://data/x/", workers=1, queue="q")
    bad["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = "many"
    fake.create(bad)
    good = to.pytorchjob("good", NS, "s3://data/good/", workers=1, queue="q")
    good["spec"]["runPolicy"]["suspend"] = False
    w, rec = watching()
    fake.create(good)
    wait_for("the good job warmed", lambda: rec.warms == [("pytorchjob ml/good",
                                                           "s3://data/good/")])
    w.on_object("MODIFIED", fake.get("kubeflow.org/v1", "PyTorchJob", "bad", NS))  # same rv
    # a status update (a new resourceVersion, the same error): not said again (a blind test
    # of the agent: nine lines in three seconds for one Job)
    fake.patch("kubeflow.org/v1", "PyTorchJob", "bad", {"status": to.v1_job_status(
        to.cond("Created", reason="PyTorchJobCreated"))}, NS)
    w.on_object("MODIFIED", fake.get("kubeflow.org/v1", "PyTorchJob", "bad", NS))
    lines = [r for r in caplog.records if "cannot read" in r.getMessage()]
    assert len(lines) == 1 and "replicas" in lines[0].getMessage()


def test_pins_of_a_job_gone_during_a_restart_are_released_after_the_listing(fake, watching):
    fake.create(to.crd(PYTORCH_CRD))
    kept = to.pytorchjob("kept", NS, "s3://data/kept/", workers=1, queue="q")
    kept["spec"]["runPolicy"]["suspend"] = False
    fake.create(kept)
    held = [("pytorchjob ml/kept", "s3://data/kept/"), ("pytorchjob ml/gone", "s3://data/g/"),
            ("workflow ml/wf", "s3://data/wf/")]  # the workflow agent's, not ours
    _, rec = watching(held)
    wait_for("the gone job's pins released",
             lambda: rec.releases == [("pytorchjob ml/gone", "s3://data/g/")])
    assert ("pytorchjob ml/kept", "s3://data/kept/") not in rec.warms  # already held here


def test_queued_lane_sends_one_warm_at_a_time_within_the_queued_share(fake, api):
    """Paced as with the real worker: the next queued warm goes when the last one finished,
    and not while the bytes pinned for still-queued work reach the bound; admitted work goes
    at once."""
    fake.create(to.crd(PYTORCH_CRD))
    for name in ("a", "b", "c"):
        fake.create(to.pytorchjob(name, NS, f"s3://data/{name}/", workers=1, queue="q"))
    rec = Recorder()
    w = ww.WorkloadWatch(ww.WorkloadConfig(node_name="n1", queued_limit_bytes=1000),
                         ds_mod.ApiClusterView(api), lambda: [NODE], rec.warm, rec.release)
    w.start(lambda: kw.ClientTransport(api), kw.WatchOptions(timeout_seconds=5))
    try:
        wait_for("the first queued warm", lambda: len(rec.warms) == 1)
        wait_for("the first listings", w.listed)
        first = rec.warms[0]
        assert first[0] == "pytorchjob ml/a"  # same priority: earliest created first
        w.warm_finished(ww.WarmRequest(first[1], first[0], "", 0), 600, time.time())
        wait_for("the second queued warm", lambda: len(rec.warms) == 2)
        second = rec.warms[1]
        w.warm_finished(ww.WarmRequest(second[1], second[0], "", 0), 600, time.time())
        # 1200 bytes held for queued work >= 1000: the third waits ...
        assert len(rec.warms) == 2
        # ... until one of them is admitted (its bytes no longer count as queued).
        fake.patch("kubeflow.org/v1", "PyTorchJob", first[0].split("/")[-1],
                   {"spec": {"runPolicy": {"suspend": False}}}, NS)
        wait_for("the third queued warm", lambda: len(rec.warms) == 3)
    finally:
        w.stop()
