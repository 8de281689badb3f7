"""Blind job round 59 (how pods get their data wired): a ``subPathExpr`` naming a var no env
entry sets (the kubelet does not start such a container) warmed the whole volume behind it
without a word; pod values the API server refuses (an image volume's or a container's pull
policy misspelt, a sidecar's restartPolicy misspelt, an env var without a name, a fieldRef
no env var may take, a key no ConfigMap can hold, an item path climbing with '..') were
planned and warmed."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from prefetchd import workloads
from prefetchd.workloads._library import Library

EVAL = {"name": "evalsets", "csi": {"driver": "csi.fusecache.io", "volumeAttributes": {
    "bucket": "mt-data", "prefix": "evalsets"}, "nodePublishSecretRef": {"name": "s3"}}}


def job(container: dict[str, Any], volumes: list[dict[str, Any]] | None = None,
        init: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    pod: dict[str, Any] = {"restartPolicy": "Never", "containers": [
        {"name": "eval", "image": "mt:1", **container}], "volumes": volumes or [EVAL]}
    if init:
        pod["initContainers"] = init
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "mt-eval", "namespace": "ml"},
            "spec": {"template": {"spec": pod}}}


def test_a_sub_path_expr_of_an_unset_var_starts_no_container_and_warms_nothing() -> None:
    mount = {"name": "evalsets", "mountPath": "/eval", "subPathExpr": "$(EVAL_LANG)"}
    broken = job({"args": ["--data", "/eval/devtest"], "volumeMounts": [mount]})
    work = workloads.read(broken, Library())
    assert work.targets() == []
    (group,) = work.groups
    assert any("subPathExpr $(EVAL_LANG) is set by no env var" in n and
               "missing value for EVAL_LANG" in n for n in group.notes), group.notes
    fixed = copy.deepcopy(broken)
    fixed["spec"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "EVAL_LANG", "value": "de"}]
    assert [t.dataset for t in workloads.read(fixed, Library()).targets()] == [
        "s3://mt-data/evalsets/de/devtest"]


@pytest.mark.parametrize("container, volumes, init, named", [
    ({"imagePullPolicy": "IfNotPresnt"}, None, None, "imagePullPolicy: 'IfNotPresnt'"),
    ({}, [EVAL, {"name": "ce", "image": {"reference": "reg/ce:1",
                                          "pullPolicy": "IfNotPresnt"}}], None,
     "volumes[ce].image.pullPolicy: 'IfNotPresnt'"),
    ({}, None, [{"name": "s", "image": "x", "restartPolicy": "Alwyas"}],
     "restartPolicy: 'Alwyas'"),
    ({"env": [{"name": "", "value": "x"}]}, None, None, "an env var without a name"),
    ({"env": [{"name": "L", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels"}}}]},
     None, None, "fieldPath: 'metadata.labels'"),
    ({"env": [{"name": "U", "valueFrom": {"configMapKeyRef": {"name": "c",
                                                              "key": "features uri"}}}]},
     None, None, "key: 'features uri' is not a valid key"),
    ({}, [EVAL, {"name": "cfg", "projected": {"sources": [{"configMap": {
        "name": "c", "items": [{"key": "t", "path": "../train.yaml"}]}}]}}], None,
     "item '../train.yaml'"),
])
def test_pod_values_the_api_server_refuses_are_bad_input(
        container: dict[str, Any], volumes: list[dict[str, Any]] | None,
        init: list[dict[str, Any]] | None, named: str) -> None:
    with pytest.raises(workloads.WorkloadError) as e:
        workloads.read(job({"args": ["--data", "s3://mt/train/"], **container}, volumes,
                           init), Library())
    assert named in str(e.value) and "the API server refuses the pod" in str(e.value)


def test_the_values_the_api_server_takes_pass() -> None:
    ok = job({"args": ["--data", "s3://mt/train/"], "imagePullPolicy": "IfNotPresent",
              "env": [{"name": "N", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                      {"name": "T", "valueFrom": {"fieldRef": {
                          "fieldPath": "metadata.labels['team']"}}},
                      {"name": "K", "valueFrom": {"configMapKeyRef": {
                          "name": "c", "key": "train.uri"}}}]},
             init=[{"name": "s", "image": "x", "restartPolicy": "Always"}])
    assert [t.dataset for t in workloads.read(ok, Library()).targets()] == ["s3://mt/train/"]


@pytest.mark.parametrize("name, text", [
    ("train.toml", '[data]\ntrain = "s3://b/train/"\n[trainer]\noutput_dir = "s3://b/runs/out/"\n'
                   'metrics_uri = "s3://b/runs/metrics/"\n'),
    ("train.ini", "[data]\ntrain = s3://b/train/\n[output]\ndir = s3://b/runs/out/\n"
                  "metrics_uri = 's3://b/runs/metrics/'\n"),
    ("train.yaml", "data:\n  train: s3://b/train/\ntrainer:\n  output_dir: s3://b/runs/out/\n"
                   "  metrics_uri: s3://b/runs/metrics/\n"),
])
def test_a_toml_or_ini_config_directs_its_locations_by_key_as_yaml_does(
        name: str, text: str) -> None:
    """A TOML or INI config was read as plain text: its output locations were warmed."""
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ml"},
          "data": {name: text}}
    work = job({"args": ["--config", f"/etc/c/{name}"],
                "volumeMounts": [{"name": "c", "mountPath": "/etc/c"}]},
               [{"name": "c", "configMap": {"name": "c"}}])
    got = workloads.read(work, Library([cm]))
    assert [t.dataset for t in got.targets()] == ["s3://b/train/"]


def test_an_env_from_a_given_config_map_does_not_hide_an_unset_var() -> None:
    """Any envFrom hid the notes on a $(VAR) no env entry sets, even from a ConfigMap given
    in the files that lacks it; one from a Secret (keys unseen) still may set it."""
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ml"},
          "data": {"LEX_ROOT": "s3://lex/v2"}}
    c = {"args": ["--stop", "$(LEXROOT)/stop.txt"], "envFrom": [{"configMapRef": {"name": "c"}}]}
    notes = workloads.read(job(c, [EVAL]), Library([cm])).groups[0].notes
    assert any("$(LEXROOT) is set by no env var" in n for n in notes), notes
    c["envFrom"].append({"secretRef": {"name": "s"}})
    notes = workloads.read(job(c, [EVAL]), Library([cm])).groups[0].notes
    assert not any("LEXROOT" in n for n in notes), notes


def test_a_claim_whose_pv_is_reserved_for_another_says_so(tmp_path) -> None:
    """Blind job round 59: 'not bound yet: ... give its PV', though its PV was given,
    reserved by claimRef for default/corpus."""
    import subprocess
    import sys

    import yaml

    objs = [job({"args": ["--in", "/d/train"], "volumeMounts": [{"name": "d", "mountPath": "/d"}]},
                [{"name": "d", "persistentVolumeClaim": {"claimName": "corpus"}}]),
            {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "corpus-pv"},
             "spec": {"capacity": {"storage": "1Ti"}, "accessModes": ["ReadOnlyMany"],
                      "storageClassName": "", "claimRef": {"namespace": "default",
                                                           "name": "corpus"},
                      "csi": {"driver": "csi.fusecache.io", "volumeHandle": "corpus",
                              "volumeAttributes": {"bucket": "bkt1", "prefix": "corpus"}}}},
            {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
             "metadata": {"name": "corpus", "namespace": "ml"},
             "spec": {"accessModes": ["ReadOnlyMany"], "storageClassName": "",
                      "resources": {"requests": {"storage": "1Ti"}}}}]
    f = tmp_path / "j.yaml"
    f.write_text(yaml.safe_dump_all(objs))
    r = subprocess.run([sys.executable, "-m", "prefetchd.cli", "plan", str(f)],
                       capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    assert "PV corpus-pv in the files is reserved by its claimRef for default/corpus" in \
        r.stdout, r.stdout
