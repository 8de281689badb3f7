"""The agent's PVC path against the fake API server: claims of workflow steps become datasets.

Objects are made by tests/k8s/argo_sim.py as Argo and the PV controller make them; the agent
runs its real watchers (workflows, claims, PVs, pods, nodes) through the real client.
"""

from __future__ import annotations

import copy
import threading
import time

import pytest
from argo_sim import ArgoRun, FakeCluster, argo_workflow, bind, claim, static_pv
from k8s_helpers import node

from prefetchd.k8s import agent as ag
from prefetchd.k8s import datasets as dsm
from prefetchd.k8s import placement as pl
from prefetchd.k8s import watch as kw

pytestmark = pytest.mark.k8s

FAST = kw.WatchOptions(backoff_initial=0.01, backoff_max=0.05, timeout_seconds=30)
NS = "ml"


class Calls:
    def __init__(self) -> None:
        self.warms: list[ag.WarmRequest] = []
        self.releases: list[tuple[str, str]] = []
        self.cond = threading.Condition()

    def warm(self, req: ag.WarmRequest) -> None:
        with self.cond:
            self.warms.append(req)
            self.cond.notify_all()

    def release(self, dataset: str, source: str) -> None:
        with self.cond:
            self.releases.append((dataset, source))
            self.cond.notify_all()

    def wait(self, what: str, fn) -> None:
        with self.cond:
            assert self.cond.wait_for(fn, 15), (what, self.warms, self.releases)


