"""The kopf-shaped watch loop against the fake API server, through the real kubernetes client."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fake_apiserver import FakeApiServer
from k8s_helpers import corpus_workflow, node

from prefetchd.k8s import watch as kw

pytestmark = pytest.mark.k8s

FAST = kw.WatchOptions(backoff_initial=0.01, backoff_max=0.05, timeout_seconds=30)


class Recorder:
    """A handler that records calls and lets the test wait for a condition on them."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []
        self.cond = threading.Condition()

    def __call__(self, etype: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        with self.cond:
            self.calls.append((etype, meta.get("name", ""), meta.get("resourceVersion", "")))
            self.cond.notify_all()

    def wait(self, pred: Callable[[list[tuple[str, str, str]]], bool], timeout: float = 10) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: pred(self.calls), timeout), self.calls

    def names(self, etype: str) -> list[str]:
        with self.cond:
            return [n for t, n, _ in self.calls if t == etype]


@pytest.fixture()
def run_watcher(api) -> Iterator[Callable[..., tuple[kw.Watcher, Recorder]]]:
    groups: list[kw.WatchGroup] = []

    def start(resource: kw.Resource, options: kw.WatchOptions = FAST):
        rec = Recorder()
        watcher = kw.Watcher(kw.ClientTransport(api), resource, rec, options)
        groups.append(kw.WatchGroup([watcher]).start())
        return watcher, rec

    yield start
    for g in groups:
        g.stop()
        assert all(not t.is_alive() for t in g._threads)


