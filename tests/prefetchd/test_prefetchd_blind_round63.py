"""Blind round 63 (end-to-end pipelines that launch Katib, training jobs and KServe from their
steps): a resource step's manifest holding a tag only the run fills (``name:
train-{{workflow.uid}}``) lost every location its parameters name, so no job a pipeline
launched had its data warmed; ``--saved-model`` (a SavedModel, read by tf2onnx) was a write."""

from __future__ import annotations

import textwrap

import yaml

from prefetchd import pipeline

RESOURCE = """\
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata: {generateName: repro1-}
spec:
  entrypoint: train
  arguments:
    parameters: [{name: data_uri, value: "s3://example-data/train/"}]
  templates:
  - name: train
    resource:
      action: create
      successCondition: status.succeeded > 0
      manifest: |
        apiVersion: batch/v1
        kind: Job
        metadata:
          name: NAME
        spec:
          template:
            spec:
              restartPolicy: Never
              containers:
              - name: main
                image: example/train:1
                args: ["--data", "{{workflow.parameters.data_uri}}",
                       "--run", "{{workflow.name}}"]
"""


def _reads(text: str) -> list[str | None]:
    [plan] = pipeline.analyze_documents([yaml.safe_load(textwrap.dedent(text))],
                                        source="w.yaml")
    return [r.uri for s in plan.steps for r in s.reads]


def test_a_created_jobs_reads_survive_a_tag_only_the_run_fills() -> None:
    for name in ("train-{{workflow.uid}}", "train-{{pod.name}}", "train"):
        assert _reads(RESOURCE.replace("NAME", name)) == ["s3://example-data/train/"], name


def test_a_saved_model_flag_is_no_output() -> None:
    step = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
            "metadata": {"generateName": "x-"},
            "spec": {"entrypoint": "export", "templates": [{"name": "export", "container": {
                "image": "tf2onnx:1.16", "command": ["python", "-m", "tf2onnx.convert"],
                "args": ["--saved-model", "s3://models/mnist/saved_model/",
                         "--output", "s3://models/mnist/model.onnx"]}}]}}
    [plan] = pipeline.analyze_documents([step], source="w.yaml")
    assert [r.uri for r in plan.steps[0].reads] == ["s3://models/mnist/saved_model/"]
    assert [w.uri for w in plan.steps[0].writes] == ["s3://models/mnist/model.onnx"]
