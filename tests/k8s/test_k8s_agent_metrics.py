"""Per-step metrics: lead time either way round, node-wide hit ratio over a step's window."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from prefetchd.k8s import agent as ag
from prefetchd.k8s import metrics as mm

pytestmark = pytest.mark.k8s

SRC = "workflow ml/wf"


def wf(step: str, started: str | None, finished: str | None = None, host: str = "n1") -> dict:
    entry = {"displayName": step, "phase": "Running", "hostNodeName": host,
             "startedAt": started, "finishedAt": finished}
    return {"status": {"nodes": {"x": entry}}}


def stats(**counters: int) -> SimpleNamespace:
    return SimpleNamespace(used_bytes=1, limit_bytes=10, counters=counters)


def res(nbytes: int, skipped: int = 0) -> SimpleNamespace:
    return SimpleNamespace(bytes=nbytes, skipped=skipped, skipped_bytes=0,
                           transferred=nbytes, failed=[])


def test_a_warm_the_cache_had_no_room_for_is_not_counted_done() -> None:
    """A blind test of the agent (round 2): a partial warm counted as done."""
    m = mm.AgentMetrics("n1")
    m.warm_done(ag.WarmRequest("s3://b/d/", "job ml/j", "main", 0), res(10, skipped=2), 0, 1)
    assert value(m, "prefetchd_warms_total", outcome="no_room") == 1
    assert value(m, "prefetchd_warms_total", outcome="done") in (None, 0)


def value(m: mm.AgentMetrics, name: str, **labels: str) -> float | None:
    return m.registry.get_sample_value(name, labels)


def test_lead_time_is_negative_when_the_step_started_before_the_warm_finished():
    m = mm.AgentMetrics("n1")
    req = ag.WarmRequest("s3://b/d/", SRC, "train", 1)
    t0 = 1_700_000_000.0  # 2023-11-14T22:13:20Z
    m.observe_workflow(SRC, wf("train", "2023-11-14T22:13:20Z"))  # started before any warm
    m.warm_done(req, res(100), t0 - 5, t0 + 7)
    assert value(m, "prefetchd_step_warm_lead_seconds", workflow="ml/wf", step="train") == -7
    # warm first, start later: positive
    req2 = ag.WarmRequest("s3://b/e/", SRC, "eval", 2)
    m.warm_done(req2, res(50), t0, t0 + 10)
    m.observe_workflow(SRC, wf("eval", "2023-11-14T22:14:00Z"))
    assert value(m, "prefetchd_step_warm_lead_seconds", workflow="ml/wf", step="eval") == 30
    assert value(m, "prefetchd_step_warmed_bytes", workflow="ml/wf", step="train") == 100


def test_step_hit_ratio_is_the_node_wide_delta_over_the_step_on_this_node():
    m = mm.AgentMetrics("n1")
    m.node_stats(stats(ram_hits=100, disk_hits=0, disk_misses=100))
    m.observe_workflow(SRC, wf("train", "2023-11-14T22:13:20Z"))
    m.node_stats(stats(ram_hits=130, disk_hits=60, disk_misses=110))  # +90 hits, +10 misses
    m.observe_workflow(SRC, wf("train", "2023-11-14T22:13:20Z", "2023-11-14T22:20:00Z"))
    assert value(m, "prefetchd_step_node_cache_hit_ratio", workflow="ml/wf",
                 step="train") == pytest.approx(0.9)
    assert value(m, "prefetchd_node_cache_hit_ratio") == pytest.approx(190 / 300)
    # a step on another node we did not warm for gets no series
    m.observe_workflow(SRC, wf("other", "2023-11-14T22:13:20Z", "2023-11-14T22:20:00Z", "n9"))
    assert value(m, "prefetchd_step_node_cache_hit_ratio", workflow="ml/wf",
                 step="other") is None


def test_per_step_series_are_bounded():
    m = mm.AgentMetrics("n1", max_steps=3)
    for i in range(10):
        m.warm_done(ag.WarmRequest("s3://b/d/", SRC, f"s{i}", 0), res(1), 0.0, 1.0)
    kept = [s for s in m.warmed.collect()[0].samples]
    assert sorted(s.labels["step"] for s in kept) == ["s7", "s8", "s9"]


def test_mount_hit_ratio_per_dataset_and_per_step():
    m = mm.AgentMetrics("n1")
    m.warm_done(ag.WarmRequest("s3://b/ds/train/", SRC, "train", 0), res(10), 0.0, 1.0)
    m.mount_stats({"s3://b/ds/": {"ram_hits": 10, "disk_misses": 10},
                   "s3://b/other/": {"disk_misses": 50}})
    assert value(m, "prefetchd_mount_cache_hit_ratio", dataset="s3://b/ds/") == 0.5
    m.observe_workflow(SRC, wf("train", "2023-11-14T22:13:20Z"))
    m.mount_stats({"s3://b/ds/": {"ram_hits": 30, "disk_hits": 50, "disk_misses": 20},
                   "s3://b/other/": {"disk_misses": 500}})  # another dataset: not the step's
    m.observe_workflow(SRC, wf("train", "2023-11-14T22:13:20Z", "2023-11-14T22:20:00Z"))
    # the step's mount saw +70 hits and +10 misses while it ran
    assert value(m, "prefetchd_step_mount_cache_hit_ratio", workflow="ml/wf",
                 step="train") == pytest.approx(70 / 80)


def test_two_steps_sharing_a_task_name_have_their_own_lead_times():
    """A sub-DAG called twice: its two ``fetch`` tasks are the plan's ``a/fetch`` and
    ``b/fetch`` (the ids warms are asked for), their nodes ``wf.a.fetch`` and ``wf.b.fetch``
    both shown as "fetch". Before, both nodes went to a step "fetch" nobody warmed for."""
    m = mm.AgentMetrics("n1")
    t0 = 1_700_000_000.0  # 2023-11-14T22:13:20Z
    m.warm_done(ag.WarmRequest("s3://b/x/", SRC, "a/fetch", 0), res(10), t0 - 20, t0 - 10)
    m.warm_done(ag.WarmRequest("s3://b/y/", SRC, "b/fetch", 1), res(10), t0 - 20, t0 - 5)
    nodes = {f"wf-{i}": {"name": f"wf.{task}.fetch", "displayName": "fetch", "phase": "Running",
                         "hostNodeName": "n1", "startedAt": started}
             for i, (task, started) in enumerate([("a", "2023-11-14T22:13:20Z"),
                                                   ("b", "2023-11-14T22:13:40Z")])}
    m.observe_workflow(SRC, {"metadata": {"name": "wf"}, "status": {"nodes": nodes}})
    assert value(m, "prefetchd_step_warm_lead_seconds", workflow="ml/wf", step="a/fetch") == 10
    assert value(m, "prefetchd_step_warm_lead_seconds", workflow="ml/wf", step="b/fetch") == 25
