"""The node agent end to end against the fake: corpus workflows in, warm/release calls out."""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any

import pytest
from k8s_helpers import corpus_workflow, node

from prefetchd.k8s import agent as ag
from prefetchd.k8s import datasets as dsm
from prefetchd.k8s import placement as pl
from prefetchd.k8s import watch as kw

pytestmark = pytest.mark.k8s

FAST = kw.WatchOptions(backoff_initial=0.01, backoff_max=0.05, timeout_seconds=30)
WF = "pipelines/argo_dag_s3_artifacts.yaml"
LABELS = "s3://example-vision/flowers102/labels.csv"
SPLITS = {"s3://example-vision/flowers102/train/", "s3://example-vision/flowers102/val/"}


class Calls:
    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []
        self.sources: list[str] = []  # the source of each item
        self.cond = threading.Condition()

    def warm(self, req: ag.WarmRequest) -> None:
        with self.cond:
            self.items.append(("warm", req.dataset))
            self.sources.append(req.source)
            self.cond.notify_all()

    def release(self, dataset: str, source: str) -> None:
        with self.cond:
            self.items.append(("release", dataset))
            self.sources.append(source)
            self.cond.notify_all()

    def wait(self, count: int) -> list[tuple[str, str]]:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.items) >= count, 10), self.items
            return list(self.items)


def agent_node(name: str) -> dict:
    n = node(name)
    n["metadata"]["annotations"] = {pl.CACHE_FREE_ANNOTATION: str(50 * 2**30)}
    return n


def status(wf: str, **phases: str) -> dict:
    """A running DAG workflow's status as the controller writes it: a node per task, named
    ``<workflow>.<task>`` (the name the plan's steps are found by), shown by the task's name."""
    return {"phase": "Running", "nodes": {
        f"{wf}-{i}": {"id": f"{wf}-{i}", "name": f"{wf}.{step}", "displayName": step,
                      "phase": ph, "type": "Pod"}
        for i, (step, ph) in enumerate(phases.items())}}


@pytest.fixture()
def running_agent(fake, api):
    calls = Calls()
    fake.create(agent_node("me"))
    fake.create(agent_node("other"))
    agent = ag.Agent(ag.AgentConfig(node_name="me", replicas=2), dsm.ApiClusterView(api),
                     calls.warm, calls.release)
    group = ag.build_watchers(lambda: kw.ClientTransport(api), agent, FAST).start()
    fake.wait_for_watchers(5)
    try:
        yield agent, calls
    finally:
        group.stop()


def test_workflow_steps_not_started_are_warmed_and_finished_ones_released(fake, running_agent):
    agent, calls = running_agent
    wf = corpus_workflow(WF, namespace="ml")
    wf["status"] = status(wf["metadata"]["name"],
                          **{"fetch-labels": "Succeeded", "fetch-splits": "Pending"})
    fake.create(wf)
    got = calls.wait(2)
    assert {d for k, d in got} == SPLITS and all(k == "warm" for k, _ in got)
    # a re-delivery of the same state does nothing; progress releases what is done
    name = wf["metadata"]["name"]
    fake.patch("argoproj.io/v1alpha1", "Workflow", name,
               {"status": status(name, **{"fetch-labels": "Succeeded", "fetch-splits": "Succeeded",
                                    "train": "Running"})}, namespace="ml")
    got = calls.wait(4)
    assert {d for k, d in got[2:]} == SPLITS and all(k == "release" for k, _ in got[2:])
    assert LABELS not in {d for _, d in got}  # its only reader had finished before we looked


