"""Blind job round 45 (Argo Workflows mid-run, ``kubectl get workflow -o yaml``): what the plan
of a live workflow, and the node agent reading the same status, got wrong.

The status is written as Argo's controller (v3.5/3.6) writes it: nodes named ``<wf>.<task>``,
``<wf>[0].<step>``, a retried step's Retry node with its attempts ``<name>(0)`` as children.
"""

from __future__ import annotations

import copy
import textwrap
from typing import Any

import yaml

from prefetchd import cli, pipeline
from prefetchd.k8s import agent as ag
from prefetchd.k8s import datasets as dsm
from prefetchd.k8s import placement as pl


def _plan(doc: dict[str, Any], **kw: Any) -> pipeline.Plan:
    [plan] = pipeline.analyze_documents([copy.deepcopy(doc)], source="wf.yaml", **kw)
    return plan


def _uris(plan: pipeline.Plan) -> list[str]:
    return [u for u, _, _ in plan.datasets()]


def _agent_warms(obj: dict[str, Any]) -> set[str]:
    warmed: list[str] = []
    agent = ag.Agent(ag.AgentConfig(node_name="me"), dsm.ObjectsView([]),
                     lambda req: warmed.append(req.dataset))
    agent.on_node("ADDED", {"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": "me", "labels": {}, "annotations": {pl.CACHE_FREE_ANNOTATION: str(2**40)}}})
    agent.on_workflow("ADDED", copy.deepcopy(obj))
    return set(warmed)


RETRY = yaml.safe_load(textwrap.dedent("""\
    apiVersion: argoproj.io/v1alpha1
    kind: Workflow
    metadata: {name: fraud, namespace: ml, uid: u-fraud}
    spec:
      entrypoint: main
      templates:
      - name: main
        dag:
          tasks:
          - {name: featurize, template: featurize}
      - name: featurize
        retryStrategy: {limit: 3, backoff: {duration: 2m}}
        container:
          image: busybox
          command: [featurize]
          env: [{name: INPUT, value: "s3://bkt/input/"}]
    status:
      phase: Running
      nodes:
        fraud: {id: fraud, name: fraud, displayName: fraud, type: DAG, phase: Running,
                templateName: main, children: [fraud-1]}
        fraud-1: {id: fraud-1, name: fraud.featurize, displayName: featurize, type: Retry,
                  phase: Running, message: Backoff for 2 minutes, templateName: featurize,
                  boundaryID: fraud, children: [fraud-2]}
        fraud-2: {id: fraud-2, name: fraud.featurize(0), displayName: featurize(0), type: Pod,
                  phase: Failed, message: OOMKilled (exit code 137), templateName: featurize,
                  boundaryID: fraud}
    """))


def test_a_retry_waiting_to_try_again_wants_its_data() -> None:
    """Its attempt failed and the next has no pod yet: before, the Retry node's Running made
    the step started, so the next attempt's data was neither warmed by plan nor by an agent
    that first saw the workflow then."""
    plan = _plan(RETRY)
    assert plan.step("featurize").phase == "Pending" and _uris(plan) == ["s3://bkt/input/"]
    assert _agent_warms(RETRY) == {"s3://bkt/input/"}
    running = copy.deepcopy(RETRY)
    running["status"]["nodes"]["fraud-1"]["children"].append("fraud-3")
    running["status"]["nodes"]["fraud-3"] = {
        "id": "fraud-3", "name": "fraud.featurize(1)", "displayName": "featurize(1)",
        "type": "Pod", "phase": "Running", "templateName": "featurize", "boundaryID": "fraud"}
    assert _plan(running).step("featurize").started and _uris(_plan(running)) == []


def test_a_container_entrypoint_retried_whose_pod_waits_for_a_node_wants_its_data() -> None:
    doc = copy.deepcopy(RETRY)
    doc["spec"]["entrypoint"] = "featurize"
    doc["status"]["nodes"] = {
        "fraud": {"id": "fraud", "name": "fraud", "displayName": "fraud", "type": "Retry",
                  "phase": "Running", "templateName": "featurize", "children": ["fraud-1"]},
        "fraud-1": {"id": "fraud-1", "name": "fraud(0)", "displayName": "fraud(0)",
                    "type": "Pod", "phase": "Pending", "templateName": "featurize",
                    "message": "Unschedulable: 0/8 nodes are available"}}
    assert _uris(_plan(doc)) == ["s3://bkt/input/"]


