"""Blind rounds 52 (the data libraries inside steps' code) and 53 (KFP v2 in depth): what the
analysis got wrong, each idiom valid as the SDKs compile it and the libraries run it.

Round 52: a glob's ``[1-3]`` cut the location at the bracket; ``zarr.open_group(mapper,
mode="w")`` was a read; a listing only printed for a later step's loop (``print(json.dumps(
fs.glob(...)))``) warmed every shard it names; a DuckDB query inside ``print(...)`` was no
read; a glob over the files an upstream step writes was warmed before they existed.
Round 53: which of two steps of one name (a sub-pipeline called twice, a top-level task of the
same name) got the bare name hung on the order of the walk (a top-level ``fetch`` became
``fetch'``); a local path with a loop item in it (``f"/scratch/orders/{region}"``) was a
run-time read.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from prefetchd import pipeline
from prefetchd.pipeline import _shard, _uri

_ARGO = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
         "metadata": {"name": "w", "namespace": "ml"}}


def _plan(templates: list[dict[str, Any]]) -> pipeline.Plan:
    doc = {**_ARGO, "spec": {"entrypoint": "main", "templates": templates}}
    [plan] = pipeline.analyze_documents([copy.deepcopy(doc)], source="w.yaml")
    return plan


def _script(name: str, source: str) -> dict[str, Any]:
    return {"name": name, "script": {"image": "python:3.11", "command": ["python"],
                                     "source": source}}


def _one(source: str) -> pipeline.Plan:
    return _plan([_script("main", source)])


def _reads(plan: pipeline.Plan, step: str = "main") -> list[str | None]:
    return [r.uri for r in plan.step(step).reads]


def test_a_glob_bracket_expression_is_part_of_the_location() -> None:
    text = "pl.read_parquet('s3://ads/bids/dt=2024-06-0[1-3]/*.parquet')"
    assert _uri.find_uris(text) == ["s3://ads/bids/dt=2024-06-0[1-3]/*.parquet"]
    match = _shard.compile_pattern("s3://ads/bids/dt=2024-06-0[1-3]/*.parquet")
    assert match("s3://ads/bids/dt=2024-06-02/p.parquet")
    assert not match("s3://ads/bids/dt=2024-06-04/p.parquet")
    assert _shard.prefix("s3://ads/bids/dt=2024-06-0[1-3]/*.parquet") == "s3://ads/bids/dt=2024-06-0"
    negated = _shard.compile_pattern("s3://b/x[!0-2]y")
    assert negated("s3://b/x3y") and not negated("s3://b/x1y") and not negated("s3://b/x/y")


def test_a_zarr_store_opened_to_write_through_a_mapper_is_written() -> None:
    plan = _one('import fsspec, zarr\n'
                'root = zarr.open_group(fsspec.get_mapper("s3://rad/v5/duke.zarr"), mode="w")\n'
                'ds = zarr.open_group(fsspec.get_mapper("s3://rad/v5/ref.zarr"))\n')
    assert _reads(plan) == ["s3://rad/v5/ref.zarr"]
    assert [w.uri for w in plan.step("main").writes] == ["s3://rad/v5/duke.zarr"]


def test_a_listing_only_printed_reads_nothing_and_a_query_printed_reads() -> None:
    plan = _one('import json, s3fs\nfs = s3fs.S3FileSystem()\n'
                'print(json.dumps(sorted(fs.glob("s3://mammo/wds/train-*.tar"))))\n')
    assert _reads(plan) == []
    plan = _one('import duckdb\ncon = duckdb.connect()\n'
                'print(con.execute("SELECT max(p) FROM read_parquet('
                '\'s3://climate/exceed/*/*.parquet\')").fetchone())\n')
    assert _reads(plan) == ["s3://climate/exceed/*/*.parquet"]


def test_a_listing_of_a_parameter_only_printed_reads_nothing() -> None:
    lister = _script("lister", 'import json, s3fs\nfs = s3fs.S3FileSystem()\n'
                               'print(json.dumps(fs.glob("{{inputs.parameters.root}}" '
                               '+ "train-*.tar")))\n')
    lister["inputs"] = {"parameters": [{"name": "root", "value": "s3://mammo/wds/"}]}
    main = {"name": "main", "dag": {"tasks": [{"name": "lister", "template": "lister"}]}}
    assert _reads(_plan([main, lister]), "lister") == []


def test_a_glob_over_what_an_upstream_step_writes_is_not_warmed_ahead() -> None:
    main = {"name": "main", "dag": {"tasks": [
        {"name": "write-part", "template": "write-part"},
        {"name": "read-parts", "template": "read-parts", "depends": "write-part"}]}}
    plan = _plan([main,
                  _script("write-part", 'import pandas as pd\npd.DataFrame({"p": [1]}).'
                          'to_parquet("s3://hw/exceed/region=iberia/part-0.parquet")\n'),
                  _script("read-parts", 'import polars as pl\n'
                          'pl.scan_parquet("s3://hw/exceed/*/*.parquet").collect()\n')])
    [read] = plan.step("read-parts").reads
    assert read.written_by == "write-part" and plan.datasets() == []


def _ir(outer_after_sub: bool, exit_handler: bool = False) -> dict[str, Any]:
    """A KFP v2 IR as kfp 2.17 compiles it: a sub-pipeline ``sub`` (one task ``fetch``) called
    twice (``sub``, ``sub-2``), and a top-level task ``fetch``; in an ExitHandler's group when
    *exit_handler*."""
    def comp(label: str) -> dict[str, Any]:
        return {"executorLabel": label, "inputDefinitions": {"parameters": {
            "uri": {"parameterType": "STRING"}}}}

    def task(ref: str, src: str, **more: Any) -> dict[str, Any]:
        return {"componentRef": {"name": ref}, "taskInfo": {"name": ref[5:]},
                "inputs": {"parameters": {"uri": {"componentInputParameter": src}}}, **more}

    def sub(label: str) -> dict[str, Any]:
        return {"dag": {"tasks": {"fetch": task(f"comp-{label}", "uri")}},
                "inputDefinitions": {"parameters": {"uri": {"parameterType": "STRING"}}}}

    executor = {"container": {"image": "amazon/aws-cli", "command": [
        "aws", "s3", "cp", "{{$.inputs.parameters['uri']}}", "/tmp/x"]}}
    outer = task("comp-fetch-3", "c", **({"dependentTasks": ["sub", "sub-2"]}
                                         if outer_after_sub else {}))
    subs = {"sub": task("comp-sub", "a"), "sub-2": task("comp-sub-2", "b")}
    comps = {"comp-fetch": comp("exec-fetch"), "comp-fetch-2": comp("exec-fetch-2"),
             "comp-fetch-3": comp("exec-fetch-3"), "comp-sub": sub("fetch"),
             "comp-sub-2": sub("fetch-2")}
    params = {k: {"parameterType": "STRING", "defaultValue": f"s3://b/{k}.csv"} for k in "abc"}
    if exit_handler:
        for t in subs.values():
            t["inputs"]["parameters"]["uri"] = {
                "componentInputParameter": "pipelinechannel--" + t["inputs"]["parameters"]
                ["uri"]["componentInputParameter"]}
        comps["comp-exit-handler-1"] = {"dag": {"tasks": subs}, "inputDefinitions": {
            "parameters": {f"pipelinechannel--{k}": {"parameterType": "STRING"} for k in "ab"}}}
        subs = {"exit-handler-1": {
            "componentRef": {"name": "comp-exit-handler-1"},
            "taskInfo": {"name": "exit-handler-1"},
            "inputs": {"parameters": {f"pipelinechannel--{k}": {"componentInputParameter": k}
                                      for k in "ab"}}}}
        if outer_after_sub:
            outer["dependentTasks"] = ["exit-handler-1"]
    return {"pipelineInfo": {"name": "collide"}, "schemaVersion": "2.1.0",
            "sdkVersion": "kfp-2.17.3", "components": comps,
            "deploymentSpec": {"executors": {f"exec-fetch{s}": executor
                                             for s in ("", "-2", "-3")}},
            "root": {"dag": {"tasks": {"fetch": outer, **subs}},
                     "inputDefinitions": {"parameters": params}}}


def test_steps_of_one_name_are_named_by_their_paths_whatever_the_order() -> None:
    for after in (True, False):
        for exit_handler in (False, True):
            [plan] = pipeline.analyze_documents([_ir(after, exit_handler)], source="p.yaml")
            ids = {s.id: [r.uri for r in s.reads] for s in plan.steps}
            assert ids == {"fetch": ["s3://b/c.csv"], "sub/fetch": ["s3://b/a.csv"],
                           "sub-2/fetch": ["s3://b/b.csv"]}, (after, exit_handler)
            if after:
                assert sorted(plan.step("fetch").depends_on) == ["sub-2/fetch", "sub/fetch"]


def test_argo_steps_of_one_name_in_two_sub_dags_are_both_named_by_path() -> None:
    doc = yaml.safe_load("""
        - name: main
          dag:
            tasks:
            - {name: a, template: part}
            - {name: b, template: part, depends: a}
        - name: part
          dag:
            tasks:
            - {name: fetch, template: read}
        - name: read
          container: {image: busybox, args: [--in, "s3://bkt/x/"]}
        """)
    plan = _plan(doc)
    assert [s.id for s in plan.steps] == ["a/fetch", "b/fetch"]
    assert plan.step("b/fetch").depends_on == ["a/fetch"]


def test_a_local_path_with_a_loop_item_is_no_run_time_read() -> None:
    ir = _ir(False)
    ir["root"]["dag"]["tasks"]["fetch"]["inputs"]["parameters"]["uri"] = {
        "runtimeValue": {"constant": "/scratch/orders/{{$.inputs.parameters["
                                     "'pipelinechannel--region'}}"}}
    ir["root"]["inputDefinitions"]["parameters"]["region"] = {"parameterType": "STRING"}
    ir["root"]["dag"]["tasks"]["fetch"]["inputs"]["parameters"][
        "pipelinechannel--region"] = {"componentInputParameter": "region"}
    # (a lightweight component as kfp 2.17 writes it: the executor runs the function)
    ir["deploymentSpec"]["executors"]["exec-fetch-3"] = {"container": {
        "image": "python:3.11",
        "args": ["--executor_input", "{{$}}", "--function_to_execute", "solve"],
        "command": ["sh", "-ec", 'program_path=$(mktemp -d)\nprintf "%s" "$0" > '
                    '"$program_path/ephemeral_component.py"\n_KFP_RUNTIME=true python3 -m '
                    'kfp.dsl.executor_main --component_module_path '
                    '"$program_path/ephemeral_component.py" "$@"\n',
                    "\nimport kfp\nfrom kfp import dsl\n\ndef solve(uri: str):\n"
                    "    import pandas as pd\n    pd.read_parquet(uri)\n"]}}
    [plan] = pipeline.analyze_documents([ir], source="p.yaml")
    assert plan.step("fetch").reads == []


def test_a_raw_input_artifact_the_step_reads_names_what_it_reads() -> None:
    """Round 54: KFP v1's ``{inputPath}`` of a constant compiles to ``raw.data``; the config
    the step reads by its path names the sample it trains on (a key saying output: written).
    A raw artifact the command line does not name is no file the step reads."""
    def step(args: list[str]) -> dict[str, Any]:
        return {"name": "main", "container": {"image": "faiss", "command": ["python", "-m",
                                                                             "build"],
                                              "args": args},
                "inputs": {"artifacts": [{"name": "cfg", "path": "/tmp/inputs/cfg/data",
                                          "raw": {"data": "factory: IVF65536,PQ64\n"
                                                  "train_sample: s3://shop/idx/sample.npy\n"
                                                  "output_dir: s3://shop/idx/out/\n"}}]}}
    plan = _plan([step(["--config", "/tmp/inputs/cfg/data"])])
    assert _reads(plan) == ["s3://shop/idx/sample.npy"]
    assert [w.uri for w in plan.step("main").writes] == ["s3://shop/idx/out/"]
    assert _reads(_plan([step(["--config", "/etc/other.yaml"])])) == []
