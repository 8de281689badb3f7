"""Katib Experiments whose trials are Argo Workflows (``trialSpec`` of kind Workflow).

Shaped like Katib's own katib-argo-workflow example (a preprocessing step whose output feeds
the training step, ``primaryPodLabels`` on the training template), with a dataset read by
the training step, an input artifact, a static fan-out and scheduling constraints, so the
Workflow analysis (the one ``prefetchd plan`` runs on pipelines) has something to find.
"""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest
import yaml

from prefetchd import workloads

TRAIN = "s3://datasets/mnist/train/"
VOCAB = "s3://datasets/mnist/labels.json"


def workflow_trial_spec() -> dict:
    return {
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
        "spec": {
            "serviceAccountName": "argo", "entrypoint": "hp-workflow",
            "templates": [
                {"name": "hp-workflow", "steps": [
                    [{"name": "data-preprocessing", "template": "gen-epochs"}],
                    [{"name": "model-training", "template": "model-training",
                      "arguments": {"parameters": [
                          {"name": "epochs",
                           "value": "{{steps.data-preprocessing.outputs.result}}"}]}}],
                    [{"name": "evaluate", "template": "evaluate",
                      "withItems": ["0", "1"],
                      "arguments": {"parameters": [{"name": "shard", "value": "{{item}}"}]}}],
                ]},
                {"name": "gen-epochs", "script": {
                    "image": "python:alpine3.6", "command": ["python"],
                    "source": "import random\nprint(60000 // random.randint(3000, 30000))\n"}},
                {"name": "model-training",
                 "metadata": {"labels": {"katib.kubeflow.org/model-training": "true"}},
                 "nodeSelector": {"accelerator": "a100"},
                 "inputs": {"parameters": [{"name": "epochs"}],
                            "artifacts": [{"name": "labels", "path": "/in/labels.json",
                                           "s3": {"bucket": "datasets",
                                                  "key": "mnist/labels.json"}}]},
                 "container": {
                     "name": "model-training",
                     "image": "ghcr.io/kubeflow/katib/pytorch-mnist-cpu:latest",
                     "command": ["python3", "/opt/pytorch-mnist/mnist.py",
                                 "--lr=${trialParameters.learningRate}",
                                 "--epochs={{inputs.parameters.epochs}}",
                                 f"--data={TRAIN}"],
                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}},
                {"name": "evaluate", "inputs": {"parameters": [{"name": "shard"}]},
                 "container": {"image": "python:3.11",
                               "command": ["python", "eval.py",
                                           "s3://datasets/mnist/test-{{inputs.parameters.shard}}/"]}},
            ]}}


def experiment(trial_spec: dict) -> dict:
    return {
        "apiVersion": "kubeflow.org/v1beta1", "kind": "Experiment",
        "metadata": {"namespace": "argo", "name": "katib-argo-workflow"},
        "spec": {
            "objective": {"type": "minimize", "goal": 0.001, "objectiveMetricName": "loss"},
            "algorithm": {"algorithmName": "random"},
            "parallelTrialCount": 2, "maxTrialCount": 5, "maxFailedTrialCount": 1,
            "parameters": [{"name": "lr", "parameterType": "double",
                            "feasibleSpace": {"min": "0.01", "max": "0.03"}}],
            "trialTemplate": {
                "retain": True,
                "primaryPodLabels": {"katib.kubeflow.org/model-training": "true"},
                "primaryContainerName": "main",
                "successCondition": 'status.[@this].#(phase=="Succeeded")#',
                "failureCondition": 'status.[@this].#(phase=="Failed")#',
                "trialParameters": [{"name": "learningRate", "reference": "lr"}],
                "trialSpec": trial_spec}}}


def test_an_experiment_of_argo_trials_warms_what_each_trial_workflow_reads() -> None:
    work = workloads.read(experiment(workflow_trial_spec()))
    assert work.key == "experiment argo/katib-argo-workflow" and work.copies == 2
    groups = {g.name: g for g in work.groups}
    assert set(groups) == {"data-preprocessing", "model-training", "evaluate"}
    train = groups["model-training"]
    assert train.after == ("data-preprocessing",) and train.pods == 1
    assert sorted(d.uri for d in train.datasets if d.uri) == [VOCAB, TRAIN]
    assert train.spec["nodeSelector"] == {"accelerator": "a100"}
    assert train.requirements.node_selector == {"accelerator": "a100"}
    assert groups["evaluate"].pods == 2 and groups["evaluate"].after == ("model-training",)
    assert work.stages == {"data-preprocessing": 0, "model-training": 1, "evaluate": 2}
    targets = {t.dataset: t.nodes for t in work.targets()}
    # 2 trials at once: one training pod each; two evaluation pods each (a loop's pods are
    # one group, so each shard is warmed for both pods: more nodes than it needs, not fewer)
    assert targets == {TRAIN: 2, VOCAB: 2, "s3://datasets/mnist/test-0/": 4,
                       "s3://datasets/mnist/test-1/": 4}, targets
    assert any("learningRate" in n for n in work.notes)


def test_a_trial_running_a_workflow_belongs_to_its_experiment() -> None:
    trial = {"apiVersion": "kubeflow.org/v1beta1", "kind": "Trial",
             "metadata": {"name": "katib-argo-workflow-x7k2p", "namespace": "argo",
                          "labels": {"katib.kubeflow.org/experiment": "katib-argo-workflow"}},
             "spec": {"runSpec": {**copy.deepcopy(workflow_trial_spec()),
                                  "metadata": {"name": "katib-argo-workflow-x7k2p",
                                               "namespace": "argo"}}}}
    work = workloads.read(trial)
    assert work.release_key == "experiment argo/katib-argo-workflow"
    assert TRAIN in {t.dataset for t in work.targets()}


