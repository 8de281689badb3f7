"""The fake API server, driven by the real kubernetes client (CoreV1Api, CustomObjects, Watch)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import urllib3
from fake_apiserver import (
    ApiError,
    FakeApiServer,
    apply_json_patch,
    label_selector_matches,
    parse_label_selector,
)
from k8s_helpers import corpus_workflow, node
from kubernetes import client, watch

pytestmark = pytest.mark.k8s

ARGO = ("argoproj.io", "v1alpha1")


class Collector:
    """Runs a Watch stream in a thread and hands events over through a queue (no sleeps)."""

    def __init__(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        self.watch = watch.Watch()
        self.events: queue.Queue[Any] = queue.Queue()
        self.error: BaseException | None = None

        def run() -> None:
            try:
                for ev in self.watch.stream(func, *args, **kwargs):
                    self.events.put(ev)
            except BaseException as exc:  # handed to the test thread
                self.error = exc
            finally:
                self.events.put(None)

        self.thread = threading.Thread(target=run, name="test-watch", daemon=True)
        self.thread.start()

    def next(self, timeout: float = 5.0) -> Any:
        ev = self.events.get(timeout=timeout)
        if ev is None:
            raise AssertionError(f"stream ended ({self.error!r})")
        return ev

    def close(self) -> None:
        self.watch.stop()
        self.thread.join(timeout=10)
        assert not self.thread.is_alive()


@pytest.fixture()
def collectors() -> Iterator[list[Collector]]:
    made: list[Collector] = []
    yield made
    for c in made:
        c.close()


def test_list_then_watch_from_resource_version(fake, api, collectors):
    core = client.CoreV1Api(api)
    fake.create(node("n1", {"zone": "a"}))
    listed = core.list_node()
    assert [n.metadata.name for n in listed.items] == ["n1"]
    rv = listed.metadata.resource_version
    c = Collector(core.list_node, resource_version=rv, timeout_seconds=30)
    collectors.append(c)
    fake.wait_for_watchers(1)
    fake.create(node("n2"))
    core.patch_node("n1", {"metadata": {"labels": {"zone": "b"}}},
                    _content_type="application/merge-patch+json")
    core.delete_node("n2")
    seen = [c.next() for _ in range(3)]
    assert [(e["type"], e["object"].metadata.name) for e in seen] == [
        ("ADDED", "n2"), ("MODIFIED", "n1"), ("DELETED", "n2")]
    assert seen[1]["object"].metadata.labels == {"zone": "b"}
    rvs = [int(e["object"].metadata.resource_version) for e in seen]
    assert rvs == sorted(rvs) and rvs[0] > int(rv)
    assert c.watch.resource_version == str(rvs[-1])


def test_watch_without_resource_version_starts_with_current_state(fake, api, collectors):
    core = client.CoreV1Api(api)
    fake.create(node("a"))
    fake.create(node("b"))
    c = Collector(core.list_node, timeout_seconds=30)
    collectors.append(c)
    assert {(e["type"], e["object"].metadata.name) for e in (c.next(), c.next())} == {
        ("ADDED", "a"), ("ADDED", "b")}


def test_custom_objects_namespaced_and_cluster_wide(fake, api):
    co = client.CustomObjectsApi(api)
    wf = corpus_workflow("pipelines/argo_dag_s3_artifacts.yaml", namespace="team-a")
    fake.create(wf)
    fake.create(corpus_workflow("kfp2-argo/wf_pvc_mount.yaml", namespace="team-b"))
    only_a = co.list_namespaced_custom_object(*ARGO, "team-a", "workflows")
    assert [i["metadata"]["name"] for i in only_a["items"]] == [wf["metadata"]["name"]]
    assert only_a["kind"] == "WorkflowList" and only_a["metadata"]["resourceVersion"]
    everything = co.list_cluster_custom_object(*ARGO, "workflows")
    assert {i["metadata"]["namespace"] for i in everything["items"]} == {"team-a", "team-b"}
    got = co.get_namespaced_custom_object(*ARGO, "team-a", "workflows", wf["metadata"]["name"])
    assert got["spec"] == wf["spec"] and got["metadata"]["uid"]
    cwt = {"apiVersion": "argoproj.io/v1alpha1", "kind": "ClusterWorkflowTemplate",
           "metadata": {"name": "shared"}, "spec": {"templates": []}}
    co.create_cluster_custom_object(*ARGO, "clusterworkflowtemplates", cwt)
    listed = co.list_cluster_custom_object(*ARGO, "clusterworkflowtemplates")
    assert [i["metadata"]["name"] for i in listed["items"]] == ["shared"]
    assert "namespace" not in listed["items"][0]["metadata"]


def test_too_old_resource_version_is_410_gone(api):
    with FakeApiServer(history=3) as fake:
        cfg = client.Configuration()
        cfg.host = fake.url
        with client.ApiClient(cfg) as api_client:
            core = client.CoreV1Api(api_client)
            old_rv = core.list_node().metadata.resource_version
            for i in range(5):
                fake.create(node(f"n{i}"))
            w = watch.Watch()
            with pytest.raises(client.ApiException) as err:
                # timeout_seconds disables the client's own one-shot retry after 410
                list(w.stream(core.list_node, resource_version=old_rv, timeout_seconds=5))
            assert err.value.status == 410
            # the newest events are still in the history: no 410 from there
            recent = str(int(fake.resource_version) - 2)
            evs = list(w.stream(core.list_node, resource_version=recent, timeout_seconds=1))
            assert [e["object"].metadata.name for e in evs] == ["n3", "n4"]


def test_compact_makes_every_older_version_gone(fake, api):
    co = client.CustomObjectsApi(api)
    rv = co.list_cluster_custom_object(*ARGO, "workflows")["metadata"]["resourceVersion"]
    fake.create(corpus_workflow("pipelines/argo_dag_s3_artifacts.yaml"))
    fake.compact()
    with pytest.raises(client.ApiException) as err:
        list(watch.Watch().stream(co.list_cluster_custom_object, *ARGO, "workflows",
                                  resource_version=rv, timeout_seconds=5))
    assert err.value.status == 410


def test_bookmarks_only_when_asked(fake, api, collectors):
    core = client.CoreV1Api(api)
    rv = core.list_node().metadata.resource_version
    plain = Collector(core.list_node, resource_version=rv, timeout_seconds=30)
    marked = Collector(core.list_node, resource_version=rv, timeout_seconds=30,
                       allow_watch_bookmarks=True)
    collectors.extend([plain, marked])
    fake.wait_for_watchers(2)
    fake.create(node("x"))
    fake.send_bookmarks()
    assert marked.next()["type"] == "ADDED"
    bm = marked.next()
    assert bm["type"] == "BOOKMARK"
    assert bm["raw_object"]["metadata"]["resourceVersion"] == fake.resource_version
    assert marked.watch.resource_version == fake.resource_version
    fake.create(node("y"))
    assert plain.next()["object"].metadata.name == "x"
    assert plain.next()["object"].metadata.name == "y"  # no bookmark in between


def test_periodic_bookmarks():
    with FakeApiServer(bookmark_interval=0.05) as fake:
        cfg = client.Configuration()
        cfg.host = fake.url
        with client.ApiClient(cfg) as api_client:
            core = client.CoreV1Api(api_client)
            c = Collector(core.list_node, resource_version=fake.resource_version,
                          timeout_seconds=30, allow_watch_bookmarks=True)
            try:
                assert c.next()["type"] == "BOOKMARK"
            finally:
                c.close()


def test_label_and_field_selectors(fake, api):
    core = client.CoreV1Api(api)
    fake.create(node("gpu1", {"gpu": "a100", "pool": "train"}))
    fake.create(node("gpu2", {"gpu": "h100"}))
    fake.create(node("cpu1", {"pool": "train"}))
    names = lambda sel: [n.metadata.name for n in core.list_node(label_selector=sel).items]  # noqa: E731
    assert names("gpu in (a100,h100),pool") == ["gpu1"]
    assert names("!gpu") == ["cpu1"]
    assert names("pool=train,gpu!=a100") == ["cpu1"]
    assert names("gpu notin (a100)") == ["cpu1", "gpu2"]
    assert names("") == ["cpu1", "gpu1", "gpu2"]
    assert [n.metadata.name for n in core.list_node(field_selector="metadata.name=gpu2").items] \
        == ["gpu2"]
    with pytest.raises(client.ApiException) as err:
        core.list_node(field_selector="spec.podCIDR=x")
    assert err.value.status == 400



def test_object_leaving_a_watch_selector_is_deleted(fake, api, collectors):
    core = client.CoreV1Api(api)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"},
           "spec": {"containers": [{"name": "c", "image": "busybox"}]},
           "status": {"phase": "Pending"}}
    rv = fake.resource_version
    c = Collector(core.list_pod_for_all_namespaces, field_selector="status.phase=Pending",
                  resource_version=rv, timeout_seconds=30)
    other_ns = Collector(core.list_namespaced_pod, "elsewhere", resource_version=rv,
                         timeout_seconds=30)
    collectors.extend([c, other_ns])
    fake.wait_for_watchers(2)
    fake.create(pod)
    fake.patch("v1", "Pod", "p", {"status": {"phase": "Running"}}, namespace="ns")
    fake.patch("v1", "Pod", "p", {"status": {"phase": "Pending"}}, namespace="ns")
    assert [c.next()["type"] for _ in range(3)] == ["ADDED", "DELETED", "ADDED"]
    assert other_ns.events.empty()


def test_patch_node_labels(fake, api):
    core = client.CoreV1Api(api)
    fake.create(node("n", {"keep": "1", "drop": "x"}))
    core.patch_node("n", {"metadata": {"labels": {"drop": None, "new": "y"}}},
                    _content_type="application/strategic-merge-patch+json")
    assert core.read_node("n").metadata.labels == {"keep": "1", "new": "y"}
    core.patch_node("n", [{"op": "add", "path": "/metadata/labels/j", "value": "p"}],
                    _content_type="application/json-patch+json")
    assert core.read_node("n").metadata.labels == {"keep": "1", "new": "y", "j": "p"}
    # like the real server: a JSON patch must be a list (the client itself switches a dict
    # body to a strategic merge patch, so ask the fake directly)
    with pytest.raises(ApiError) as err:
        fake.patch("v1", "Node", "n", {"metadata": {"labels": {"z": "1"}}},
                   content_type="application/json-patch+json")
    assert err.value.code == 400


def test_conflicts_and_not_found(fake, api):
    core = client.CoreV1Api(api)
    created = core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name="n")))
    with pytest.raises(client.ApiException) as err:
        core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name="n")))
    assert err.value.status == 409
    stale = created
    core.patch_node("n", {"metadata": {"labels": {"a": "b"}}},
                    _content_type="application/merge-patch+json")
    with pytest.raises(client.ApiException) as err:
        core.replace_node("n", stale)
    assert err.value.status == 409
    with pytest.raises(client.ApiException) as err:
        core.read_node("missing")
    assert err.value.status == 404


def test_injected_faults_then_recovery(fake, api):
    core = client.CoreV1Api(api)
    fake.fail_next(2, code=503, path_contains="/nodes")
    fake.fail_next(1, code=403, path_contains="/pods")
    for code in (503, 503):
        with pytest.raises(client.ApiException) as err:
            core.list_node()
        assert err.value.status == code
    with pytest.raises(client.ApiException) as err:
        core.list_pod_for_all_namespaces()
    assert err.value.status == 403
    assert core.list_node().items == []


def test_dropped_watch_and_restart_keep_state(fake, api, collectors):
    core = client.CoreV1Api(api)
    fake.create(node("n"))
    rv = core.list_node().metadata.resource_version
    c = Collector(core.list_node, resource_version=rv, timeout_seconds=30)
    collectors.append(c)
    fake.wait_for_watchers(1)
    fake.drop_watches()
    assert c.events.get(timeout=5) is None  # the stream broke
    assert isinstance(c.error, urllib3.exceptions.HTTPError)
    fake.restart()
    assert [n.metadata.name for n in core.list_node().items] == ["n"]
    assert core.list_node().metadata.resource_version == rv
    # history survives a plain restart ...
    fake.create(node("m"))
    evs = list(watch.Watch().stream(core.list_node, resource_version=rv, timeout_seconds=1))
    assert [e["object"].metadata.name for e in evs] == ["m"]
    # ... but not one that loses the watch cache
    fake.restart(lose_history=True)
    with pytest.raises(client.ApiException) as err:
        list(watch.Watch().stream(core.list_node, resource_version=rv, timeout_seconds=5))
    assert err.value.status == 410


def test_watch_ends_at_timeout_seconds(fake, api):
    core = client.CoreV1Api(api)
    assert list(watch.Watch().stream(core.list_node, resource_version=fake.resource_version,
                                     timeout_seconds=1)) == []


def test_selector_parser_and_json_patch_units():
    reqs = parse_label_selector("a in (x, y),b!=c,!d,e")
    assert label_selector_matches(reqs, {"a": "x", "e": ""})
    assert not label_selector_matches(reqs, {"a": "x", "e": "", "d": "1"})
    assert not label_selector_matches(reqs, {"a": "z", "e": ""})
    with pytest.raises(ValueError):
        parse_label_selector("a in (x")
    doc = {"spec": {"items": [1, 2]}}
    out = apply_json_patch(doc, [{"op": "add", "path": "/spec/items/-", "value": 3},
                                 {"op": "add", "path": "/spec/new~1key", "value": {}}])
    assert out == {"spec": {"items": [1, 2, 3], "new/key": {}}} and doc["spec"]["items"] == [1, 2]
    with pytest.raises(ValueError):
        apply_json_patch(doc, [{"op": "replace", "path": "/spec/missing", "value": 1}])
