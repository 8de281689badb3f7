"""Argo Workflows as ``kubectl get -o yaml`` shows them mid-flight, found read wrongly by the
blind round "jobs 40" (/tmp/blindjobs40/REPORT.md, defects D3-D6 and D8).

``prefetchd plan`` ignored ``status``: a finished Workflow still had datasets to warm (D3), and
steps that ``status.nodes`` shows as Succeeded, Running or Skipped had their reads warmed as if
they were still to come (D4, D5), while the node agent already read the same nodes. A suspend
step vanished from the plan, so the step after a manual gate looked as if it started right
after the gate's predecessor (D6). A ``steps:`` list written flat (steps, not lists of parallel
steps), which Argo's CRD refuses, was planned (D8).

The objects here are written as Argo's controller writes them: ``status.nodes`` keyed by node
id, each with id, name, displayName, type (Steps, StepGroup, DAG, TaskGroup, Retry, Pod,
Suspend, Skipped), phase, boundaryID and children.
"""

from __future__ import annotations

import copy
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from prefetchd import cli, pipeline
from prefetchd.k8s import agent as ag
from prefetchd.k8s import datasets as dsm
from prefetchd.k8s import placement as pl


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = cli.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "wf.yaml"
    path.write_text(textwrap.dedent(text))
    return str(path)


def plan_of(text: str) -> pipeline.Plan:
    [plan] = pipeline.analyze_documents([yaml.safe_load(textwrap.dedent(text))],
                                        source="wf.yaml")
    return plan


def uris(plan: pipeline.Plan) -> list[str]:
    return [u for u, _, _ in plan.datasets()]


# repro-4: steps, [0].first Succeeded, [1] started (its StepGroup Running, no pod yet)
STEPS_RUNNING = """\
    apiVersion: argoproj.io/v1alpha1
    kind: Workflow
    metadata: {name: repro-4, namespace: claims-ml, uid: u-4}
    spec:
      entrypoint: main
      templates:
      - name: main
        steps:
        - - name: first
            template: t1
        - - name: second
            template: t2
      - name: t1
        container: {image: busybox, args: [--input, "s3://bkt/first-input/"]}
      - name: t2
        container: {image: busybox, args: [--input, "s3://bkt/second-input/"]}
    status:
      phase: Running
      startedAt: "2026-12-06T19:00:00Z"
      nodes:
        repro-4:
          id: repro-4
          name: repro-4
          displayName: repro-4
          type: Steps
          templateName: main
          phase: Running
          children: [repro-4-3060437284]
        repro-4-3060437284:
          id: repro-4-3060437284
          name: repro-4[0]
          displayName: "[0]"
          type: StepGroup
          phase: Succeeded
          boundaryID: repro-4
          children: [repro-4-3731350268]
        repro-4-3731350268:
          id: repro-4-3731350268
          name: repro-4[0].first
          displayName: first
          type: Pod
          templateName: t1
          phase: Succeeded
          boundaryID: repro-4
          hostNodeName: ip-10-0-0-1.ec2.internal
          children: [repro-4-4201065113]
        repro-4-4201065113:
          id: repro-4-4201065113
          name: repro-4[1]
          displayName: "[1]"
          type: StepGroup
          phase: Running
          boundaryID: repro-4
"""