def test_a_when_false_before_the_run_warms_nothing() -> None:
    doc = yaml.safe_load(textwrap.dedent("""\
        apiVersion: argoproj.io/v1alpha1
        kind: Workflow
        metadata: {name: qc, namespace: ml}
        spec:
          entrypoint: main
          arguments: {parameters: [{name: run-qc, value: "false"}, {name: mode, value: train}]}
          templates:
          - name: main
            steps:
            - - {name: qc, template: qc, when: "{{workflow.parameters.run-qc}} == true"}
              - {name: fit, template: fit, when: "{{workflow.parameters.mode}} == train"}
          - name: qc
            container: {image: busybox, args: [--input, "s3://bkt/fastqc/"]}
          - name: fit
            container: {image: busybox, args: [--input, "s3://bkt/train/"]}
        """))
    plan = _plan(doc)
    assert plan.step("qc").never and not plan.step("fit").never
    assert _uris(plan) == ["s3://bkt/train/"]
    assert _uris(_plan(doc, params={"run-qc": "true"})) == ["s3://bkt/fastqc/",
                                                             "s3://bkt/train/"]


def test_a_live_workflow_from_a_template_plans_from_its_stored_spec(capsys) -> None:
    doc = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
           "metadata": {"name": "from-tmpl", "namespace": "ml"},
           "spec": {"arguments": {"parameters": [{"name": "batch", "value": "b12"}]},
                    "workflowTemplateRef": {"name": "annotate"}},
           "status": {"phase": "Running", "nodes": {}, "storedWorkflowTemplateSpec": {
               "entrypoint": "main",
               "arguments": {"parameters": [{"name": "batch", "value": "b12"}]},
               "templates": [{"name": "main", "container": {
                   "image": "vep", "args": ["--in", "s3://bkt/{{workflow.parameters.batch}}/vcf/"]
               }}]}}}
    assert _uris(_plan(doc)) == ["s3://bkt/b12/vcf/"]


def test_short_output_flags_name_writes() -> None:
    doc = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "metadata": {"name": "g"},
           "spec": {"entrypoint": "m", "templates": [{"name": "m", "container": {
               "image": "gatk", "command": ["gatk", "Mutect2"],
               "args": ["-I", "s3://bkt/bam/T.bam", "-O", "s3://bkt/vcf/T.vcf.gz"]}}]}}
    plan = _plan(doc)
    assert _uris(plan) == ["s3://bkt/bam/T.bam"]
    assert [w.uri for w in plan.step("m").writes] == ["s3://bkt/vcf/T.vcf.gz"]


def test_an_exit_hooks_arguments_fill_its_inputs() -> None:
    doc = yaml.safe_load(textwrap.dedent("""\
        apiVersion: argoproj.io/v1alpha1
        kind: Workflow
        metadata: {name: hook}
        spec:
          entrypoint: main
          templates:
          - name: main
            dag:
              tasks:
              - name: call
                template: call
                hooks: {exit: {template: qc, arguments: {parameters: [{name: tumor, value: T1}]}}}
          - name: call
            container: {image: x, args: [--in, "s3://bkt/bam/T1.bam"]}
          - name: qc
            inputs: {parameters: [{name: tumor}]}
            container:
              image: x
              command: [qc]
              env: [{name: PANEL_URI, value: "s3://bkt/panels/{{inputs.parameters.tumor}}.bed"}]
        """))
    assert _uris(_plan(doc)) == ["s3://bkt/bam/T1.bam", "s3://bkt/panels/T1.bed"]


def test_a_sub_path_expr_is_the_folder_the_kubelet_mounts() -> None:
    doc = yaml.safe_load(textwrap.dedent("""\
        apiVersion: argoproj.io/v1alpha1
        kind: Workflow
        metadata: {name: spe}
        spec:
          entrypoint: reencode
          volumes: [{name: footage, persistentVolumeClaim: {claimName: raw-footage}}]
          templates:
          - name: reencode
            container:
              image: x
              command: [transcode]
              args: [--src-root, /footage/2025/03/]
              env: [{name: SITE, value: depot-north}]
              volumeMounts: [{name: footage, mountPath: /footage, subPathExpr: $(SITE)}]
        """))
    plan = _plan(doc, pvc_map={"raw-footage": "s3://raw/footage"})
    assert _uris(plan) == ["s3://raw/footage/depot-north/2025/03"]


