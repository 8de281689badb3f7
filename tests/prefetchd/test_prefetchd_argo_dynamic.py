"""Argo workflows whose shape is decided at run time: recursive templates and expression tags.

Both are valid Argo (the upstream examples coinflip-recursive, dag-coinflip,
recursive-for-loop and expression-tag-template use them); the plan must come out with
the steps it can know, not an error.
"""

from __future__ import annotations

import logging

import pytest

from prefetchd import pipeline
from prefetchd.pipeline import _argo

_ARGO = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "metadata": {"name": "w"}}


def _workflow(templates: list[dict], params: list[dict] | None = None) -> dict:
    spec: dict = {"entrypoint": "main", "templates": templates}
    if params:
        spec["arguments"] = {"parameters": params}
    return {**_ARGO, "spec": spec}


def _train(name: str = "train", arg: str = "s3://data/imagenet/") -> dict:
    return {"name": name, "inputs": {"parameters": [{"name": "p", "value": "-"}]},
            "container": {"image": "x", "command": ["python", "train.py"],
                          "args": ["--data", arg]}}


def test_a_template_that_calls_itself_is_planned_once_with_its_reads(caplog) -> None:
    """Coin-flip style: ``main`` flips, trains, and calls itself again while a condition
    holds. The steps of the first call are the plan; the recursive call adds nothing and is
    named in a warning."""
    main = {"name": "main", "steps": [
        [{"name": "flip", "template": "flip"}],
        [{"name": "train", "template": "train"},
         {"name": "again", "template": "main", "when": "{{steps.flip.outputs.result}} == tails"}],
    ]}
    flip = {"name": "flip", "script": {"image": "python", "command": ["python"],
                                       "source": "print('heads')"}}
    with caplog.at_level(logging.WARNING, logger=_argo.__name__):
        [plan] = pipeline.analyze_documents([_workflow([main, flip, _train()])], source="w.yaml")
    assert [s.id for s in plan.steps] == ["flip", "train"]
    assert plan.step("train").depends_on == ["flip"]
    assert [d[0] for d in plan.datasets()] == ["s3://data/imagenet/"]
    [warning] = [r.getMessage() for r in caplog.records]
    assert "w.yaml" in warning and "'main'" in warning and "recursion" in warning


def test_recursion_through_another_template_is_caught_too() -> None:
    """main -> loop (dag) -> body (steps) -> loop again: the cycle is two templates long."""
    main = {"name": "main", "dag": {"tasks": [{"name": "go", "template": "loop"}]}}
    loop = {"name": "loop", "dag": {"tasks": [
        {"name": "work", "template": "train"},
        {"name": "more", "template": "body", "depends": "work"}]}}
    body = {"name": "body", "steps": [[{"name": "next", "template": "loop",
                                        "when": "{{workflow.parameters.n}} > 0"}]]}
    wf = _workflow([main, loop, body, _train()], [{"name": "n", "value": "3"}])
    [plan] = pipeline.analyze_documents([wf], source="t")
    assert [s.template for s in plan.steps] == ["train"]


def test_one_template_used_twice_side_by_side_is_not_recursion() -> None:
    """Diamond-style reuse (the same DAG template under two tasks) expands both times."""
    main = {"name": "main", "dag": {"tasks": [
        {"name": "a", "template": "pair"}, {"name": "b", "template": "pair"}]}}
    pair = {"name": "pair", "dag": {"tasks": [{"name": "train", "template": "train"}]}}
    [plan] = pipeline.analyze_documents([_workflow([main, pair, _train()])], source="t")
    assert [s.template for s in plan.steps] == ["train", "train"]
    assert len({s.id for s in plan.steps}) == 2


def test_nesting_deeper_than_the_bound_without_recursion_is_still_an_error() -> None:
    depth = _argo.MAX_DEPTH + 5
    templates = [{"name": f"t{i}", "dag": {"tasks": [{"name": "n", "template": f"t{i + 1}"}]}}
                 for i in range(depth)]
    templates[0]["name"] = "main"
    templates[1]["dag"]["tasks"][0]["template"] = "t2"
    templates.append(_train(f"t{depth}"))
    with pytest.raises(pipeline.PipelineError, match="nested deeper"):
        pipeline.analyze_documents([_workflow(templates)], source="t")


def test_an_expression_tag_naming_a_parameter_resolves_like_a_plain_tag() -> None:
    main = {"name": "main", "dag": {"tasks": [{
        "name": "train", "template": "train",
        "arguments": {"parameters": [
            {"name": "p", "value": "{{=workflow.parameters['data-uri']}}"}]}}]}}
    wf = _workflow([main, _train(arg="{{= inputs.parameters.p }}")],
                   [{"name": "data-uri", "value": "s3://data/coco/"}])
    [plan] = pipeline.analyze_documents([wf], source="t")
    [read] = plan.step("train").reads
    assert (read.uri, read.static, read.parameter) == ("s3://data/coco/", True, "data-uri")


