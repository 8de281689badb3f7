"""The Grafana dashboard queries only metrics, labels and counter names that exist in the code.

The metrics are taken from the code itself: the registries of
:class:`prefetchd.k8s.metrics.AgentMetrics` and :class:`fusecache.metrics.Metrics`, with the
names Prometheus gives each type (``_total`` for counters; ``_bucket``/``_sum``/``_count`` for
histograms). Every agent metric must be on the dashboard; ``node`` is the label the
ServiceMonitor adds.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import renders

from fusecache import nodecache
from fusecache.metrics import Metrics
from prefetchd.k8s.metrics import AgentMetrics

pytestmark = pytest.mark.k8s

DASHBOARD = renders.MANIFESTS / "monitoring" / "grafana-dashboard.json"
METRIC = re.compile(r"\b((?:prefetchd|fusecache)_[a-z0-9_]+)\b")
ADDED_LABELS = {"node"}  # the ServiceMonitor's relabeling (manifests/monitoring)


def exposed(registry: Any) -> dict[str, set[str]]:
    """Series name as scraped -> its label names, for every metric of a registry."""
    out: dict[str, set[str]] = {}
    for collector in registry._collector_to_names:  # noqa: SLF001
        name, labels, kind = collector._name, set(collector._labelnames), collector._type  # noqa: SLF001
        suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"],
                    "gauge": [""]}[kind]
        for suffix in suffixes:
            out[name + suffix] = labels | ({"le"} if suffix == "_bucket" else set())
    return out


AGENT = exposed(AgentMetrics("n1").registry)
KNOWN = {**AGENT, **exposed(Metrics().registry)}


def queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(expression, legend) of every panel target and templating query."""
    out = [(t["expr"], t.get("legendFormat", "")) for p in dashboard["panels"]
           for t in p.get("targets") or []]
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            out.append((var["query"]["query"] if isinstance(var["query"], dict)
                        else var["query"], ""))
    return out


def problems(dashboard: dict[str, Any]) -> list[str]:
    found = []
    for expr, legend in queries(dashboard):
        names = METRIC.findall(expr)
        if not names:
            found.append(f"{expr}: queries no metric")
        for name in names:
            if name not in KNOWN:
                found.append(f"{expr}: no metric {name} in the code")
                continue
            labels = KNOWN[name] | ADDED_LABELS
            for used in re.findall(r"([a-z_]+)\s*(?:=~|!~|!=|=)\s*\"", expr):
                if used not in labels:
                    found.append(f"{expr}: {name} has no label {used}")
            for used in re.findall(r"\{\{\s*([a-z_]+)\s*\}\}", legend):
                if used not in labels:
                    found.append(f"{legend}: {name} has no label {used}")
        for by in re.findall(r"by \(([^)]*)\)", expr):
            for used in (s.strip() for s in by.split(",")):
                if not any(used in KNOWN[n] | ADDED_LABELS for n in names if n in KNOWN):
                    found.append(f"{expr}: no label {used} to aggregate by")
        for values in re.findall(r"\bname\s*=~?\s*\"([^\"]*)\"", expr):
            for value in values.split("|"):
                if value not in nodecache.COUNTERS:
                    found.append(f"{expr}: {value} is not a node cache counter")
    return found


def test_every_query_names_metrics_labels_and_counters_that_exist():
    dashboard = json.loads(DASHBOARD.read_text())
    assert queries(dashboard)
    assert problems(dashboard) == []


def test_every_agent_metric_is_on_the_dashboard():
    used = {n for expr, _ in queries(json.loads(DASHBOARD.read_text()))
            for n in METRIC.findall(expr)}
    families = {n.removesuffix("_total").removesuffix("_bucket").removesuffix("_sum")
                .removesuffix("_count") for n in AGENT}
    shown = {n.removesuffix("_total").removesuffix("_bucket").removesuffix("_sum")
             .removesuffix("_count") for n in used}
    assert families <= shown, families - shown


def test_the_check_can_fail():
    bad = {"panels": [{"targets": [
        {"expr": 'rate(prefetchd_warm_total[5m])', "legendFormat": "{{node}}"},
        {"expr": 'prefetchd_node_cache_counter{name="s3_byte"}', "legendFormat": "{{pod_name}}"},
        {"expr": 'sum by (outcom) (prefetchd_warms_total)', "legendFormat": ""}]}],
        "templating": {"list": []}}
    found = problems(bad)
    assert any("no metric prefetchd_warm_total" in p for p in found)
    assert any("s3_byte is not a node cache counter" in p for p in found)
    assert any("has no label pod_name" in p for p in found)
    assert any("no label outcom" in p for p in found)
