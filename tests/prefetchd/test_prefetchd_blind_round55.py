"""Blind round 55 (Argo Workflows in depth): an exit hook given by ``templateRef`` vanished
(the workflow's and a task's); the pods of a Job a resource step creates read nothing; a
reduce step reading the folder above a loop's per-item outputs (``counts/`` over
``counts/{{item}}/m.h5``) had that folder warmed before the loop wrote it."""

from __future__ import annotations

import copy
import textwrap
from typing import Any

import yaml

from prefetchd import pipeline

LIB = yaml.safe_load(textwrap.dedent("""\
    apiVersion: argoproj.io/v1alpha1
    kind: WorkflowTemplate
    metadata: {name: tools}
    spec:
      templates:
      - name: notify
        inputs: {parameters: [{name: run, value: r0}]}
        container:
          image: x
          args: [--thresholds, "s3://ops/qc/{{inputs.parameters.run}}/limits.json"]
    """))


def _plans(doc: dict[str, Any], *more: dict[str, Any]) -> list[pipeline.Plan]:
    return pipeline.analyze_documents([copy.deepcopy(d) for d in (doc, *more)],
                                      source="wf.yaml")


def _wf(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
            "metadata": {"name": "w"}, "spec": {"entrypoint": "main", **spec}}


def test_exit_hooks_by_template_ref_run_the_librarys_template() -> None:
    main = {"name": "main", "container": {"image": "x", "args": ["--in", "s3://d/in/"]}}
    [plan] = _plans(_wf(templates=[main], hooks={"exit": {"templateRef": {
        "name": "tools", "template": "notify"}}}), LIB)
    assert [s.id for s in plan.steps] == ["main", "notify"]
    assert plan.step("notify").exit_handler
    assert [r.uri for r in plan.step("notify").reads] == ["s3://ops/qc/r0/limits.json"]
    dag = {"name": "main", "dag": {"tasks": [{
        "name": "fit", "template": "fit", "hooks": {"exit": {
            "templateRef": {"name": "tools", "template": "notify"},
            "arguments": {"parameters": [{"name": "run", "value": "r7"}]}}}}]}}
    fit = {"name": "fit", "container": {"image": "x", "args": ["--in", "s3://d/in/"]}}
    [plan] = _plans(_wf(templates=[dag, fit]), LIB)
    assert [r.uri for r in plan.step("notify").reads] == ["s3://ops/qc/r7/limits.json"]


def test_a_job_a_resource_step_creates_reads_what_its_pods_read() -> None:
    manifest = textwrap.dedent("""\
        apiVersion: batch/v1
        kind: Job
        metadata: {generateName: train-}
        spec:
          template:
            spec:
              restartPolicy: Never
              containers:
              - name: train
                image: t
                args: [--data=s3://train/pointpillars/{{workflow.parameters.v}}/,
                       --out=s3://models/pp/]
        """)
    step = {"name": "main", "resource": {"action": "create", "manifest": manifest,
                                         "successCondition": "status.succeeded > 0"}}
    [plan] = _plans(_wf(templates=[step],
                        arguments={"parameters": [{"name": "v", "value": "v7"}]}))
    s = plan.step("main")
    assert [r.uri for r in s.reads] == ["s3://train/pointpillars/v7/"]
    assert [w.uri for w in s.writes] == ["s3://models/pp/"]


def test_a_reduce_over_a_loops_per_item_folders_is_not_warmed_ahead() -> None:
    doc = yaml.safe_load(textwrap.dedent("""\
        apiVersion: argoproj.io/v1alpha1
        kind: Workflow
        metadata: {name: w}
        spec:
          entrypoint: main
          templates:
          - name: main
            dag:
              tasks:
              - {name: list, template: list}
              - name: produce
                depends: list
                template: produce
                withParam: "{{tasks.list.outputs.result}}"
                arguments: {parameters: [{name: lib, value: "{{item}}"}]}
              - {name: consume, depends: produce, template: consume}
          - name: list
            script: {image: python, command: [python], source: "print('[]')"}
          - name: produce
            inputs: {parameters: [{name: lib}]}
            container: {image: x, command: [sh, -c, "echo x > /out/m.h5"]}
            outputs:
              artifacts:
              - name: m
                path: /out/m.h5
                s3: {bucket: analysis, key: "scrna/counts/{{inputs.parameters.lib}}/m.h5"}
          - name: consume
            inputs:
              artifacts:
              - {name: counts, path: /in/counts, s3: {bucket: analysis, key: scrna/counts/}}
            container: {image: x, command: [ls, /in/counts]}
        """))
    [plan] = _plans(doc)
    assert plan.datasets() == []
    assert [r.written_by for r in plan.step("consume").intermediate] == ["produce"]


def test_a_lakefs_location_is_shown_as_a_read_of_another_scheme() -> None:
    """Round 56: ``lakectl fs download lakefs://repo/main/x/`` was dropped without a word;
    like ``gs://`` and ``hf://`` it is shown, not warmed (its S3 gateway form is s3://)."""
    step = {"name": "main", "container": {"image": "lakectl", "command": [
        "lakectl", "fs", "download", "--recursive", "lakefs://shelf/main/stores/w26/", "/d/"]}}
    [plan] = _plans(_wf(templates=[step]))
    [read] = plan.step("main").reads
    assert read.uri == "lakefs://shelf/main/stores/w26/" and not read.supported
    assert plan.datasets() == []


def test_a_location_only_in_a_comment_is_no_read() -> None:
    """Round 57: ``return 'x'  # e.g. s3://bucket/inbox/batch-1/`` was warmed."""
    step = {"name": "main", "script": {"image": "python", "command": ["python"], "source": (
        "import pandas as pd\n"
        "# the inbox looks like s3://bucket/inbox/batch-1/\n"
        "df = pd.read_parquet('s3://bucket/ref/vendors.parquet')  # s3://bucket/old/\n")}}
    [plan] = _plans(_wf(templates=[step]))
    assert [r.uri for r in plan.step("main").reads] == ["s3://bucket/ref/vendors.parquet"]