def test_an_expression_tag_is_evaluated_from_the_parameters_defaults() -> None:
    """Blind round 35: ``sprig.*``, ``+``, ``jsonpath``/``toJson`` over parameters whose
    values are in the file are evaluated as the controller would (they were run-time only,
    and a tag that was a whole argument read nothing); in a loop, once per item."""
    main = {"name": "main", "dag": {"tasks": [
        {"name": "trim", "template": "t1"},
        {"name": "join", "template": "train", "arguments": {"parameters": [
            {"name": "p", "value": "{{=workflow.parameters.bucket + 'corpus/'}}"}]}},
        {"name": "tiles", "template": "t2",
         "withParam": "{{=toJson(jsonpath(workflow.parameters.aoi, '$.tiles'))}}",
         "arguments": {"parameters": [{"name": "p", "value": "{{item}}"}]}}]}}
    t1 = _train("t1", "s3://data/{{=sprig.trim(workflow.parameters.v)}}/")
    t2 = _train("t2", "{{=sprig.trimSuffix('/', workflow.parameters.bucket)}}/tiles/"
                      "{{=sprig.lower(inputs.parameters.p)}}/")
    wf = _workflow([main, t1, _train(arg="{{inputs.parameters.p}}"), t2], [
        {"name": "v", "value": " v2 "}, {"name": "bucket", "value": "s3://acme/"},
        {"name": "aoi", "value": '{"tiles": ["31UFT", "31UFU"], "n": 2}'}])
    [plan] = pipeline.analyze_documents([wf], source="t")
    assert [(r.uri, r.origin) for r in plan.step("trim").reads] == [
        ("s3://data/v2/", "parameter-expression")]
    [read] = plan.step("join").reads
    assert (read.uri, read.static, read.parameter) == ("s3://acme/corpus/", True, "bucket")
    loop = plan.step("tiles").loop
    assert loop is not None and loop.items_from == "parameter"
    assert loop.items == ["31UFT", "31UFU"]
    assert sorted(r.uri for r in plan.step("tiles").reads) == [
        "s3://acme/tiles/31uft/", "s3://acme/tiles/31ufu/"]


def test_an_expression_of_a_json_parameter_is_no_location_and_closures_stay_runtime() -> None:
    """``toJson(jsonpath(...))`` of a mixture's weights is a JSON text, not a read (it was a
    run-time read); a tag with an expr-lang closure, a function not in the subset, or one
    that fails (``asInt('x')``) stays run-time only, never its text taken for a path."""
    main = {"name": "main", "dag": {"tasks": [{"name": "train", "template": "train"}]}}
    for arg in ("{{=toJson(jsonpath(workflow.parameters.mix, '$.sources'))}}",
                "s3://data/{{=sprig.shuffle(workflow.parameters.v)}}/",
                "s3://data/{{=asInt(workflow.parameters.v) + 1}}/",
                "s3://data/{{=map([1, 2], {# * 2})}}/",
                "s3://data/{{=" + "!" * 1500 + "true}}/"):  # (deep: no RecursionError)
        wf = _workflow([main, _train(arg=arg)], [
            {"name": "v", "value": "x"}, {"name": "mix", "value": '{"sources": {"a": 0.5}}'}])
        [plan] = pipeline.analyze_documents([wf], source="t")
        step = plan.step("train")
        assert plan.datasets() == [], arg
        assert all(r.uri is None or "{{" not in r.uri and "sprig" not in r.uri
                   for r in step.reads + step.unknown), arg


def test_with_param_from_an_expression_is_a_loop_known_at_run_time() -> None:
    """The upstream expression-tag example: withParam is an expr-lang closure, braces
    inside the tag. Before, the plan failed with "not a JSON list"."""
    main = {"name": "main", "dag": {"tasks": [{
        "name": "train", "template": "train",
        "withParam": "{{=toJson(filter([1, 3], {# > 1}))}}",
        "arguments": {"parameters": [{"name": "p", "value": "{{item}}"}]}}]}}
    [plan] = pipeline.analyze_documents([_workflow([main, _train()])], source="t")
    loop = plan.step("train").loop
    assert loop is not None and loop.items is None and loop.items_from == "task-output"
    assert loop.expression == "{{=toJson(filter([1, 3], {# > 1}))}}"
    assert [d[0] for d in plan.datasets()] == ["s3://data/imagenet/"]
