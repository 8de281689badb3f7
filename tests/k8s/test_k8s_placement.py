"""Eligibility and the shared rendezvous ranking, on many generated node sets (hypothesis)."""

from __future__ import annotations

from collections import Counter
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefetchd.k8s import placement as pl

ZONES = ["a", "b", "c"]
TAINT_KEYS = ["gpu", "dedicated", "spot"]
EFFECTS = ["NoSchedule", "NoExecute", "PreferNoSchedule"]


@st.composite
def node_dicts(draw: st.DrawFn, name: str) -> dict:
    labels = {"kubernetes.io/hostname": name}
    if draw(st.booleans()):
        labels["zone"] = draw(st.sampled_from(ZONES))
    if draw(st.booleans()):
        labels["gen"] = str(draw(st.integers(1, 5)))
    taints = draw(st.lists(st.builds(
        lambda k, v, e: {"key": k, "value": v, "effect": e},
        st.sampled_from(TAINT_KEYS), st.sampled_from(["", "x"]), st.sampled_from(EFFECTS),
    ), max_size=2))
    node = {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": {}},
        "spec": {"taints": taints, "unschedulable": draw(st.booleans()) and draw(st.booleans())},
        "status": {"allocatable": {
            "cpu": draw(st.sampled_from(["4", "16", "3500m"])),
            "memory": draw(st.sampled_from(["16Gi", "64Gi"])),
            "nvidia.com/gpu": str(draw(st.integers(0, 8))),
        }},
    }
    if draw(st.integers(0, 9)):  # most nodes run the agent
        node["metadata"]["annotations"][pl.CACHE_FREE_ANNOTATION] = str(
            draw(st.integers(0, 2**40)))
    return node


@st.composite
def clusters(draw: st.DrawFn) -> list[pl.NodeInfo]:
    count = draw(st.integers(1, 16))
    return [pl.NodeInfo.from_node(draw(node_dicts(f"node-{i:02d}"))) for i in range(count)]