def test_a_read_of_what_a_finished_step_wrote_says_it_is_there(tmp_path, capsys) -> None:
    doc = yaml.safe_load(textwrap.dedent("""\
        apiVersion: argoproj.io/v1alpha1
        kind: Workflow
        metadata: {name: intra, namespace: ml}
        spec:
          entrypoint: main
          templates:
          - name: main
            dag:
              tasks:
              - {name: calib, template: calib}
              - {name: reproject, template: reproject, depends: calib}
          - name: calib
            container: {image: x, args: [--out, "s3://bkt/calib/"]}
          - name: reproject
            container:
              image: x
              env: [{name: HOMOGRAPHIES, value: "s3://bkt/calib/h.json"}]
        status:
          phase: Running
          nodes:
            intra: {id: intra, name: intra, displayName: intra, type: DAG, phase: Running}
            intra-1: {id: intra-1, name: intra.calib, displayName: calib, type: Pod,
                      phase: Succeeded}
        """))
    path = tmp_path / "wf.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert cli.main(["plan", str(path)]) == 0
    out = capsys.readouterr().out
    assert "[written by calib earlier in this run: there now]" in out
    assert "s3://bkt/calib/h.json  stage 1" in out


def test_a_loop_over_a_finished_listing_reads_its_items() -> None:
    """``withParam: {{tasks.list.outputs.result}}``: once ``list`` has succeeded, its result
    is in its node (``outputs.result``), so the items, and their data, are known; while it
    runs they are the run's."""
    doc = yaml.safe_load(textwrap.dedent("""\
        apiVersion: argoproj.io/v1alpha1
        kind: Workflow
        metadata: {name: clips, namespace: ml}
        spec:
          entrypoint: main
          templates:
          - name: main
            dag:
              tasks:
              - {name: list, template: list}
              - name: detect
                template: detect
                depends: list
                withParam: "{{tasks.list.outputs.result}}"
                arguments: {parameters: [{name: clip, value: "{{item}}"}]}
          - name: list
            script: {image: python, command: [python], source: "print('[]')"}
          - name: detect
            inputs: {parameters: [{name: clip}]}
            container: {image: x, args: [--in, "s3://bkt/clips/{{inputs.parameters.clip}}"]}
        status:
          phase: Running
          nodes:
            clips: {id: clips, name: clips, displayName: clips, type: DAG, phase: Running}
            clips-1: {id: clips-1, name: clips.list, displayName: list, type: Pod,
                      phase: Succeeded, outputs: {result: '["c1.mp4", "c2.mp4"]'}}
        """))
    assert _uris(_plan(doc)) == ["s3://bkt/clips/c1.mp4", "s3://bkt/clips/c2.mp4"]
    assert _agent_warms(doc) == {"s3://bkt/clips/c1.mp4", "s3://bkt/clips/c2.mp4"}
    doc["status"]["nodes"]["clips-1"].update(phase="Running", outputs=None)
    assert _uris(_plan(doc)) == []


def test_a_key_only_artifact_of_a_live_workflow_uses_the_repository_it_was_given() -> None:
    doc = yaml.safe_load(textwrap.dedent("""\
        apiVersion: argoproj.io/v1alpha1
        kind: Workflow
        metadata: {name: keyonly, namespace: ml}
        spec:
          entrypoint: align
          templates:
          - name: align
            inputs:
              artifacts: [{name: targets, path: /data/t.bed, s3: {key: panels/v2/t.bed}}]
            container: {image: x, command: [cat, /data/t.bed]}
        status:
          phase: Running
          nodes: {}
          artifactRepositoryRef:
            configMap: artifact-repositories
            key: default-v1
            namespace: ml
            artifactRepository: {s3: {bucket: pipeline-artifacts, endpoint: s3.amazonaws.com}}
        """))
    assert _uris(_plan(doc)) == ["s3://pipeline-artifacts/panels/v2/t.bed"]