def test_what_an_earlier_step_writes_is_warmed_once_that_step_succeeded(fake, running_agent):
    """A step's read of what the step before it uploads (``written_by``) is not warmed while
    its writer runs (blind round 47: it was warmed at submission, before it existed), and is
    once the writer has succeeded and the reader has not started."""
    agent, calls = running_agent

    def step(name: str, script: str) -> dict:
        return {"name": name, "container": {"image": "amazon/aws-cli:2.17.20",
                                            "command": ["sh", "-c"], "args": [script]}}
    wf = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
          "metadata": {"name": "rank-x7k2p", "namespace": "ml", "uid": "u-rank"},
          "spec": {"entrypoint": "main", "templates": [
              {"name": "main", "dag": {"tasks": [
                  {"name": "features", "template": "features"},
                  {"name": "train", "template": "train", "depends": "features"}]}},
              step("features", "aws s3 cp s3://lake/raw/clicks.parquet /tmp/ && python -m f "
                               "&& aws s3 cp /tmp/f.parquet s3://lake/run/features.parquet"),
              step("train", "aws s3 cp s3://lake/run/features.parquet /tmp/ && "
                            "aws s3 cp s3://lake/ref/vocab.txt /tmp/")]},
          "status": status("rank-x7k2p", **{"features": "Running"})}
    fake.create(wf)
    got = calls.wait(1)
    time.sleep(0.5)  # (nothing more comes)
    assert calls.items == [("warm", "s3://lake/ref/vocab.txt")]
    fake.patch("argoproj.io/v1alpha1", "Workflow", "rank-x7k2p",
               {"status": status("rank-x7k2p", **{"features": "Succeeded"})}, namespace="ml")
    got = calls.wait(2)
    assert got[1] == ("warm", "s3://lake/run/features.parquet")


def test_a_suspended_workflow_warms_nothing_new_and_keeps_what_it_pinned(fake, running_agent):
    """``argo suspend`` (spec.suspend) starts no step until someone resumes it (blind jobs
    round 45: it was warmed as if running); what it pinned before stays, since its running
    pods go on, and a step finishing meanwhile still releases its data."""
    agent, calls = running_agent
    wf = corpus_workflow(WF, namespace="ml")
    name = wf["metadata"]["name"]
    wf["spec"]["suspend"] = True
    wf["status"] = status(name, **{"fetch-labels": "Pending", "fetch-splits": "Pending"})
    fake.create(wf)
    time.sleep(0.5)
    assert calls.items == []
    fake.patch("argoproj.io/v1alpha1", "Workflow", name, {"spec": {"suspend": None}},
               namespace="ml")
    got = calls.wait(3)
    assert {d for _, d in got} == SPLITS | {LABELS} and all(k == "warm" for k, _ in got)
    fake.patch("argoproj.io/v1alpha1", "Workflow", name, {
        "spec": {"suspend": True},
        "status": status(name, **{"fetch-labels": "Succeeded", "fetch-splits": "Pending"})},
        namespace="ml")
    assert calls.wait(4)[3] == ("release", LABELS)
    time.sleep(0.5)
    assert len(calls.items) == 4  # the splits stay pinned for the step still to come


def test_a_workflow_being_stopped_warms_only_its_exit_handler(fake, running_agent):
    """``argo stop`` (spec.shutdown: Stop) before the controller marks the nodes: the step
    still to come is not warmed, the exit handler's data is (blind job round 51)."""
    agent, calls = running_agent

    def step(name: str, data: str) -> dict:
        return {"name": name, "container": {"image": "busybox", "args": [f"--data={data}"]}}
    wf = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
          "metadata": {"name": "stop-x1", "namespace": "ml", "uid": "u-stop"},
          "spec": {"entrypoint": "main", "onExit": "on-exit", "shutdown": "Stop", "templates": [
              {"name": "main", "steps": [[{"name": "a", "template": "a"}],
                                         [{"name": "b", "template": "b"}]]},
              step("a", "s3://probe/a/"), step("b", "s3://probe/b/"),
              step("on-exit", "s3://probe/exit/")]},
          "status": {"phase": "Running", "nodes": {
              "stop-x1-1": {"id": "stop-x1-1", "name": "stop-x1[0].a", "displayName": "a",
                            "phase": "Running", "type": "Pod"}}}}
    fake.create(wf)
    assert calls.wait(1) == [("warm", "s3://probe/exit/")]
    time.sleep(0.5)
    assert len(calls.items) == 1  # (b will never start)