@st.composite
def pod_specs(draw: st.DrawFn) -> dict:
    spec: dict = {"containers": [{"name": "main", "resources": {}}]}
    if draw(st.booleans()):
        spec["nodeSelector"] = {"zone": draw(st.sampled_from(ZONES))}
    if draw(st.booleans()):
        op = draw(st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]))
        key, values = ("gen", [str(draw(st.integers(0, 5)))]) if op in ("Gt", "Lt") else (
            "zone", draw(st.lists(st.sampled_from(ZONES), min_size=1, max_size=2)))
        expr = {"key": key, "operator": op}
        if op not in ("Exists", "DoesNotExist"):
            expr["values"] = values
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [expr]}]}}}
    spec["tolerations"] = draw(st.lists(st.builds(
        lambda k, op, e: {"key": k, "operator": op, "effect": e, "value": "x"}
        if op == "Equal" else {"key": k, "operator": op, "effect": e},
        st.sampled_from(TAINT_KEYS + [""]), st.sampled_from(["Equal", "Exists"]),
        st.sampled_from(EFFECTS + [""]),
    ), max_size=2))
    gpus = draw(st.integers(0, 4))
    if gpus:
        spec["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    return spec


datasets = st.text("abcdefghijklmnopqrstuvwxyz0123456789/-", min_size=1, max_size=30).map(
    lambda s: f"s3://bucket/{s}")


@settings(max_examples=150, deadline=None)
@given(clusters(), pod_specs(), datasets, st.integers(1, 4), st.randoms(use_true_random=False))
def test_every_agent_agrees_and_only_eligible_nodes_are_chosen(nodes, spec, ds, replicas, rnd):
    pod = pl.PodRequirements.from_pod_spec(spec)
    views = []
    for _ in range(3):  # three agents, each listing the nodes in its own order
        view = list(nodes)
        rnd.shuffle(view)
        views.append(pl.choose(ds, view, pod, replicas))
    assert views[0] == views[1] == views[2]
    chosen = views[0]
    fits = [n.name for n in nodes if pl.eligible(pod, n)]
    assert set(chosen) <= set(fits)
    assert len(chosen) == min(replicas, len(fits))
    by_name = {n.name: n for n in nodes}
    assert all(not pl.ineligibility_reason(pod, by_name[c]) for c in chosen)
    # each agent's own verdict agrees with the group's choice
    assert {n.name for n in nodes if pl.should_warm(n.name, ds, nodes, pod, replicas)} \
        == set(chosen)


@settings(max_examples=100, deadline=None)
@given(clusters(), pod_specs(), datasets, st.integers(1, 3), st.data())
def test_removing_a_node_that_was_not_chosen_changes_nothing(nodes, spec, ds, replicas, data):
    pod = pl.PodRequirements.from_pod_spec(spec)
    chosen = pl.choose(ds, nodes, pod, replicas)
    others = [n for n in nodes if n.name not in chosen]
    if not others:
        return
    gone = data.draw(st.sampled_from(others))
    assert pl.choose(ds, [n for n in nodes if n is not gone], pod, replicas) == chosen


@settings(max_examples=60, deadline=None)
@given(clusters(), datasets, st.integers(1, 3))
def test_removing_a_chosen_node_moves_only_its_share(nodes, ds, replicas):
    chosen = pl.choose(ds, nodes, None, replicas)
    if not chosen:
        return
    rest = pl.choose(ds, [n for n in nodes if n.name != chosen[0]], None, replicas)
    assert rest[: len(chosen) - 1] == chosen[1:]  # the survivors keep their order


def _uniform(n: int, free_gib: int = 100) -> list[pl.NodeInfo]:
    return [pl.NodeInfo(f"n{i}", cache_free_bytes=free_gib * 2**30) for i in range(n)]


def test_spread_is_roughly_even():
    nodes = _uniform(10)
    counts = Counter(pl.choose(f"s3://b/ds-{i}", nodes, None, 1)[0] for i in range(5000))
    assert set(counts) == {n.name for n in nodes}
    assert all(400 <= c <= 600 for c in counts.values()), counts  # expected 500, sd ~21
    pairs = Counter(tuple(pl.choose(f"s3://b/ds-{i}", nodes, None, 2)) for i in range(5000))
    assert all(p[0] != p[1] for p in pairs)


def test_emptier_nodes_get_proportionally_more():
    # weights: 1 + floor(log2(1 + GiB)) -> 0 GiB: 1, 7 GiB: 4
    nodes = [pl.NodeInfo("full", cache_free_bytes=0),
             pl.NodeInfo("empty", cache_free_bytes=7 * 2**30)]
    assert [n.weight for n in nodes] == [1, 4]
    counts = Counter(pl.choose(f"s3://b/{i}", nodes, None, 1)[0] for i in range(4000))
    assert 0.75 <= counts["empty"] / 4000 <= 0.85  # expected 4/5


def test_nodes_without_agent_or_fit_are_never_chosen():
    nodes = _uniform(3) + [pl.NodeInfo("no-agent")]
    assert all("no-agent" not in pl.choose(f"s3://x/{i}", nodes, None, 4) for i in range(50))
    assert pl.choose("s3://x/y", [pl.NodeInfo("no-agent")], None, 1) == []


NODE = pl.NodeInfo("n1", labels={"zone": "a", "gen": "3"}, cache_free_bytes=1,
                   allocatable={"nvidia.com/gpu": Fraction(2), "cpu": Fraction(4)})


@pytest.mark.parametrize("expr,ok", [
    ({"key": "zone", "operator": "In", "values": ["a", "b"]}, True),
    ({"key": "zone", "operator": "In", "values": ["b"]}, False),
    ({"key": "zone", "operator": "NotIn", "values": ["b"]}, True),
    ({"key": "missing", "operator": "NotIn", "values": ["b"]}, True),
    ({"key": "zone", "operator": "Exists"}, True),
    ({"key": "zone", "operator": "DoesNotExist"}, False),
    ({"key": "missing", "operator": "DoesNotExist"}, True),
    ({"key": "gen", "operator": "Gt", "values": ["2"]}, True),
    ({"key": "gen", "operator": "Gt", "values": ["3"]}, False),
    ({"key": "gen", "operator": "Lt", "values": ["4"]}, True),
    ({"key": "zone", "operator": "Lt", "values": ["4"]}, False),  # not an integer
    ({"key": "missing", "operator": "Gt", "values": ["0"]}, False),
])
def test_match_expression_operators(expr, ok):
    spec = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [expr]}]}}}}
    assert pl.eligible(pl.PodRequirements.from_pod_spec(spec), NODE) is ok


def test_terms_are_ored_and_match_fields_name_the_node():
    terms = [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z"]}]},
             {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]
    spec = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": terms}}}}
    assert pl.eligible(pl.PodRequirements.from_pod_spec(spec), NODE)
    empty = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{}]}}}}
    assert not pl.eligible(pl.PodRequirements.from_pod_spec(empty), NODE)