def agent_node(name: str) -> dict:
    n = node(name, status={"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}})
    n["metadata"]["annotations"] = {pl.CACHE_FREE_ANNOTATION: str(50 * 2**30)}
    return n


@pytest.fixture()
def agent(fake, api):
    fake.create(agent_node("me"))
    calls = Calls()
    a = ag.Agent(ag.AgentConfig(node_name="me"), dsm.ApiClusterView(api), calls.warm,
                 calls.release)
    group = ag.build_watchers(lambda: kw.ClientTransport(api), a, FAST).start()
    fake.wait_for_watchers(7)
    try:
        yield a, calls
    finally:
        group.stop()
        a.close()


def test_literal_claim_of_a_workflow_step_is_warmed_narrowed_with_its_volume(fake, agent):
    _, calls = agent
    cluster = FakeCluster(fake)
    pv = static_pv("pv-a", "bkt", "sets/a", "http://s3.example:9000")
    pv["spec"]["csi"]["nodeStageSecretRef"] = {"name": "s3-creds", "namespace": "fusecache"}
    cluster.create(claim("ds-a", NS))
    bind(cluster, pv, NS, "ds-a")
    cluster.create(argo_workflow("wf-a", NS, "ds-a", data_arg="/data/train/"))
    calls.wait("warm", lambda: calls.warms)
    (req,) = calls.warms
    assert (req.dataset, req.source, req.step) == ("s3://bkt/sets/a/train", "workflow ml/wf-a",
                                                   "train")
    assert req.volume is not None and req.volume.claim == "ds-a" and req.volume.pv == "pv-a"
    assert req.volume.attributes["endpointUrl"] == "http://s3.example:9000"
    assert req.volume.secret_ref == {"name": "s3-creds", "namespace": "fusecache"}


def test_claim_of_another_driver_is_no_dataset(fake, agent):
    _, calls = agent
    cluster = FakeCluster(fake)
    pv = static_pv("pv-nfs", "bkt", "x")
    pv["spec"]["csi"]["driver"] = "nfs.csi.k8s.io"
    cluster.create(claim("nfs", NS))
    bind(cluster, pv, NS, "nfs")
    cluster.create(argo_workflow("wf-nfs", NS, "nfs"))
    cluster.create(claim("ds-b", NS))
    bind(cluster, static_pv("pv-b", "bkt", "b"), NS, "ds-b")
    cluster.create(argo_workflow("wf-b", NS, "ds-b"))  # a later workflow: the first was seen
    calls.wait("warm", lambda: calls.warms)
    assert [r.dataset for r in calls.warms] == ["s3://bkt/b/train"]


def test_template_claim_bound_while_the_workflow_runs_is_warmed_without_a_workflow_event(
        fake, agent):
    _, calls = agent
    cluster = FakeCluster(fake)
    wf = cluster.create(argo_workflow("wf-v", NS, None, data_arg="/data", template_claim=True))
    run = ArgoRun(cluster, wf)
    run.start()  # the claim wf-v-data exists, Pending
    run.argo_step("prepare", "Running", host="me")
    rv = fake.get("argoproj.io/v1alpha1", "Workflow", "wf-v", NS)["metadata"]["resourceVersion"]
    bind(cluster, static_pv("pv-v", "bkt", "v"), NS, "wf-v-data")
    calls.wait("warm", lambda: calls.warms)
    assert [(r.dataset, r.step) for r in calls.warms] == [("s3://bkt/v/", "train")]
    # no workflow event was needed: the claim's own events did it
    assert fake.get("argoproj.io/v1alpha1", "Workflow", "wf-v", NS)["metadata"][
        "resourceVersion"] == rv
    run.argo_step("prepare", "Succeeded", host="me")
    run.argo_step("train", "Succeeded", host="me")
    run.finish()
    calls.wait("release", lambda: calls.releases)
    assert calls.releases == [("s3://bkt/v/", "workflow ml/wf-v")]


def test_step_pods_are_the_workflows_and_lone_pods_keep_the_pod_path(fake, agent):
    a, calls = agent
    cluster = FakeCluster(fake)
    cluster.create(claim("ds-p", NS))
    bind(cluster, static_pv("pv-p", "bkt", "p"), NS, "ds-p")
    wf = cluster.create(argo_workflow("wf-p", NS, "ds-p"))
    calls.wait("workflow warm", lambda: len(calls.warms) == 1)
    run = ArgoRun(cluster, wf)
    run.start()
    pod = run.argo_step("train", "Pending", create_pod=True)
    assert pod is not None
    pod["spec"]["nodeName"] = "me"
    cluster.create(pod)
    # the same pod without Argo's label and owner: a lone pod, warmed under the pod
    lone = copy.deepcopy(pod)
    lone["metadata"] = {"name": "lone", "namespace": NS}
    cluster.create(lone)
    calls.wait("pod warm", lambda: len(calls.warms) == 3)
    # the step pod bound here asks for the workflow's warm again, first in line (urgent),
    # once; the lone pod bound here is warmed under the pod, urgent too
    assert [(r.source, r.dataset, r.urgent) for r in calls.warms] == [
        ("workflow ml/wf-p", "s3://bkt/p/train", False),
        ("workflow ml/wf-p", "s3://bkt/p/train", True),
        ("pod ml/lone", "s3://bkt/p/train", True)]
    # another event of the same pending pod: not asked again
    cluster.patch("v1", "Pod", pod["metadata"]["name"],
                  {"metadata": {"annotations": {"example.com/touched": "1"}}}, namespace=NS)
    time.sleep(1.0)
    assert len(calls.warms) == 3
    assert ag.workflow_of(pod) == (NS, "wf-p", wf["metadata"]["uid"])
    labelled_only = {"metadata": {"namespace": NS, "labels": {ag.ARGO_WORKFLOW_LABEL: "w"}}}
    assert ag.workflow_of(labelled_only) == (NS, "w", "")
    assert ag.workflow_of(lone) is None


def test_step_pod_bound_here_before_its_data_is_warmed_as_the_workflows(fake, api):
    """A step pod that lands on a node that was not chosen: warmed there under the workflow,
    so the workflow's DAG releases it (no TTL pin)."""
    for name in ("me", "other"):
        fake.create(agent_node(name))
    cluster = FakeCluster(fake)
    cluster.create(claim("ds-q", NS))
    bind(cluster, static_pv("pv-q", "bkt", "q"), NS, "ds-q")
    wf = cluster.create(argo_workflow("wf-q", NS, "ds-q"))
    nodes = [pl.NodeInfo.from_node(fake.get("v1", "Node", n)) for n in ("me", "other")]
    chosen = pl.choose("s3://bkt/q/train", nodes, None, 1)
    loser = "me" if chosen == ["other"] else "other"
    calls = Calls()
    a = ag.Agent(ag.AgentConfig(node_name=loser), dsm.ApiClusterView(api), calls.warm,
                 calls.release)
    a.on_node("ADDED", fake.get("v1", "Node", "me"))
    a.on_node("ADDED", fake.get("v1", "Node", "other"))
    a.on_workflow("ADDED", fake.get("argoproj.io/v1alpha1", "Workflow", "wf-q", NS))
    assert calls.warms == []
    run = ArgoRun(cluster, wf)
    run.start()
    pod = run.argo_step("train", "Pending", create_pod=True)
    pod["spec"]["nodeName"] = loser
    a.on_pod("ADDED", cluster.create(pod))
    assert [(r.source, r.step, r.dataset) for r in calls.warms] == [
        ("workflow ml/wf-q", "train", "s3://bkt/q/train")]
    a.on_workflow("MODIFIED", {**fake.get("argoproj.io/v1alpha1", "Workflow", "wf-q", NS),
                               "status": {"phase": "Succeeded"}})
    assert calls.releases == [("s3://bkt/q/train", "workflow ml/wf-q")]
    a.close()


@pytest.mark.parametrize("arg, want", [
    ("/data/", "s3://bkt/p/"), ("/data/.", "s3://bkt/p/"), ("/data", "s3://bkt/p/"),
    ("/data/train/", "s3://bkt/p/train"), ("/data/a/../train", "s3://bkt/p/train"),
    ("/data//train/./", "s3://bkt/p/train"),
])
def test_mount_paths_are_normalised_alike_for_pods_and_workflows(arg, want):
    from prefetchd import pipeline

    class View:
        def pvc(self, namespace, name):
            return {"spec": {"volumeName": "pv"}}

        def pv(self, name):
            return static_pv("pv", "bkt", "p")

        def nodes(self):
            return []

    pod = {"metadata": {"namespace": NS}, "spec": {
        "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "c"}}],
        "containers": [{"name": "main", "args": ["--data-dir", arg],
                        "volumeMounts": [{"name": "d", "mountPath": "/data/"}]}]}}
    assert dsm.pod_datasets(pod, View()) == [want]
    wf = argo_workflow("w", NS, "c", data_arg=arg)
    (plan,) = pipeline.analyze_documents([wf], pvc_map={"c": "s3://bkt/p"})
    assert [r.uri for r in plan.step("train").reads] == [want]


def test_a_racing_get_never_puts_back_an_older_claim_than_a_watch_event():
    cache = dsm.TtlCache(ttl=60, size=8)
    new = {"metadata": {"resourceVersion": "12"}, "spec": {"volumeName": "pv"}}
    old = {"metadata": {"resourceVersion": "11"}, "spec": {}}
    cache.put("k", new)  # the watch event
    assert cache.get("k", lambda: old) is new  # fresh: no GET
    cache.put("k", old)  # a GET that started before the event, finishing after it
    assert cache.get("k", lambda: old) is new
    cache.put("k", None)  # deleted
    assert cache.get("k", lambda: old) is None


def test_holds_label_is_the_same_for_the_warmed_and_the_requested_form():
    assert pl.holds_label("s3://b/p/train/") == pl.holds_label("s3://b/p/train")