def test_a_stopped_workflows_exit_handler_data_is_placed_for_the_exit_handler(
        fake, running_agent):
    """Data the exit handler and a step that will never start both read is placed by the
    exit handler's constraints: it was placed by the step's (the earliest still to come),
    here a node selector no node has, so it was warmed nowhere."""
    agent, calls = running_agent

    def step(name: str, **more: object) -> dict:
        return {"name": name, **more,
                "container": {"image": "busybox", "args": ["--data=s3://probe/shared/"]}}
    wf = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
          "metadata": {"name": "stop-x2", "namespace": "ml", "uid": "u-stop2"},
          "spec": {"entrypoint": "main", "onExit": "on-exit", "shutdown": "Stop", "templates": [
              {"name": "main", "steps": [[{"name": "a", "template": "a"}],
                                         [{"name": "b", "template": "b"}]]},
              {"name": "a", "container": {"image": "busybox", "args": ["--x=s3://probe/a/"]}},
              step("b", nodeSelector={"pool": "no-such-pool"}), step("on-exit")]},
          "status": {"phase": "Running", "nodes": {
              "stop-x2-1": {"id": "stop-x2-1", "name": "stop-x2[0].a", "displayName": "a",
                            "phase": "Running", "type": "Pod"}}}}
    fake.create(wf)
    assert calls.wait(1) == [("warm", "s3://probe/shared/")]


def test_deleting_a_workflow_releases_its_datasets(fake, running_agent):
    agent, calls = running_agent
    wf = corpus_workflow(WF, namespace="ml")
    fake.create(wf)
    assert {d for _, d in calls.wait(3)} == SPLITS | {LABELS}
    fake.delete("argoproj.io/v1alpha1", "Workflow", wf["metadata"]["name"], namespace="ml")
    got = calls.wait(6)
    assert sorted(d for k, d in got if k == "release") == sorted(SPLITS | {LABELS})


def test_unparsable_workflow_is_logged_once_and_skipped(fake, api, log_police, caplog):
    log_police.allow(r"workflow ml/broken: cannot analyse, skipped")
    fake.create(agent_node("me"))
    calls = Calls()
    agent = ag.Agent(ag.AgentConfig(node_name="me"), dsm.ApiClusterView(api), calls.warm,
                     calls.release)
    bad = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
           "metadata": {"name": "broken", "namespace": "ml"}, "spec": {"templates": "nope"}}
    fake.create(bad)
    # the same version of it reaches the agent three times (its watches start over, and list
    # it again); after each, a good workflow's warms show the watch went on past the bad one
    for i in range(3):
        group = ag.build_watchers(lambda: kw.ClientTransport(api), agent, FAST).start()
        try:
            fake.create(corpus_workflow(WF, name=f"good-{i}", namespace="ml"))
            poll(f"good-{i} warmed",
                 lambda i=i: calls.sources.count(f"workflow ml/good-{i}") >= 3)
        finally:
            group.stop()
    seen = [r for r in caplog.records if "cannot analyse" in r.getMessage()]
    assert len(seen) == 1, [r.getMessage() for r in seen]
    agent.close()


def test_only_chosen_node_warms(fake, api):
    for i in range(6):
        fake.create(agent_node(f"n{i}"))
    wf = corpus_workflow(WF, namespace="ml")
    nodes = [pl.NodeInfo.from_node(agent_node(f"n{i}")) for i in range(6)]
    warmed: dict[str, set[str]] = {}
    for i in range(6):
        got: set[str] = set()
        agent = ag.Agent(ag.AgentConfig(node_name=f"n{i}"), dsm.ApiClusterView(api),
                         lambda r, got=got: got.add(r.dataset))
        for n in nodes:
            agent.on_node("ADDED", {"metadata": {"name": n.name, "annotations": {
                pl.CACHE_FREE_ANNOTATION: str(50 * 2**30)}}})
        agent.on_workflow("ADDED", {**wf, "metadata": {**wf["metadata"], "uid": "u1"}})
        warmed[f"n{i}"] = got
    # each dataset is warmed by exactly one agent (not none, not two), the one the shared
    # ranking picks
    for ds in SPLITS | {LABELS}:
        holders = [n for n, got in warmed.items() if ds in got]
        assert len(holders) == 1, (ds, warmed)
        assert holders == pl.choose(ds, nodes, None, 1)


def test_pending_pod_with_fusecache_pvc_is_warmed(fake, running_agent):
    agent, calls = running_agent
    fake.create({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv1"},
                 "spec": {"csi": {"driver": "csi.fusecache.io", "volumeHandle": "h",
                                  "volumeAttributes": {"bucket": "bkt", "prefix": "p"}}}})
    fake.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                 "metadata": {"name": "c", "namespace": "ml"}, "spec": {"volumeName": "pv1"}})
    pod: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml"},
        "spec": {"nodeName": "me", "containers": [{"name": "c", "args": ["/d/x/"],
                 "volumeMounts": [{"name": "v", "mountPath": "/d"}]}],
                 "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "c"}}]},
        "status": {"phase": "Pending"}}
    fake.create(pod)
    assert calls.wait(1) == [("warm", "s3://bkt/p/x")]