# repro-5: a DAG; train Succeeded, backfill a Skipped node (its `when` false), evaluate to come
DAG_SKIPPED = """\
    apiVersion: argoproj.io/v1alpha1
    kind: Workflow
    metadata: {name: repro-5, namespace: recsys, uid: u-5}
    spec:
      entrypoint: main
      templates:
      - name: main
        dag:
          tasks:
          - name: train
            template: train
          - name: backfill
            template: backfill
            depends: train
            when: "{{tasks.train.outputs.parameters.coverage}} < 0.9"
          - name: evaluate
            template: evaluate
            depends: train
      - name: train
        outputs:
          parameters:
          - name: coverage
            valueFrom: {path: /tmp/coverage}
        container: {image: busybox, args: [--features, "s3://bkt/features/"]}
      - name: backfill
        container: {image: busybox, args: [--uploads, "s3://bkt/skipped-branch/"]}
      - name: evaluate
        container: {image: busybox, args: [--holdout, "s3://bkt/holdout/"]}
    status:
      phase: Running
      nodes:
        repro-5:
          id: repro-5
          name: repro-5
          displayName: repro-5
          type: DAG
          templateName: main
          phase: Running
          children: [repro-5-3290006205]
        repro-5-3290006205:
          id: repro-5-3290006205
          name: repro-5.train
          displayName: train
          type: Pod
          templateName: train
          phase: Succeeded
          boundaryID: repro-5
          outputs:
            parameters:
            - name: coverage
              value: "0.94"
          children: [repro-5-3865647619]
        repro-5-3865647619:
          id: repro-5-3865647619
          name: repro-5.backfill
          displayName: backfill
          type: Skipped
          templateName: backfill
          phase: Skipped
          boundaryID: repro-5
          message: "when '0.94 < 0.9' evaluated false"
"""

# repro-3: finished (its one pod Succeeded, the workflow Succeeded)
FINISHED = """\
    apiVersion: argoproj.io/v1alpha1
    kind: Workflow
    metadata:
      name: repro-3
      namespace: claims-ml
      uid: u-3
      labels:
        workflows.argoproj.io/completed: "true"
        workflows.argoproj.io/phase: Succeeded
    spec:
      entrypoint: route
      templates:
      - name: route
        container:
          image: busybox
          args: [--roster, "s3://acme-claims-curated/adjuster-roster/current/roster.csv"]
    status:
      phase: Succeeded
      startedAt: "2026-12-05T23:00:00Z"
      finishedAt: "2026-12-05T23:07:20Z"
      nodes:
        repro-3:
          id: repro-3
          name: repro-3
          displayName: repro-3
          type: Pod
          templateName: route
          phase: Succeeded
          startedAt: "2026-12-05T23:00:00Z"
          finishedAt: "2026-12-05T23:07:20Z"
"""

# repro-6: train -> approve (suspend: {}) -> publish, as a definition
SUSPEND_DAG = """\
    apiVersion: argoproj.io/v1alpha1
    kind: Workflow
    metadata: {name: repro-6, namespace: recsys, uid: u-6}
    spec:
      entrypoint: main
      templates:
      - name: main
        dag:
          tasks:
          - name: train
            template: train
          - name: approve
            template: gate
            depends: train
          - name: publish
            template: publish
            depends: approve
      - name: train
        container: {image: busybox, args: [--features, "s3://bkt/features/"]}
      - name: gate
        suspend: {}
      - name: publish
        container: {image: busybox, args: [--input, "s3://bkt/catalog/items.parquet"]}
"""


# ---- D3: a finished workflow warms nothing -------------------------------------------------