def test_a_workflow_is_read_only_as_a_trial_run_not_as_work_of_its_own() -> None:
    """The agent's pipeline path owns Workflows: they are not among the watched kinds."""
    wf = {**workflow_trial_spec(), "metadata": {"name": "w", "namespace": "argo"}}
    with pytest.raises(workloads.WorkloadError, match="not a kind prefetchd reads"):
        workloads.read(wf)
    assert all(k.kind != "Workflow" for k in workloads.KINDS)


def test_an_unanalysable_trial_workflow_is_named_in_the_error() -> None:
    spec = workflow_trial_spec()
    spec["spec"]["templates"][0]["steps"][0][0]["template"] = "no-such-template"
    with pytest.raises(workloads.WorkloadError) as err:
        workloads.read(experiment(spec))
    assert "Experiment argo/katib-argo-workflow" in str(err.value)
    assert "no-such-template" in str(err.value)


def test_a_per_trial_location_from_a_short_list_is_warmed_at_each_value() -> None:
    """``--aug s3://cfg/augment/${trialParameters.aug}.yaml`` (and a path under a fusecache
    volume holding it) with ``aug`` categorical over three values: the trials running at
    once read different ones, so all three are warmed; a placeholder over a range (the
    learning rate) names no location."""
    exp = {"apiVersion": "kubeflow.org/v1beta1", "kind": "Experiment",
           "metadata": {"name": "hpo", "namespace": "ml"},
           "spec": {"parallelTrialCount": 2, "maxTrialCount": 9,
                    "objective": {"type": "maximize", "objectiveMetricName": "map"},
                    "algorithm": {"algorithmName": "random"},
                    "parameters": [
                        {"name": "policy", "parameterType": "categorical",
                         "feasibleSpace": {"list": ["a", "b", "c"]}},
                        {"name": "lr", "parameterType": "double",
                         "feasibleSpace": {"min": "0.0001", "max": "0.01"}}],
                    "trialTemplate": {
                        "primaryContainerName": "main",
                        "trialParameters": [{"name": "aug", "reference": "policy"},
                                            {"name": "lr", "reference": "lr"}],
                        "trialSpec": {"apiVersion": "batch/v1", "kind": "Job", "spec": {
                            "template": {"spec": {"restartPolicy": "Never", "containers": [{
                                "name": "main", "image": "x", "args": [
                                    "--aug", "s3://cfg/augment/${trialParameters.aug}.yaml",
                                    "--lr", "${trialParameters.lr}",
                                    "--weights", "/w/${trialParameters.aug}/model.bin",
                                    "--data", "s3://data/coco/"],
                                "volumeMounts": [{"name": "w", "mountPath": "/w"}]}],
                                "volumes": [{"name": "w", "csi": {
                                    "driver": "csi.fusecache.io", "volumeAttributes": {
                                        "bucket": "models", "prefix": "timm"}}}]}}}}}}}
    work = workloads.read(exp)
    assert sorted(t.dataset for t in work.targets()) == [
        "s3://cfg/augment/a.yaml", "s3://cfg/augment/b.yaml", "s3://cfg/augment/c.yaml",
        "s3://data/coco/", "s3://models/timm/a/model.bin", "s3://models/timm/b/model.bin",
        "s3://models/timm/c/model.bin"]
    assert all(t.nodes == 2 for t in work.targets())


def test_a_per_trial_location_in_an_argo_trial_is_warmed_at_each_value() -> None:
    """Blind job round 17: ``--features=s3://lake/lookback=${trialParameters.lookback}/`` in
    a trial Workflow's step was dropped (warm: nothing), where the same in a Job trial was
    warmed at each categorical value; a per-trial value from a range stays a run-time read."""
    spec = workflow_trial_spec()
    training = spec["spec"]["templates"][2]["container"]
    training["command"].append("--features=s3://lake/lookback=${trialParameters.lookback}/")
    training["command"].append("--noise=s3://lake/noise-${trialParameters.learningRate}/")
    exp = experiment(spec)
    exp["spec"]["parameters"].append({"name": "lookback", "parameterType": "categorical",
                                      "feasibleSpace": {"list": ["48h", "96h"]}})
    exp["spec"]["trialTemplate"]["trialParameters"].append(
        {"name": "lookback", "reference": "lookback"})
    work = workloads.read(exp)
    train = {g.name: g for g in work.groups}["model-training"]
    assert {d.uri for d in train.datasets if d.uri} >= {
        "s3://lake/lookback=48h/", "s3://lake/lookback=96h/"}
    assert [d.pattern for d in train.datasets if d.uri is None] == [
        "s3://lake/noise-${trialParameters.learningRate}/"]
    targets = {t.dataset: t.nodes for t in work.targets()}
    assert targets["s3://lake/lookback=48h/"] == targets["s3://lake/lookback=96h/"] == 2



def test_the_plan_headline_of_argo_trials_says_at_once_once(tmp_path) -> None:
    """Blind job round 57: '4 nodes (2 trials at once) at once, 8 pods in all'."""
    f = tmp_path / "exp.yaml"
    f.write_text(yaml.safe_dump(experiment(workflow_trial_spec())))
    r = subprocess.run([sys.executable, "-m", "prefetchd.cli", "plan", str(f)],
                       capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    head = next(line for line in r.stdout.splitlines() if "trials at once" in line)
    assert head.count("at once") == 1, head
    assert "(2 trials at once), 8 pods in all;" in head, head