def test_pins_held_before_a_restart_are_reconciled_after_the_first_listing(fake, api):
    """Pins of workflows deleted or done while the agent was down are released at start;
    pins of a workflow still pending are kept (not warmed again) and released by its DAG."""
    train, val = sorted(SPLITS)
    held = [("workflow ml/gone", "s3://x/gone/"), ("workflow ml/done", "s3://x/done/"),
            ("workflow ml/run", LABELS), ("workflow ml/run", train),
            ("workflow elsewhere/gone", "s3://x/other/")]  # not in the watched namespace
    fake.create(agent_node("me"))
    done = corpus_workflow(WF, name="done", namespace="ml")
    done["status"] = {"phase": "Succeeded"}
    fake.create(done)
    run = corpus_workflow(WF, name="run", namespace="ml")
    run["status"] = status("run", **{"fetch-labels": "Succeeded", "fetch-splits": "Pending"})
    fake.create(run)
    calls = Calls()
    agent = ag.Agent(ag.AgentConfig(node_name="me", namespace="ml"), dsm.ApiClusterView(api),
                     calls.warm, calls.release, held=held)
    group = ag.build_watchers(lambda: kw.ClientTransport(api), agent,
                              dataclasses.replace(FAST, namespace="ml")).start()
    try:
        got = calls.wait(4)
        assert sorted(zip(got, calls.sources[:len(got)], strict=True)) == sorted([
            (("release", "s3://x/gone/"), "workflow ml/gone"),
            (("release", "s3://x/done/"), "workflow ml/done"),
            (("release", LABELS), "workflow ml/run"),  # its only reader finished meanwhile
            (("warm", val), "workflow ml/run"),  # train is still pinned from before
        ])
        fake.patch("argoproj.io/v1alpha1", "Workflow", "run",
                   {"status": status("run", **{"fetch-labels": "Succeeded",
                                        "fetch-splits": "Succeeded"})}, namespace="ml")
        got = calls.wait(6)
        assert sorted(got[4:]) == [("release", train), ("release", val)]
        assert ("release", "s3://x/other/") not in got
    finally:
        group.stop()


def test_worker_hands_its_recorded_pins_to_the_agent_at_start(tmp_path):
    from prefetchd.k8s import worker as wk

    records = wk.PinRecords(str(tmp_path))
    records.add("o1", {"dataset": LABELS, "uri": LABELS, "source": "workflow ml/a",
                       "step": "s", "warmed_at": 1.0, "expires_at": None})
    records.add("o2", {"dataset": "s3://b/p/", "uri": "s3://b/p/", "source": "pod ml/p",
                       "step": "p", "warmed_at": 2.0, "expires_at": 3.0})  # expired: still held
    worker = wk.WarmWorker(wk.WorkerConfig(cache_dir=str(tmp_path), node_name="me"))
    assert worker.held() == [("pod ml/p", "s3://b/p/"), ("workflow ml/a", LABELS)]