@pytest.mark.parametrize("taint,tolerations,ok", [
    ({"key": "gpu", "value": "x", "effect": "NoSchedule"}, [], False),
    ({"key": "gpu", "value": "x", "effect": "NoExecute"}, [], False),
    ({"key": "gpu", "value": "x", "effect": "PreferNoSchedule"}, [], True),
    ({"key": "gpu", "value": "x", "effect": "NoSchedule"},
     [{"key": "gpu", "operator": "Equal", "value": "x", "effect": "NoSchedule"}], True),
    ({"key": "gpu", "value": "x", "effect": "NoSchedule"},
     [{"key": "gpu", "operator": "Equal", "value": "y"}], False),
    ({"key": "gpu", "value": "x", "effect": "NoSchedule"}, [{"key": "gpu", "value": "x"}], True),
    ({"key": "gpu", "value": "x", "effect": "NoExecute"},
     [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}], False),
    ({"key": "gpu", "value": "x", "effect": "NoExecute"}, [{"operator": "Exists"}], True),
    ({"key": "gpu", "value": "x", "effect": "NoExecute"},
     [{"key": "other", "operator": "Exists"}], False),
])
def test_taints_and_tolerations(taint, tolerations, ok):
    node = pl.NodeInfo.from_node({"metadata": {"name": "t", "annotations": {
        pl.CACHE_FREE_ANNOTATION: "10"}}, "spec": {"taints": [taint]}})
    assert pl.eligible(pl.PodRequirements.from_pod_spec({"tolerations": tolerations}), node) is ok


def test_resources_against_allocatable():
    def spec(gpu: str, cpu: str = "1") -> dict:
        return {"containers": [{"resources": {"limits": {"nvidia.com/gpu": gpu},
                                              "requests": {"cpu": cpu}}}],
                "initContainers": [{"resources": {"requests": {"cpu": "3500m"}}}]}

    assert pl.eligible(pl.PodRequirements.from_pod_spec(spec("2")), NODE)
    assert "nvidia.com/gpu" in pl.ineligibility_reason(
        pl.PodRequirements.from_pod_spec(spec("3")), NODE)
    # two containers add up; an init container counts on its own
    two = {"containers": [{"resources": {"requests": {"cpu": "2500m"}}}] * 2}
    assert not pl.eligible(pl.PodRequirements.from_pod_spec(two), NODE)
    assert pl.pod_requests(spec("1"))["cpu"] == Fraction(7, 2)
    assert pl.parse_quantity("4Gi") == 4 * 2**30 and pl.parse_quantity("250m") == Fraction(1, 4)


def test_a_sidecar_adds_to_the_containers_as_the_scheduler_counts_it():
    """A native sidecar (an init container with ``restartPolicy: Always``) runs beside the
    containers: its requests add to theirs; an init container before it runs alone, one
    after it runs beside it (Kubernetes' PodRequests)."""
    spec = {"containers": [{"resources": {"requests": {"cpu": "96", "memory": "960Gi"}}}],
            "initContainers": [
                {"name": "fetch", "resources": {"requests": {"cpu": "99"}}},
                {"name": "eval", "restartPolicy": "Always",
                 "resources": {"requests": {"cpu": "4", "memory": "32Gi"}}},
                {"name": "warmup", "resources": {"requests": {"cpu": "98"}}}]}
    got = pl.pod_requests(spec)
    assert got["memory"] == pl.parse_quantity("992Gi")
    assert got["cpu"] == 102  # warmup (98) beside the sidecar (4) outweighs 96 + 4
    spec["initContainers"].pop()
    assert pl.pod_requests(spec)["cpu"] == 100  # 96 + 4; fetch (99) ran alone before


def test_unschedulable_and_node_selector():
    cordoned = pl.NodeInfo("c", unschedulable=True, cache_free_bytes=1)
    assert pl.ineligibility_reason(pl.PodRequirements(), cordoned) == "unschedulable"
    assert pl.eligible(pl.PodRequirements.from_pod_spec({"tolerations": [
        {"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}]}), cordoned)
    assert not pl.eligible(pl.PodRequirements(node_selector={"zone": "b"}), NODE)


def test_holds_labels_are_bounded_and_patches_minimal():
    many = [f"s3://b/ds-{i}" for i in range(1000)]
    keys = {pl.holds_label(d) for d in many}
    assert len(keys) == pl.LABEL_BUCKETS
    patch = pl.holds_labels_patch({"other": "x", "holds.fusecache.io/b99": "true"}, many[:3])
    labels = patch["metadata"]["labels"]
    assert labels.pop("holds.fusecache.io/b99") is None
    assert set(labels) == {pl.holds_label(d) for d in many[:3]}
    current = {k: "true" for k in labels}
    assert pl.holds_labels_patch(current, many[:3]) is None


def test_choice_is_pinned():
    """Pinned values: the hash must never depend on PYTHONHASHSEED, platform or input order,
    or agents (and the webhook) on different nodes would disagree."""
    nodes = _uniform(5)
    ds = "s3://datasets/imagenet/train/"
    assert pl.choose(ds, nodes, None, 2) == ["n2", "n0"]
    assert pl.choose(ds, list(reversed(nodes)), None, 2) == ["n2", "n0"]
    # the label hashes the dataset without its trailing slash (the agent publishes the warmed
    # form .../train/ of what the webhook names .../train)
    assert pl.holds_label(ds) == pl.holds_label(ds.rstrip("/")) == "holds.fusecache.io/b00"