def test_a_finished_workflow_has_nothing_to_warm(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """D3: status.phase Succeeded; the plan still listed roster.csv to warm."""
    path = write(tmp_path, FINISHED)
    rc, out, _ = run(capsys, "plan", path)
    assert rc == 0
    assert "(status: Succeeded)" in out.splitlines()[0]
    assert "datasets to warm: nothing (succeeded: the workflow has finished" in out
    assert "roster.csv  stage" not in out
    rc, out, _ = run(capsys, "plan", "--json", path)
    doc = json.loads(out)
    assert doc["datasets"] == []
    assert doc["status"] == {"phase": "Succeeded", "finished": True}
    # what the step reads is still shown: the plan, not the warming, changes
    assert doc["steps"][0]["reads"][0]["uri"].endswith("roster.csv")


@pytest.mark.parametrize("phase", ["Failed", "Error"])
def test_a_failed_workflow_has_nothing_to_warm_either(phase: str) -> None:
    """D3: Failed and Error end a workflow as Succeeded does (the agent's done phases)."""
    obj = yaml.safe_load(textwrap.dedent(STEPS_RUNNING))
    obj["status"]["phase"] = phase
    [plan] = pipeline.analyze_documents([obj])
    assert plan.finished and plan.datasets() == []


@pytest.mark.parametrize("kind", ["Workflow", "CronWorkflow"])
def test_a_workflow_suspended_by_hand_has_nothing_to_warm(
        kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Blind jobs round 45: ``argo suspend`` (spec.suspend) on a running Workflow, or a
    suspended CronWorkflow (it makes no run), was warmed as if its steps would start; nothing
    starts until someone resumes it, which no one can foresee."""
    obj = yaml.safe_load(textwrap.dedent(STEPS_RUNNING))
    obj["spec"]["suspend"] = True
    if kind == "CronWorkflow":
        obj = {"apiVersion": obj["apiVersion"], "kind": kind, "metadata": obj["metadata"],
               "spec": {"schedule": "0 2 * * *", "suspend": True,
                        "workflowSpec": {k: v for k, v in obj["spec"].items()
                                         if k != "suspend"}}}
    path = tmp_path / "wf.yaml"
    path.write_text(yaml.safe_dump(obj))
    rc, out, _ = run(capsys, "plan", str(path))
    assert rc == 0
    why = "no step starts" if kind == "Workflow" else "the CronWorkflow starts no run"
    assert f"datasets to warm: nothing (suspended (spec.suspend): {why}" in out
    assert "s3://bkt/second-input/  stage" not in out
    rc, out, _ = run(capsys, "plan", "--json", str(path))
    doc = json.loads(out)
    assert doc["datasets"] == [] and doc["held"].startswith("suspended (spec.suspend)")
    # warm --pipeline fetches nothing (no S3 is asked: the endpoint answers no one) and says why
    rc, out, err = run(capsys, "warm", "--pipeline", str(path), "--cache-dir",
                       str(tmp_path / "cache"), "--endpoint-url", "http://127.0.0.1:9")
    assert rc == 0, err
    assert f"not warmed: repro-4: suspended (spec.suspend): {why}" in out + err
    obj.get("spec", {}).pop("suspend")  # resumed: its steps still to come are warmed again
    [plan] = pipeline.analyze_documents([obj])
    assert "s3://bkt/second-input/" in uris(plan) and plan.held is None


SHUTDOWN = """\
    apiVersion: argoproj.io/v1alpha1
    kind: Workflow
    metadata: {name: stop-probe-x1, namespace: default}
    spec:
      entrypoint: main
      onExit: on-exit
      shutdown: SHUTDOWN
      templates:
      - name: main
        steps:
        - - {name: a, template: a}
        - - {name: b, template: b}
      - {name: a, container: {image: busybox, args: [--data=s3://probe-bkt/a-input/]}}
      - {name: b, container: {image: busybox, args: [--data=s3://probe-bkt/b-input/]}}
      - {name: on-exit, container: {image: busybox, args: [--data=s3://probe-bkt/exit-input/]}}
    status:
      phase: Running
      nodes:
        stop-probe-x1: {id: stop-probe-x1, name: stop-probe-x1, displayName: stop-probe-x1,
                        type: Steps, phase: Running, children: [stop-probe-x1-1]}
        stop-probe-x1-1: {id: stop-probe-x1-1, name: "stop-probe-x1[0]", displayName: "[0]",
                          type: StepGroup, phase: Running, children: [stop-probe-x1-2]}
        stop-probe-x1-2: {id: stop-probe-x1-2, name: "stop-probe-x1[0].a", displayName: a,
                          type: Pod, phase: Running}
"""


def test_a_workflow_being_stopped_or_terminated_warms_only_its_exit_handler_if_any() -> None:
    """Blind job round 51: ``argo terminate`` / ``argo stop`` set ``spec.shutdown`` before the
    controller marks the nodes; the steps still to come were warmed. Terminate runs nothing
    more; Stop runs the exit handler."""
    plan = plan_of(SHUTDOWN.replace("SHUTDOWN", "Terminate"))
    assert plan.held.startswith("shutting down (spec.shutdown: Terminate)") and uris(plan) == []
    plan = plan_of(SHUTDOWN.replace("SHUTDOWN", "Stop"))
    assert plan.held.endswith("its exit handler still runs")
    assert uris(plan) == ["s3://probe-bkt/exit-input/"]
    plan = plan_of(SHUTDOWN.replace("      shutdown: SHUTDOWN\n", ""))
    assert uris(plan) == ["s3://probe-bkt/b-input/", "s3://probe-bkt/exit-input/"]


# ---- D4/D5: started steps' reads are not warmed --------------------------------------------

def test_a_succeeded_step_is_not_warmed_for(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """D4: [0].first Succeeded; its input was still in "datasets to warm"."""
    path = write(tmp_path, STEPS_RUNNING)
    rc, out, _ = run(capsys, "plan", path)
    assert rc == 0
    assert "  first (container)  [Succeeded: not warmed]" in out
    assert "  second (container) after first\n" in out
    assert out.split("datasets to warm (plan order):\n")[1] == (
        "  s3://bkt/second-input/  stage 1  read by second\n")
    doc = json.loads(run(capsys, "plan", "--json", path)[1])
    steps = {s["id"]: s for s in doc["steps"]}
    assert (steps["first"]["phase"], steps["first"]["started"]) == ("Succeeded", True)
    assert (steps["second"]["phase"], steps["second"]["started"]) == (None, False)
    assert doc["datasets"] == [{"uri": "s3://bkt/second-input/", "stage": 1,
                                "steps": ["second"]}]
    assert doc["status"] == {"phase": "Running", "finished": False}


def test_a_skipped_dag_task_is_not_warmed_for(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """D5: backfill is a Skipped node (its `when` was false); its input was still warmed."""
    plan = plan_of(DAG_SKIPPED)
    assert uris(plan) == ["s3://bkt/holdout/"]
    assert plan.step("backfill").phase == "Skipped"
    out = run(capsys, "plan", write(tmp_path, DAG_SKIPPED))[1]
    # (train's coverage is in its node: the `when` is known false, as the controller found)
    assert "backfill (container) after train  [if {{tasks.train.outputs.parameters.coverage}}" \
        " < 0.9; when false: does not run, not warmed; Skipped: not warmed]" in out


def test_running_and_pending_steps() -> None:
    """Running is started (its pod has its data to read now); Pending is not yet."""
    obj = yaml.safe_load(textwrap.dedent(DAG_SKIPPED))
    nodes = obj["status"]["nodes"]
    nodes["repro-5-1"] = {"id": "repro-5-1", "name": "repro-5.evaluate",
                          "displayName": "evaluate", "type": "Pod", "templateName": "evaluate",
                          "phase": "Pending", "boundaryID": "repro-5"}
    [plan] = pipeline.analyze_documents([obj])
    assert uris(plan) == ["s3://bkt/holdout/"]
    nodes["repro-5-1"]["phase"] = "Running"
    [plan] = pipeline.analyze_documents([obj])
    assert uris(plan) == []
    text = cli.render_plan(plan)
    assert "evaluate (container) after train  [Running: not warmed]" in text
    assert "datasets to warm: nothing (the steps that read them have started)" in text


def test_a_dataset_read_before_and_after_is_warmed_for_the_step_to_come() -> None:
    """A location a started step and a later one read: warmed, at the later one's stage."""
    obj = yaml.safe_load(textwrap.dedent(STEPS_RUNNING))
    obj["spec"]["templates"][2]["container"]["args"] += ["--extra", "s3://bkt/first-input/"]
    [plan] = pipeline.analyze_documents([obj])
    assert plan.datasets() == [("s3://bkt/second-input/", 1, ["second"]),
                               ("s3://bkt/first-input/", 1, ["second"])]


LOOPS = """\
    apiVersion: argoproj.io/v1alpha1
    kind: Workflow
    metadata: {name: loops, namespace: ml, uid: u-l}
    spec:
      entrypoint: main
      templates:
      - name: main
        steps:
        - - name: shard
            template: read
            arguments: {parameters: [{name: p, value: "{{item}}"}]}
            withItems: [a, b]
          - name: fan
            template: dag
      - name: dag
        dag:
          tasks:
          - name: month
            template: read
            arguments: {parameters: [{name: p, value: "m-{{item}}"}]}
            withItems: ["11", "12"]
      - name: read
        inputs: {parameters: [{name: p}]}
        container: {image: busybox, args: [--in, "s3://bkt/{{inputs.parameters.p}}/"]}
    status:
      phase: Running
      nodes:
        loops:
          {id: loops, name: loops, displayName: loops, type: Steps, templateName: main,
           phase: Running, children: [loops-1]}
        loops-1:
          {id: loops-1, name: "loops[0]", displayName: "[0]", type: StepGroup,
           phase: Running, boundaryID: loops, children: [loops-2, loops-3, loops-4]}
        loops-2:
          {id: loops-2, name: "loops[0].shard(0:a)", displayName: "shard(0:a)", type: Pod,
           templateName: read, phase: Running, boundaryID: loops}
        loops-3:
          {id: loops-3, name: "loops[0].shard(1:b)", displayName: "shard(1:b)", type: Pod,
           templateName: read, phase: Pending, boundaryID: loops}
        loops-4:
          {id: loops-4, name: "loops[0].fan", displayName: fan, type: DAG, templateName: dag,
           phase: Running, boundaryID: loops, children: [loops-5]}
        loops-5:
          {id: loops-5, name: "loops[0].fan.month", displayName: month, type: TaskGroup,
           templateName: read, phase: Running, boundaryID: loops-4, children: [loops-6]}
        loops-6:
          {id: loops-6, name: "loops[0].fan.month(0:11)", displayName: "month(0:11)",
           type: Pod, templateName: read, phase: Pending, boundaryID: loops-4}
"""


def test_a_loop_step_counts_as_started_as_the_agent_counts_it() -> None:
    """A looped step has a node per item (``shard(0:a)``): only a node of the step's own
    name counts, as in the agent; a steps loop has no such node, so ``shard`` is still to
    come. A DAG loop's TaskGroup (``month``) runs while its items start one by one: Running,
    it has not started as a whole (blind job round 42: an item still Pending was not warmed
    for); done, it has."""
    plan = plan_of(LOOPS)
    assert not plan.step("month").started and not plan.step("shard").started
    assert uris(plan) == ["s3://bkt/a/", "s3://bkt/b/", "s3://bkt/m-11/", "s3://bkt/m-12/"]
    done = LOOPS.replace("displayName: month, type: TaskGroup,\n           templateName: read, "
                         "phase: Running", "displayName: month, type: TaskGroup,\n"
                         "           templateName: read, phase: Succeeded")
    assert done != LOOPS and plan_of(done).step("month").finished


def _agent_warms(obj: dict[str, Any]) -> set[str]:
    """What the node agent warms for *obj*, alone in a one-node cluster."""
    warmed: list[str] = []
    agent = ag.Agent(ag.AgentConfig(node_name="me"), dsm.ObjectsView([]),
                     lambda req: warmed.append(req.dataset))
    agent.on_node("ADDED", {"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": "me", "labels": {}, "annotations": {pl.CACHE_FREE_ANNOTATION: str(2**40)}}})
    agent.on_workflow("ADDED", obj)
    return set(warmed)


@pytest.mark.parametrize("text", [STEPS_RUNNING, DAG_SKIPPED, FINISHED, LOOPS, SUSPEND_DAG])
def test_the_plan_warms_what_the_agent_warms(text: str) -> None:
    """One reading of status (prefetchd.pipeline._status) for ``plan`` and the agent."""
    obj = yaml.safe_load(textwrap.dedent(text))
    [plan] = pipeline.analyze_documents([copy.deepcopy(obj)])
    assert set(uris(plan)) == _agent_warms(obj)


def test_without_status_the_plan_is_as_before() -> None:
    """A definition (no status, or the KFP compiler's ``startedAt: null`` placeholder) plans
    every step, and its JSON has no status keys."""
    obj = yaml.safe_load(textwrap.dedent(STEPS_RUNNING))
    del obj["status"]
    for status in (None, {"startedAt": None, "finishedAt": None}):
        if status is not None:
            obj["status"] = status
        [plan] = pipeline.analyze_documents([obj])
        doc = plan.to_json()
        assert uris(plan) == ["s3://bkt/first-input/", "s3://bkt/second-input/"]
        assert "status" not in doc and "phase" not in doc["steps"][0]
        assert "(status:" not in cli.render_plan(plan)


# ---- D6: a suspend step is shown ------------------------------------------------------------

def test_a_suspend_gate_is_shown_and_what_follows_waits_for_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """D6: approve (``suspend: {}``) vanished; publish read as starting right after train.
    It is no step (the corpus truth lists executable steps only), but the plan names it."""
    plan = plan_of(SUSPEND_DAG)
    assert [s.id for s in plan.steps] == ["train", "publish"]
    assert plan.step("publish").depends_on == ["train"]
    assert plan.step("publish").waits_for == ["approve"]
    path = write(tmp_path, SUSPEND_DAG)
    out = run(capsys, "plan", path)[1]
    assert out.splitlines()[0] == "repro-6  [argo, Workflow]  2 steps, 2 stages, 1 suspend steps"
    assert ("  publish (container) after train  [after suspend approve: waits for argo resume]"
            in out)
    assert "  approve (suspend) after train, before publish  [waits for argo resume]" in out
    doc = json.loads(run(capsys, "plan", "--json", path)[1])
    assert doc["suspends"] == [{"id": "approve", "template": "gate", "duration": None,
                                "depends_on": ["train"], "stage": 1, "waiting": ["publish"]}]
    assert doc["steps"][1]["waits_for"] == ["approve"]
    assert "waits_for" not in doc["steps"][0]


def test_a_suspend_step_in_steps_with_a_duration_and_a_template_after_it() -> None:
    """In ``steps``: a gate with a duration (a parameter) before a DAG template; only the
    template's first step waits for it (the next one waits through that one)."""
    plan = plan_of("""\
        apiVersion: argoproj.io/v1alpha1
        kind: Workflow
        metadata: {name: w}
        spec:
          entrypoint: main
          arguments: {parameters: [{name: wait, value: 20m}]}
          templates:
          - name: main
            steps:
            - - {name: prep, template: c}
            - - {name: hold, template: hold}
            - - {name: rest, template: rest}
          - name: hold
            suspend: {duration: "{{workflow.parameters.wait}}"}
          - name: rest
            dag:
              tasks:
              - {name: a, template: c}
              - {name: b, template: c, depends: a}
          - name: c
            container: {image: busybox, args: [--in, "s3://bkt/x/"]}
        """)
    [hold] = plan.suspends
    assert (hold.id, hold.duration, hold.depends_on) == ("hold", "20m", ["prep"])
    assert plan.step("a").depends_on == ["prep"] and plan.step("a").waits_for == ["hold"]
    assert plan.step("b").waits_for == []
    assert plan.waiting_for("hold") == ["a"]
    assert "[after suspend hold: waits 20m (or argo resume)]" in cli.render_plan(plan)


def test_a_suspended_workflow_shows_the_gate_it_waits_at() -> None:
    """The node of a suspend step is Running while the workflow waits there."""
    obj = yaml.safe_load(textwrap.dedent(SUSPEND_DAG))
    obj["status"] = {"phase": "Running", "nodes": {
        "repro-6": {"id": "repro-6", "name": "repro-6", "displayName": "repro-6",
                    "type": "DAG", "templateName": "main", "phase": "Running",
                    "children": ["repro-6-1"]},
        "repro-6-1": {"id": "repro-6-1", "name": "repro-6.train", "displayName": "train",
                      "type": "Pod", "templateName": "train", "phase": "Succeeded",
                      "boundaryID": "repro-6", "children": ["repro-6-2"]},
        "repro-6-2": {"id": "repro-6-2", "name": "repro-6.approve", "displayName": "approve",
                      "type": "Suspend", "templateName": "gate", "phase": "Running",
                      "boundaryID": "repro-6"}}}
    [plan] = pipeline.analyze_documents([obj])
    assert plan.suspends[0].phase == "Running"
    assert uris(plan) == ["s3://bkt/catalog/items.parquet"]
    assert ("approve (suspend) after train, before publish  [Running: waits for argo resume]"
            in cli.render_plan(plan))
    assert plan.to_json()["suspends"][0]["phase"] == "Running"


# ---- D8: a flat `steps` list is refused ----------------------------------------------------

def test_a_flat_steps_list_is_refused(tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    """D8: ``steps: [- name: ocr ...]`` (a step where a list of parallel steps belongs) was
    planned; Argo's CRD and controller refuse it."""
    path = write(tmp_path, """\
        apiVersion: argoproj.io/v1alpha1
        kind: Workflow
        metadata: {generateName: repro-8-, namespace: claims-ml}
        spec:
          entrypoint: main
          templates:
          - name: main
            steps:
            - name: ocr
              template: ocr
          - name: ocr
            container: {image: busybox, args: [--input, "s3://bkt/docs/"]}
        """)
    rc, out, err = run(capsys, "plan", path)
    assert rc == 2 and out == ""
    assert len(err.splitlines()) == 1
    assert "template 'main' steps[0]" in err and "list of parallel steps" in err


# Steps are found by their node's name, which is unique, not by the display name, which is not:
# two sub-DAGs calling one template each have a task "fetch" (nodes ``twins.a.fetch`` and
# ``twins.b.fetch``, both shown as "fetch"); a steps loop has only its StepGroup; a container
# exit handler's node is ``<workflow>.onExit`` and a task's ``<task node>.onExit``; a container
# entrypoint's node is the workflow's own.
TWINS = """\
    apiVersion: argoproj.io/v1alpha1
    kind: Workflow
    metadata: {name: twins, namespace: ml, uid: u-twins}
    spec:
      entrypoint: main
      onExit: report
      templates:
      - name: main
        dag:
          tasks:
          - {name: a, template: part, arguments: {parameters: [{name: p, value: x}]}}
          - {name: b, template: part, arguments: {parameters: [{name: p, value: y}]}}
          - name: train
            template: read
            depends: a && b
            arguments: {parameters: [{name: p, value: train}]}
            hooks: {exit: {template: audit}}
      - name: part
        inputs: {parameters: [{name: p}]}
        dag:
          tasks:
          - name: fetch
            template: read
            arguments: {parameters: [{name: p, value: "{{inputs.parameters.p}}"}]}
      - name: read
        inputs: {parameters: [{name: p}]}
        container: {image: busybox, args: [--in, "s3://bkt/{{inputs.parameters.p}}/"]}
      - name: audit
        container: {image: busybox, args: [--in, "s3://bkt/audit/"]}
      - name: report
        container: {image: busybox, args: [--in, "s3://bkt/report/"]}
    status:
      phase: Running
      nodes:
        twins: {id: twins, name: twins, displayName: twins, type: DAG, templateName: main,
                phase: Running, children: [twins-1, twins-3]}
        twins-1: {id: twins-1, name: twins.a, displayName: a, type: DAG, templateName: part,
                  phase: Running, boundaryID: twins, children: [twins-2]}
        twins-2: {id: twins-2, name: twins.a.fetch, displayName: fetch, type: Pod,
                  templateName: read, phase: Pending, boundaryID: twins-1}
        twins-3: {id: twins-3, name: twins.b, displayName: b, type: DAG, templateName: part,
                  phase: Succeeded, boundaryID: twins, children: [twins-4]}
        twins-4: {id: twins-4, name: twins.b.fetch, displayName: fetch, type: Pod,
                  templateName: read, phase: Succeeded, boundaryID: twins-3}
"""


def test_two_steps_of_one_name_are_told_apart_by_their_nodes() -> None:
    """Before, a's step took the phase of whichever "fetch" node came last (b's: Succeeded),
    so a's data, still to be read, was not warmed; and b's step matched no node, so the data
    it had already read was warmed."""
    plan = plan_of(TWINS)
    assert plan.step("a/fetch").phase == "Pending"
    assert plan.step("b/fetch").phase == "Succeeded"
    assert uris(plan) == ["s3://bkt/x/", "s3://bkt/train/", "s3://bkt/audit/",
                          "s3://bkt/report/"]
    assert set(uris(plan)) == _agent_warms(yaml.safe_load(textwrap.dedent(TWINS)))


def test_exit_handlers_are_found_by_their_onexit_nodes() -> None:
    """The workflow's exit handler runs as ``twins.onExit``, a task's as ``twins.train.onExit``;
    both were never matched (their display names are the node names), so their data was
    warmed while they ran and after."""
    obj = yaml.safe_load(textwrap.dedent(TWINS))
    nodes = obj["status"]["nodes"]
    for n in nodes.values():
        n["phase"] = "Succeeded"
    nodes["twins-5"] = {"id": "twins-5", "name": "twins.train", "displayName": "train",
                        "type": "Pod", "templateName": "read", "phase": "Succeeded",
                        "boundaryID": "twins"}
    nodes["twins-6"] = {"id": "twins-6", "name": "twins.train.onExit",
                        "displayName": "train.onExit", "type": "Pod", "templateName": "audit",
                        "phase": "Succeeded", "boundaryID": "twins"}
    nodes["twins-7"] = {"id": "twins-7", "name": "twins.onExit", "displayName": "twins.onExit",
                        "type": "Pod", "templateName": "report", "phase": "Running"}
    [plan] = pipeline.analyze_documents([copy.deepcopy(obj)])
    assert plan.step("audit").phase == "Succeeded" and plan.step("report").phase == "Running"
    assert uris(plan) == [] and _agent_warms(obj) == set()


STEPS_LOOP_DONE = """\
    apiVersion: argoproj.io/v1alpha1
    kind: Workflow
    metadata: {name: shards, namespace: ml, uid: u-shards}
    spec:
      entrypoint: main
      templates:
      - name: main
        steps:
        - - name: shard
            template: read
            arguments: {parameters: [{name: p, value: "{{item}}"}]}
            withItems: [a, b]
        - - {name: train, template: train}
      - name: read
        inputs: {parameters: [{name: p}]}
        container: {image: busybox, args: [--in, "s3://bkt/{{inputs.parameters.p}}/"]}
      - name: train
        container: {image: busybox, args: [--in, "s3://bkt/train/"]}
    status:
      phase: Running
      nodes:
        shards: {id: shards, name: shards, displayName: shards, type: Steps,
                 templateName: main, phase: Running, children: [shards-1]}
        shards-1: {id: shards-1, name: "shards[0]", displayName: "[0]", type: StepGroup,
                   phase: Succeeded, boundaryID: shards, children: [shards-2, shards-3]}
        shards-2: {id: shards-2, name: "shards[0].shard(0:a)", displayName: "shard(0:a)",
                   type: Pod, templateName: read, phase: Succeeded, boundaryID: shards,
                   children: [shards-4]}
        shards-3: {id: shards-3, name: "shards[0].shard(1:b)", displayName: "shard(1:b)",
                   type: Pod, templateName: read, phase: Succeeded, boundaryID: shards,
                   children: [shards-4]}
        shards-4: {id: shards-4, name: "shards[1]", displayName: "[1]", type: StepGroup,
                   phase: Running, boundaryID: shards, children: []}
"""


def test_a_steps_loop_is_done_when_its_step_group_is() -> None:
    """A steps loop has no node of its own, only its items' under the StepGroup: once that is
    done the loop's data may go (before, the loop stayed "to come" to the workflow's end, and
    the agent kept its data pinned)."""
    plan = plan_of(STEPS_LOOP_DONE)
    assert plan.step("shard").finished and uris(plan) == ["s3://bkt/train/"]
    running = STEPS_LOOP_DONE.replace('"[0]", type: StepGroup,\n                   phase: '
                                      'Succeeded', '"[0]", type: StepGroup,\n'
                                      '                   phase: Running')
    assert running != STEPS_LOOP_DONE
    assert plan_of(running).step("shard").phase == "Pending"  # an item may not have started


def test_a_container_entrypoint_is_the_workflows_own_node() -> None:
    doc = """\
        apiVersion: argoproj.io/v1alpha1
        kind: Workflow
        metadata: {name: solo, namespace: ml, uid: u-solo}
        spec:
          entrypoint: train
          templates:
          - name: train
            container: {image: busybox, args: [--in, "s3://bkt/train/"]}
        status:
          phase: Running
          nodes:
            solo: {id: solo, name: solo, displayName: solo, type: Pod, templateName: train,
                   phase: Running}
        """
    plan = plan_of(doc)
    assert plan.step("train").started and uris(plan) == []