def poll(what: str, fn, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while not (value := fn()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)
    return value


def test_node_label_change_makes_a_pending_workflow_warm_here(fake, api):
    """Placement is re-run for pending steps when a Node changes, not only on workflow events."""
    fake.create(agent_node("me"))
    calls = Calls()
    agent = ag.Agent(ag.AgentConfig(node_name="me", replan_delay=0.05),
                     dsm.ApiClusterView(api), calls.warm, calls.release)
    group = ag.build_watchers(lambda: kw.ClientTransport(api), agent, FAST).start()
    try:
        wf = corpus_workflow(WF, namespace="ml")
        wf["spec"]["nodeSelector"] = {"pool": "gpu"}
        fake.create(wf)
        # a later workflow "me" is eligible for: once its warms come, the first one (earlier
        # on the same watch) has been analysed and placed too, and must have warmed nothing
        fake.create(corpus_workflow(WF, name="later", namespace="ml"))
        calls.wait(3)
        assert set(calls.sources) == {"workflow ml/later"}, calls.items  # "me" lacks the label
        fake.delete("argoproj.io/v1alpha1", "Workflow", "later", namespace="ml")
        calls.wait(6)  # its releases
        del calls.items[:], calls.sources[:]
        fake.patch("v1", "Node", "me", {"metadata": {"labels": {"pool": "gpu"}}})
        got = calls.wait(3)
        assert sorted(got) == sorted(("warm", d) for d in SPLITS | {LABELS})
    finally:
        group.stop()
        agent.close()


def test_node_changes_are_debounced_and_a_removed_node_hands_its_datasets_over(api):
    calls = Calls()
    agent = ag.Agent(ag.AgentConfig(node_name="me", replan_delay=0.3),
                     dsm.ApiClusterView(api), calls.warm, calls.release)
    # This agent's passes, counted by its own hook: a log record would also count the
    # timers of other tests' agents firing meanwhile (CI saw "2 == 1" under load).
    passes: list[int] = []
    agent.replan_hooks.append(lambda: passes.append(1))
    nodes = [agent_node("me"), *(agent_node(f"n{i}") for i in range(8))]
    for n in nodes:
        agent.on_node("ADDED", n)
    # The nodes' arrival arms a pass of its own; let it finish before the burst under test
    # (on a loaded machine the workflow's analysis below can outlast the 0.3 s delay).
    poll("the nodes' own pass", lambda: passes)
    passes.clear()
    wf = corpus_workflow(WF, namespace="ml")
    agent.on_workflow("ADDED", {**wf, "metadata": {**wf["metadata"], "uid": "u1"}})
    infos = [pl.NodeInfo.from_node(n) for n in nodes]
    mine = {d for d in SPLITS | {LABELS} if pl.choose(d, infos, None, 1) == ["me"]}
    assert {d for _, d in calls.items} == mine != SPLITS | {LABELS}
    # every other node leaves at once: one re-placement pass, and "me" takes over the rest
    for n in nodes[1:]:
        agent.on_node("DELETED", n)
    got = calls.wait(3)
    assert sorted(d for _, d in got) == sorted(SPLITS | {LABELS})
    poll("the pass", lambda: passes)
    time.sleep(0.5)  # longer than the delay: a second pass would have run by now
    assert len(passes) == 1
    agent.close()


def test_step_level_constraints_decide_that_steps_datasets(api):
    """A template's own nodeSelector / GPU request keeps its step's data off nodes it cannot
    run on, while the other steps' data (workflow-level constraints only) is warmed here."""
    calls = Calls()
    agent = ag.Agent(ag.AgentConfig(node_name="me"), dsm.ApiClusterView(api), calls.warm)
    agent.on_node("ADDED", agent_node("me"))
    wf = corpus_workflow(WF, namespace="ml")
    wf["metadata"]["uid"] = "u1"
    tmpl = {t["name"]: t for t in wf["spec"]["templates"]}
    tmpl["fetch-labels"]["nodeSelector"] = {"pool": "gpu"}
    tmpl["fetch-split"]["container"]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    agent.on_workflow("ADDED", wf)
    assert calls.items == []  # "me" has neither the label nor a GPU
    gpu = agent_node("me")
    gpu["metadata"]["labels"] = {"pool": "gpu"}
    gpu["status"] = {"allocatable": {"nvidia.com/gpu": "2"}}
    agent2 = ag.Agent(ag.AgentConfig(node_name="me"), dsm.ApiClusterView(api), calls.warm)
    agent2.on_node("ADDED", gpu)
    agent2.on_workflow("ADDED", wf)
    assert sorted(d for _, d in calls.items) == sorted(SPLITS | {LABELS})


def test_step_constraints_fall_back_to_the_workflow_and_ignore_templated_values():
    from prefetchd.pipeline import _model

    wf_spec = {"nodeSelector": {"pool": "cpu"},
               "tolerations": [{"key": "spot", "operator": "Exists"}]}
    wf_pod = pl.PodRequirements.from_pod_spec(wf_spec)
    step = _model.Step(id="s", kind="container", scheduling={
        "nodeSelector": {"pool": "{{inputs.parameters.pool}}"},
        "containers": [{"resources": {"requests": {"cpu": "2"}}}]})
    got = ag.step_requirements(step, wf_spec, wf_pod)
    assert dict(got.node_selector) == {"pool": "cpu"}  # templated: the workflow's
    assert got.tolerations == wf_pod.tolerations
    assert dict(got.requests) == {"cpu": 2}
    assert ag.step_requirements(_model.Step(id="t", kind="container"), wf_spec, wf_pod) is wf_pod
