"""Blind job round 54 (where and when the pods of distributed training run): the last of a
program's bare path operands (OpenFold's output folder) was warmed as a read on a writable
claim; a nodeSelector and a required node affinity no node can both match were not said; a
Workflow step's node constraints were shown nowhere in its plan; ``{{workflow.namespace}}``
of a Workflow that names its namespace was known only at run time."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from prefetchd import pipeline, workloads
from prefetchd.workloads._library import Library


def _job(spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "fold", "namespace": "protein-ml"},
            "spec": {"template": {"spec": {"restartPolicy": "Never", **spec}}}}


def _refs(job: dict[str, Any]) -> list[tuple[str | None, str, str]]:
    work = workloads.read(copy.deepcopy(job), Library())
    return [(r.claim, r.path, r.direction) for g in work.groups for r in g.datasets]


OPENFOLD = {"name": "train", "image": "ghcr.io/example-bio/openfold-torch:2.2.0",
            "command": ["python3", "/opt/openfold/train_openfold.py"],
            "args": ["/data/mmcif_files/", "/data/alignments/", "/ckpt/run-1/", "2021-10-10"],
            "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": True},
                             {"name": "ckpt", "mountPath": "/ckpt"}]}
VOLUMES = [{"name": "data", "persistentVolumeClaim": {"claimName": "pdb-data"}},
           {"name": "ckpt", "persistentVolumeClaim": {"claimName": "fold-ckpt"}}]


def test_the_last_bare_path_operand_may_be_the_output() -> None:
    refs = _refs(_job({"containers": [OPENFOLD], "volumes": VOLUMES}))
    assert ("pdb-data", "mmcif_files", "read") in refs
    assert ("pdb-data", "alignments", "read") in refs
    # a writable claim: read or written (warmed only if the claim is a read-only fusecache
    # volume, blind job round 56)
    assert [(c, d) for c, _p, d in refs if c == "fold-ckpt"] == [("fold-ckpt", "unknown")]
    # one path operand only: read, as before; the script an interpreter runs is no operand
    one = copy.deepcopy(OPENFOLD)
    one["args"] = ["/data/mmcif_files/"]
    assert ("pdb-data", "mmcif_files", "read") in _refs(_job({"containers": [one],
                                                             "volumes": VOLUMES}))


def test_constraints_no_node_can_meet_are_said() -> None:
    spec = {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "nvidia.com/gpu.product", "operator": "In",
                     "values": ["NVIDIA-H100-80GB-HBM3"]}]}]}}},
            "containers": [{"name": "t", "image": "x", "args": ["--audio=s3://asr/a/"]}]}
    work = workloads.read(_job(spec), Library())
    assert [n for g in work.groups for n in g.notes] == [
        "nodeSelector nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB and the required node "
        "affinity (nvidia.com/gpu.product In NVIDIA-H100-80GB-HBM3): no node matches both, "
        "so its pods never schedule"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    terms["nodeSelectorTerms"].append({"matchExpressions": [  # another term fits: fine
        {"key": "nvidia.com/gpu.product", "operator": "Exists"}]})
    assert [n for g in workloads.read(_job(spec), Library()).groups for n in g.notes] == []


WORKFLOW = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
            "metadata": {"name": "probe-train-1", "namespace": "speech-research"},
            "spec": {"entrypoint": "train", "templates": [{
                "name": "train",
                "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                                 "effect": "NoSchedule"}],
                "container": {"image": "t:1", "args": [
                    "--init-from=s3://speech-models/base/", "--eval=s3://speech-eval/"
                    "{{workflow.namespace}}/set1/"],
                    "resources": {"limits": {"nvidia.com/gpu": 8}}}}]}}


def test_a_workflow_steps_node_constraints_are_shown(tmp_path: Path) -> None:
    f = tmp_path / "wf.yaml"
    f.write_text(yaml.safe_dump(WORKFLOW))
    r = subprocess.run([sys.executable, "-m", "prefetchd.cli", "plan", str(f)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert ("      runs on: nodeSelector nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3; "
            "tolerates nvidia.com/gpu:NoSchedule; requests nvidia.com/gpu=8") in r.stdout


def test_the_namespace_a_workflow_names_is_known() -> None:
    [plan] = pipeline.analyze_documents([copy.deepcopy(WORKFLOW)], source="w.yaml")
    assert [r.uri for r in plan.steps[0].reads] == ["s3://speech-models/base/",
                                                    "s3://speech-eval/speech-research/set1/"]
    unnamed = copy.deepcopy(WORKFLOW)
    del unnamed["metadata"]["namespace"]  # (argo submit -n decides): the run's
    [plan] = pipeline.analyze_documents([unnamed], source="w.yaml")
    assert [r.uri for r in plan.steps[0].reads] == ["s3://speech-models/base/", None]