def test_list_then_watch_hands_on_each_change_once(fake, run_watcher):
    fake.create(node("a"))
    watcher, rec = run_watcher(kw.NODES)
    rec.wait(lambda c: ("ADDED", "a") in [(t, n) for t, n, _ in c])
    fake.wait_for_watchers(1)
    fake.create(node("b"))
    fake.patch("v1", "Node", "a", {"metadata": {"labels": {"x": "y"}}})
    fake.delete("v1", "Node", "b")
    rec.wait(lambda c: len(c) == 4)
    assert [(t, n) for t, n, _ in rec.calls] == [
        ("ADDED", "a"), ("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "b")]
    stats = watcher.statistics()
    assert stats.lists == 1 and stats.errors == 0 and stats.duplicates_skipped == 0


def test_410_gone_relists_and_hands_on_only_what_changed(fake, run_watcher):
    for name in ("keep", "change", "remove"):
        fake.create(node(name))
    watcher, rec = run_watcher(kw.NODES)
    rec.wait(lambda c: len(c) == 3)
    fake.wait_for_watchers(1)
    # While the watch is cut, the world changes and the server forgets its history.
    fake.stop()
    fake.patch("v1", "Node", "change", {"metadata": {"labels": {"v": "2"}}})
    fake.delete("v1", "Node", "remove")
    fake.create(node("new"))
    fake.compact()
    fake.start()
    rec.wait(lambda c: len(c) == 6)
    assert sorted((t, n) for t, n, _ in rec.calls[3:]) == [
        ("ADDED", "new"), ("DELETED", "remove"), ("MODIFIED", "change")]
    stats = watcher.statistics()
    assert stats.relists_after_gone == 1 and stats.lists == 2
    assert stats.duplicates_skipped == 1  # "keep" came back in the listing, unchanged
    # and it keeps watching after the re-list
    fake.wait_for_watchers(1)
    fake.create(node("later"))
    rec.wait(lambda c: ("ADDED", "later") in [(t, n) for t, n, _ in c])
    assert len(rec.calls) == 7


def test_reconnects_after_server_restart_without_doubling(fake, run_watcher, log_police):
    log_police.allow(r"watch of nodes: connection problem")
    fake.create(node("a"))
    watcher, rec = run_watcher(kw.NODES)
    rec.wait(lambda c: len(c) == 1)
    fake.wait_for_watchers(1)
    fake.stop()
    fake.create(node("b"))  # written while the server is down: must arrive exactly once
    fake.start()
    rec.wait(lambda c: len(c) >= 2)
    fake.wait_for_watchers(1)
    fake.create(node("c"))
    rec.wait(lambda c: len(c) >= 3)
    assert [(t, n) for t, n, _ in rec.calls] == [("ADDED", "a"), ("ADDED", "b"), ("ADDED", "c")]
    assert watcher.statistics().lists == 1  # resumed from its resourceVersion, no re-list


def test_dropped_watch_resumes_from_last_version(fake, run_watcher, log_police):
    log_police.allow(r"watch of nodes: connection problem")
    watcher, rec = run_watcher(kw.NODES)
    fake.wait_for_watchers(1)
    fake.create(node("a"))
    rec.wait(lambda c: len(c) == 1)
    fake.drop_watches()
    fake.create(node("b"))
    rec.wait(lambda c: len(c) == 2)
    assert [n for _, n, _ in rec.calls] == ["a", "b"]
    assert watcher.statistics().errors == 1


def test_api_errors_back_off_and_recover(fake, run_watcher, log_police):
    log_police.allow(r"watch of workflows.argoproj.io: API error HTTP (500|403)")
    fake.fail_next(2, code=500, path_contains="/workflows")
    fake.fail_next(1, code=403, path_contains="/workflows")
    fake.create(corpus_workflow("pipelines/argo_dag_s3_artifacts.yaml", namespace="ml"))
    watcher, rec = run_watcher(kw.WORKFLOWS)
    rec.wait(lambda c: len(c) == 1)
    assert watcher.statistics().errors == 3


def test_namespace_and_selector_scoping(fake, run_watcher):
    opts = kw.WatchOptions(namespace="ml", backoff_initial=0.01, timeout_seconds=30,
                           field_selector="status.phase=Pending")
    watcher, rec = run_watcher(kw.PODS, opts)
    fake.wait_for_watchers(1)

    def pod(name: str, ns: str) -> dict:
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
                "spec": {"containers": []}, "status": {"phase": "Pending"}}

    fake.create(pod("other", "elsewhere"))
    fake.create(pod("mine", "ml"))
    fake.patch("v1", "Pod", "mine", {"status": {"phase": "Running"}}, namespace="ml")
    rec.wait(lambda c: len(c) == 2)
    assert [(t, n) for t, n, _ in rec.calls] == [("ADDED", "mine"), ("DELETED", "mine")]


class _SeenTransport(kw.ClientTransport):
    """The real client transport, noting each watch's starting version and what it got."""

    def __init__(self, api) -> None:
        super().__init__(api)
        self.watched_from: list[str] = []
        self.bookmarks: list[str] = []

    def watch(self, resource, options, resource_version, stop):
        self.watched_from.append(resource_version)
        for event in super().watch(resource, options, resource_version, stop):
            if event.get("type") == "BOOKMARK":
                self.bookmarks.append(event["object"]["metadata"]["resourceVersion"])
            yield event


def _poll(cond: Callable[[], bool], what: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_bookmarks_advance_the_version_without_handler_calls(fake, api):
    """A BOOKMARK moves the watch's position: after the history before it is compacted
    and the stream dropped, the watch resumes from the bookmark's version (no 410, no
    second listing); without the bookmark it would have resumed from the listing's."""
    fake.create(node("n0"))
    transport = _SeenTransport(api)
    rec = Recorder()
    watcher = kw.Watcher(transport, kw.NODES, rec, FAST)
    group = kw.WatchGroup([watcher]).start()
    try:
        fake.wait_for_watchers(1)
        rec.wait(lambda c: len(c) == 1)
        listed_at = transport.watched_from[0]
        # writes the node watch does not see move the global resourceVersion on
        for i in range(3):
            fake.create({"apiVersion": "v1", "kind": "Pod",
                         "metadata": {"name": f"p{i}", "namespace": "ml"},
                         "spec": {"containers": []}})
        fake.send_bookmarks()
        _poll(lambda: transport.bookmarks, "no BOOKMARK arrived")
        bookmark = transport.bookmarks[-1]
        assert int(bookmark) > int(listed_at)
        fake.compact()  # every version before the bookmark's is Gone now
        fake.drop_watches()
        _poll(lambda: len(transport.watched_from) >= 2, "the watch did not resume")
        fake.create(node("n1"))
        rec.wait(lambda c: len(c) == 2)
    finally:
        group.stop()
    assert transport.watched_from[1] == bookmark
    stats = watcher.statistics()
    assert stats.lists == 1 and stats.relists_after_gone == 0
    assert [(t, n) for t, n, _ in rec.calls] == [("ADDED", "n0"), ("ADDED", "n1")]


def test_iterations_seam_bounds_the_cycles():
    """Each 410 ends one continuous_watch cycle; _iterations=2 ends the infinite loop."""

    class AlwaysGone(_NoTransport):
        lists = 0

        def list_pages(self, resource, options):
            self.lists += 1
            yield str(self.lists), [{"metadata": {"uid": "a", "name": "a",
                                                  "resourceVersion": "1"}}]

        def watch(self, resource, options, resource_version, stop):
            yield {"type": "ERROR", "object": {"code": 410, "message": "too old"}}

    transport = AlwaysGone()
    rec = Recorder()
    watcher = kw.Watcher(transport, kw.NODES, rec, FAST)
    watcher.run(_iterations=2)
    stats = watcher.statistics()
    assert transport.lists == 2 and stats.relists_after_gone == 2
    assert stats.duplicates_skipped == 1 and rec.calls == [("ADDED", "a", "1")]


def test_unknown_event_types_are_logged_once_and_skipped(log_police):
    log_police.allow(r"skipping unknown event type 'WEIRD'")
    rec = Recorder()
    watcher = kw.Watcher(_NoTransport(), kw.NODES, rec)
    for _ in range(3):
        watcher.dispatch({"type": "WEIRD", "object": {}})
    watcher.dispatch({"type": "ADDED", "object": {"metadata": {"uid": "u", "name": "n",
                                                               "resourceVersion": "5"}}})
    watcher.dispatch({"type": "MODIFIED", "object": {"metadata": {"uid": "u", "name": "n",
                                                                  "resourceVersion": "5"}}})
    assert rec.calls == [("ADDED", "n", "5")]
    stats = watcher.statistics()
    assert stats.unknown_skipped == 3 and stats.duplicates_skipped == 1


def test_handler_failure_does_not_stop_the_watch(log_police):
    log_police.allow(r"handler for nodes None/bad failed", level=40)
    seen: list[str] = []

    def handler(etype: str, obj: dict[str, Any]) -> None:
        if obj["metadata"]["name"] == "bad":
            raise RuntimeError("boom")
        seen.append(obj["metadata"]["name"])

    watcher = kw.Watcher(_NoTransport(), kw.NODES, handler)
    for i, name in enumerate(("bad", "good")):
        watcher.dispatch({"type": "ADDED", "object": {"metadata": {
            "uid": name, "name": name, "resourceVersion": str(i)}}})
    assert seen == ["good"]


def test_seen_cache_is_bounded():
    cache = kw.SeenCache(3)
    for i in range(10):
        cache.remember(f"u{i}", "1", "ns", f"n{i}")
    assert len(cache) == 3 and cache.uids() == ["u7", "u8", "u9"]


def test_paginated_listing_uses_the_first_page_version():
    class Paged(_NoTransport):
        def list_pages(self, resource, options):
            yield "10", [{"metadata": {"uid": "a", "name": "a", "resourceVersion": "3"}}]
            yield "11", [{"metadata": {"uid": "b", "name": "b", "resourceVersion": "4"}}]

        def watch(self, resource, options, resource_version, stop):
            self.watched_from = resource_version
            yield {"type": "ERROR", "object": {"code": 410, "message": "gone"}}

    transport = Paged()
    events = list(kw.continuous_watch(transport, kw.NODES, FAST, threading.Event()))
    assert [e["type"] for e in events] == ["RELIST_BEGIN", "LISTED", "LISTED", "RELIST_END"]
    assert events[-1]["resourceVersion"] == "10" and transport.watched_from == "10"


class _NoTransport:
    def list_pages(self, resource, options):
        return iter(())

    def watch(self, resource, options, resource_version, stop):
        return iter(())

    def abort(self) -> None:
        pass


def test_stop_interrupts_a_blocked_stream(fake, api):
    watcher = kw.Watcher(kw.ClientTransport(api), kw.NODES, Recorder(), FAST)
    group = kw.WatchGroup([watcher]).start()
    fake.wait_for_watchers(1)
    group.stop(timeout=5)
    assert not group._threads


def test_history_overflow_while_disconnected_forces_one_relist(api, log_police):
    """30 writes while the watcher is cut off, history of 5: 410, re-list, each object once."""
    log_police.allow(r"watch of nodes: connection problem")
    from kubernetes import client

    with FakeApiServer(history=5) as small:
        cfg = client.Configuration()
        cfg.host = small.url
        with client.ApiClient(cfg) as api_client:
            rec = Recorder()
            watcher = kw.Watcher(kw.ClientTransport(api_client), kw.NODES, rec, FAST)
            group = kw.WatchGroup([watcher]).start()
            try:
                small.wait_for_watchers(1)
                small.create(node("first"))
                rec.wait(lambda c: len(c) == 1)
                small.stop()
                for i in range(30):
                    small.create(node(f"n{i:02d}"))
                small.start()
                rec.wait(lambda c: len(c) == 31)
            finally:
                group.stop()
    names = [n for _, n, _ in rec.calls]
    assert len(names) == len(set(names)) == 31
    stats = watcher.statistics()
    assert stats.relists_after_gone == 1 and stats.duplicates_skipped == 1


def test_a_kind_the_cluster_does_not_serve_is_said_once_not_warned_for_ever(caplog):
    """A blind first-hour test: without Argo installed, the agent warned for each Argo
    watch at every backoff (18 lines in 90 s), each broken over two lines by the API
    server's '404 page not found\\n'. Now one INFO line per watch, as for the other
    optional kinds; later tries at DEBUG; every record one line."""

    class NotServed(_NoTransport):
        def list_pages(self, resource, options):
            raise kw.ApiFailure(404, "404 page not found\n")

    watcher = kw.Watcher(NotServed(), kw.WORKFLOWS, Recorder(), FAST)
    watcher.run(_iterations=4)
    mine = [r for r in caplog.records if r.name == "prefetchd.k8s.watch"]
    assert watcher.statistics().errors == 4
    assert not [r for r in mine if r.levelno >= logging.WARNING]
    said = [r for r in mine if r.levelno == logging.INFO]
    assert len(said) == 1 and "not served by the API server" in said[0].getMessage()
    assert all("\n" not in r.getMessage() for r in mine)
