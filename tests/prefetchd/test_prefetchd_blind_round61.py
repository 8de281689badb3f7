"""Blind round 61 (ordinary pipelines; 5/6 exact on their first run): a step output handed to
``--class-weights`` (loss weights per class, numbers) was a run-time read of a location, as a
model's ``--weights`` or ``--init-weights`` is; in a KFP component through the input's name
(``weights``) and the flag's alike."""

from __future__ import annotations

import yaml

from prefetchd import pipeline
from prefetchd.pipeline import _uri

WORKFLOW = """\
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata: {generateName: cw-}
spec:
  entrypoint: main
  templates:
  - name: main
    dag:
      tasks:
      - {name: weigh, template: weigh}
      - name: train
        template: train
        depends: weigh
        arguments:
          parameters: [{name: w, value: "{{tasks.weigh.outputs.result}}"}]
  - name: weigh
    script: {image: python:3.11, command: [python], source: "print('0.4,1.0,2.3')"}
  - name: train
    inputs: {parameters: [{name: w}]}
    container:
      image: ghcr.io/acme/eo-train:2.1
      args: [--labels, s3://eo/labels/, FLAG, "{{inputs.parameters.w}}"]
"""


def _reads(flag: str) -> list[tuple[str | None, str | None]]:
    [plan] = pipeline.analyze_documents([yaml.safe_load(WORKFLOW.replace("FLAG", flag))],
                                        source="w.yaml")
    return [(r.uri, r.pattern) for r in plan.step("train").reads]


def test_weights_that_are_numbers_are_no_location() -> None:
    for flag in ("--class-weights", "--sample_weights", "--loss-weights"):
        assert _reads(flag) == [("s3://eo/labels/", None)], flag
    for flag in ("--weights", "--init-weights", "--class-weights-path"):
        assert _reads(flag) == [("s3://eo/labels/", None),
                                (None, "{{inputs.parameters.w}}")], flag
    assert not _uri.names_place("--class-weights") and _uri.names_place("--weights")
    # (a KFP input named so, handed to --class-weights in the component's code: the corpus
    # case kfp2_b61_sat_landcover)
    assert _uri.name_direction("class_weights") is None
    assert _uri.name_direction("weights") == "read"
