"""Blind job round 61 (upstream examples adapted to S3): a typo in a TrainJob's
``spec.trainer`` or in its ``runtimePatches`` pod fields was dropped without a word (the API
server refuses them all); a Python program's directory listing of a folder under a mount
(``os.listdir``, ``glob.glob``, ``os.scandir``, ``Path.iterdir``) warmed the whole volume;
a ``cp`` destination was listed as a read (with a ``--pvc`` hint)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import workload_helpers as h
import yaml

from prefetchd import cli, workloads

RUNTIME = "kubeflow-trainer/torch_distributed.yaml"


def trainjob(trainer: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "t", "namespace": "default"},
            "spec": {"runtimeRef": {"name": "torch-distributed"},
                     "trainer": trainer or {"numNodes": 2, "command": [
                         "python3", "train.py", "--data", "s3://b/p/"]}, **spec}}


def patch(pod_spec: dict[str, Any], job: str = "node", **pod: Any) -> list[dict[str, Any]]:
    return [{"manager": "me", "trainingRuntimeSpec": {"template": {"spec": {
        "replicatedJobs": [{"name": job, "template": {"spec": {"template": {
            "spec": pod_spec, **pod}}}}]}}}}]


def plan_error(tmp_path: Path, capsys, obj: dict[str, Any]) -> str:
    f = tmp_path / "tj.yaml"
    f.write_text(yaml.safe_dump(obj))
    assert cli.main(["plan", str(f), h.path(RUNTIME)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "tj.yaml" in err and "TrainJob default/t" in err
    return err


@pytest.mark.parametrize("obj, field, meant", [
    (trainjob({"numNodes": 2, "comand": ["python3", "train.py", "s3://b/p/"]}),
     "spec.trainer.comand", "command"),
    (trainjob({"numNodes": 2, "resourcePerNode": {"limits": {"nvidia.com/gpu": 1}}}),
     "spec.trainer.resourcePerNode", "resourcesPerNode"),
    (trainjob(runtimePatches=patch({"nodeSelecter": {"pool": "gpu"}})),
     "template.spec.nodeSelecter", "nodeSelector"),
    (trainjob(runtimePatches=patch({"tolerationz": [{"key": "a", "operator": "Exists"}]})),
     "template.spec.tolerationz", "tolerations"),
    (trainjob(runtimePatches=patch({"containers": [
        {"name": "node", "volumeMount": [{"name": "x", "mountPath": "/x"}]}]})),
     "template.spec.containers[node].volumeMount", "volumeMounts"),
    (trainjob(runtimePatches=patch({"containers": [
        {"name": "node", "volumeMounts": [{"name": "x", "mountPth": "/x"}]}]})),
     "volumeMounts[x].mountPth", "mountPath"),
    (trainjob(runtimePatches=patch({}, metadata={"lables": {"a": "b"}})),
     "template.spec.template.metadata.lables", "labels"),
    (trainjob(runtimePatches=[{"manager": "me", "trainingRuntimeSpec": {"template": {
        "spec": {"replicatedJob": []}}}}]),
     "trainingRuntimeSpec.template.spec.replicatedJob", "replicatedJobs"),
    (trainjob(runtimePatch=patch({})), "spec.runtimePatch", "runtimePatches"),
    (trainjob(initializer={"dataset": {"storageURI": "s3://b/ds/"}}),
     "spec.initializer.dataset.storageURI", "storageUri"),
    (trainjob(podTemplateOverrides=[{"targetJobs": [{"name": "node"}],
                                     "spec": {"nodeSelecter": {"pool": "gpu"}}}]),
     "spec.podTemplateOverrides[0].spec.nodeSelecter", "nodeSelector"),
])
def test_a_trainjob_field_typo_is_refused_naming_file_object_and_field(
        tmp_path: Path, capsys, obj: dict[str, Any], field: str, meant: str) -> None:
    err = plan_error(tmp_path, capsys, obj)
    assert field in err and f"did you mean {meant}?" in err, err


def test_the_upstream_trainjobs_and_every_real_field_still_pass() -> None:
    lib = h.library(RUNTIME)
    for name in ("trainjob-01-multi-node.yaml", "trainjob-02-runtime-patches.yaml",
                 "trainjob-03-kueue-integration.yaml"):
        workloads.read(h.doc(f"kubeflow-trainer/{name}", "TrainJob"), lib)
    # every field the v1alpha1 CRD names for a trainer and a runtime patch's pod
    obj = trainjob({"numNodes": 2, "numProcPerNode": "auto", "image": "x:1",
                    "command": ["python3", "-c", "pass"], "args": ["s3://b/p/"],
                    "env": [{"name": "A", "value": "1"}],
                    "resourcesPerNode": {"limits": {"cpu": "1"}}},
                   activeDeadlineSeconds=60, managedBy="trainer.kubeflow.org/trainjob-controller",
                   suspend=False,
                   initializer={"dataset": {"storageUri": "s3://b/ds/", "env": [],
                                            "secretRef": {"name": "s"}}},
                   runtimePatches=patch({
                       "affinity": {}, "imagePullSecrets": [], "nodeSelector": {"a": "b"},
                       "schedulingGates": [], "securityContext": {},
                       "serviceAccountName": "sa", "terminationGracePeriodSeconds": 5,
                       "tolerations": [], "volumes": [],
                       "initContainers": [],
                       "containers": [{"name": "node", "env": [], "securityContext": {},
                                       "volumeMounts": []}]},
                       metadata={"labels": {"a": "b"}, "annotations": {}}))
    obj["spec"]["runtimePatches"][0]["time"] = "2026-01-01T00:00:00Z"
    work = workloads.read(copy.deepcopy(obj), h.library(RUNTIME))
    assert [t.dataset for t in work.targets()] == ["s3://b/p/"]


PV = [{"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "coco"},
       "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadOnlyMany"],
                "storageClassName": "", "claimRef": {"namespace": "default", "name": "coco"},
                "csi": {"driver": "csi.fusecache.io", "volumeHandle": "coco",
                        "volumeAttributes": {"bucket": "ml-datasets", "prefix": "vision"}}}},
      {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
       "metadata": {"name": "coco", "namespace": "default"},
       "spec": {"accessModes": ["ReadOnlyMany"], "storageClassName": "", "volumeName": "coco",
                "resources": {"requests": {"storage": "1Gi"}}}}]


def python_job(code: str) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "j", "namespace": "default"},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "c", "image": "python", "command": ["python3", "-c", code],
                 "volumeMounts": [{"name": "d", "mountPath": "/data"}]}],
                "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "coco"}}]}}}}


def warmed(tmp_path: Path, capsys, obj: dict[str, Any]) -> list[str]:
    f = tmp_path / "all.yaml"
    f.write_text(yaml.safe_dump_all([obj, *PV]))
    assert cli.main(["plan", str(f), "--json"]) == 0
    (work,) = json.loads(capsys.readouterr().out)["work"]
    return sorted(w["dataset"] for w in work["warm"])


FOLDER = "s3://ml-datasets/vision/coco/train2017"


@pytest.mark.parametrize("code, want", [
    ('import os\nx = os.listdir("/data/coco/train2017")\nprint(x)\n', FOLDER),
    ('import os\nimgs = os.listdir("/data/coco/train2017")\nprint(len(imgs))\n', FOLDER),
    ('import os\nfor f in os.listdir("/data/coco/train2017"):\n'
     '    open(os.path.join("/data/coco/train2017", f), "rb").read()\n', FOLDER),
    ('import glob\nx = glob.glob("/data/coco/train2017/*.jpg")\nprint(x)\n',
     FOLDER + "/*.jpg"),
    ('import os\nwith os.scandir("/data/coco/train2017") as it:\n'
     '    print([e.name for e in it])\n', FOLDER),
    ('from pathlib import Path\nprint(list(Path("/data/coco/train2017").iterdir()))\n',
     FOLDER),
    ('from pathlib import Path\nfor p in Path("/data/coco/train2017").iterdir():\n'
     '    p.read_bytes()\n', FOLDER),
    ('from pathlib import Path\nfor p in Path("/data/coco").glob("train2017/*.jpg"):\n'
     '    p.read_bytes()\n', FOLDER + "/*.jpg"),
    ('from pathlib import Path\nroot = Path("/data/coco")\n'
     'for p in (root / "train2017").glob("*.jpg"):\n    p.read_bytes()\n',
     FOLDER + "/*.jpg"),
])
def test_a_python_listing_of_a_folder_under_a_mount_narrows_it(tmp_path: Path, capsys,
                                                               code: str, want: str) -> None:
    assert warmed(tmp_path, capsys, python_job(code)) == [want]


def test_a_python_listing_under_a_mount_narrows_it_in_the_plan(tmp_path: Path,
                                                               capsys) -> None:
    f = tmp_path / "all.yaml"
    f.write_text(yaml.safe_dump_all([python_job(
        'import os\nx = os.listdir("/data/coco/train2017")\nprint(x)\n'), *PV]))
    assert cli.main(["plan", str(f)]) == 0
    out = capsys.readouterr().out
    assert f"{FOLDER}  on 1 node" in out and "s3://ml-datasets/vision/  on" not in out, out


def cp_job(script: str) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "j", "namespace": "default"},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "c", "image": "busybox", "command": ["sh", "-c", script],
                 "volumeMounts": [{"name": "d", "mountPath": "/data"},
                                  {"name": "s", "mountPath": "/scratch"}]}],
                "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "coco"}},
                            {"name": "s", "persistentVolumeClaim": {"claimName": "scratch"}}]}}}}


@pytest.mark.parametrize("script, read", [
    ("cp -r /data/coco/train2017 /scratch/", FOLDER),
    ("cp /data/coco/a.txt /scratch/model/a.txt", "s3://ml-datasets/vision/coco/a.txt"),
    ("sudo cp -t /scratch/in /data/coco/a.txt", "s3://ml-datasets/vision/coco/a.txt"),
    ("mkdir -p /scratch/x && rsync -a /data/coco/train2017 /scratch/x/", FOLDER),
])
def test_a_local_copy_destination_is_written_not_read(tmp_path: Path, capsys, script: str,
                                                      read: str) -> None:
    f = tmp_path / "all.yaml"
    f.write_text(yaml.safe_dump_all([cp_job(script), *PV]))
    assert cli.main(["plan", str(f), "--json"]) == 0
    (work,) = json.loads(capsys.readouterr().out)["work"]
    (group,) = work["groups"]
    assert [d for d in group["datasets"] if d["claim"] == "scratch"] == [], group
    assert [w["dataset"] for w in work["warm"]] == [read]
    assert any(w.startswith("pvc://scratch") for w in group["writes"]), group
    assert cli.main(["plan", str(f)]) == 0
    assert "--pvc scratch" not in capsys.readouterr().out


def test_a_cp_destination_on_a_jobset_claim_template_is_no_read(tmp_path: Path,
                                                                capsys) -> None:
    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
              "metadata": {"name": "vc", "namespace": "default"},
              "spec": {"volumeClaimPolicies": [{"templates": [{
                  "metadata": {"name": "initializer"},
                  "spec": {"accessModes": ["ReadWriteOnce"],
                           "resources": {"requests": {"storage": "1Gi"}}}}]}],
                       "replicatedJobs": [{"name": "initializer", "template": {"spec": {
                           "template": {"spec": {"restartPolicy": "Never", "containers": [
                               {"name": "c", "image": "busybox", "command": [
                                   "/bin/sh", "-c",
                                   "cp /data/coco/a.txt /workspace/model/a.txt\n"],
                                "volumeMounts": [
                                    {"name": "initializer", "mountPath": "/workspace/model"},
                                    {"name": "d", "mountPath": "/data", "readOnly": True}]}],
                               "volumes": [{"name": "d", "persistentVolumeClaim": {
                                   "claimName": "coco"}}]}}}}}]}}
    f = tmp_path / "all.yaml"
    f.write_text(yaml.safe_dump_all([jobset, *PV]))
    assert cli.main(["plan", str(f)]) == 0
    out = capsys.readouterr().out
    assert "initializer-vc" not in out and "--pvc" not in out, out
    assert "s3://ml-datasets/vision/coco/a.txt  on 1 node" in out, out
