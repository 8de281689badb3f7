"""Blind job round 56 (datasets reached through volumes, as a platform team wires fusecache into
training jobs): a static PV's or an inline volume's attributes the node plugin refuses were
warmed (a ``perfix`` typo: the bucket's root; ``bucket: s3://x``: ``s3://s3://x/``); a path the
program may write under a fusecache claim mounted without ``readOnly`` was dropped, though the
volume is read-only; a claim made again over a Released PV, and subPaths the API server refuses
(``..``, absolute), were warmed; a PV reserved for a claim by its claimRef, and a claim of a
``prefixPolicy: volumeName`` class, were "unresolved" without why."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

DRIVER = "csi.fusecache.io"


def pv(name: str, attrs: dict[str, str], claim: tuple[str, str] | None = ("llm", "ckpt"),
       **status: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"capacity": {"storage": "1Ti"}, "accessModes": ["ReadWriteMany"],
                            "storageClassName": "",
                            "csi": {"driver": DRIVER, "volumeHandle": name,
                                    "volumeAttributes": attrs}}
    if claim:
        spec["claimRef"] = {"namespace": claim[0], "name": claim[1], **status.pop("ref", {})}
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
            "spec": spec, "status": status or {"phase": "Bound"}}


def pvc(name: str, volume: str | None, phase: str = "Bound", **meta: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"accessModes": ["ReadWriteMany"], "storageClassName": "",
                            "resources": {"requests": {"storage": "1Ti"}}}
    if volume:
        spec["volumeName"] = volume
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": "llm", **meta}, "spec": spec,
            "status": {"phase": phase}}


def job(args: list[str], mount: dict[str, Any] | None = None,
        volume: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "eval", "namespace": "llm"},
            "spec": {"parallelism": 2, "completions": 2, "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "ghcr.io/acme/eval:1.0",
                                "command": ["python", "-m", "lm_eval"], "args": args,
                                "volumeMounts": [mount or {"name": "ckpt",
                                                           "mountPath": "/ckpt"}]}],
                "volumes": [volume or {"name": "ckpt",
                                       "persistentVolumeClaim": {"claimName": "ckpt"}}]}}}}


def plan(tmp_path: Path, *docs: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump_all([copy.deepcopy(d) for d in docs]))
    return subprocess.run([sys.executable, "-m", "prefetchd.cli", "plan", str(path)],
                          capture_output=True, text=True, timeout=120)


def refused(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, (r.stdout, r.stderr)
    return r.stderr.strip()


CKPT = ["--checkpoint-dir", "/ckpt/llama-8b/step-20000"]  # (read or written, by its name)
DATA = ["--data", "/ckpt/train"]


def test_attributes_the_node_plugin_refuses_are_refused_not_warmed(tmp_path) -> None:
    typo = refused(plan(tmp_path, pv("ckpt-pv", {"bucket": "llm", "perfix": "checkpoints"}),
                        pvc("ckpt", "ckpt-pv"), job(CKPT)))
    assert "PV ckpt-pv of claim ckpt: unknown volume attribute(s) perfix" in typo
    assert "the node plugin refuses to mount it" in typo
    assert "invalid bucket name 's3://llm'" in refused(plan(
        tmp_path, pv("ckpt-pv", {"bucket": "s3://llm"}), pvc("ckpt", "ckpt-pv"), job(CKPT)))
    inline = {"name": "ckpt", "csi": {"driver": DRIVER, "readOnly": True,
                                      "volumeAttributes": {"bucket": "llm", "perfix": "x"},
                                      "nodePublishSecretRef": {"name": "s3"}}}
    assert "volume ckpt: inline volume: unknown volume attribute(s) perfix" in refused(
        plan(tmp_path, job(CKPT, volume=inline)))
    no_secret = copy.deepcopy(inline)
    no_secret["csi"]["volumeAttributes"] = {"bucket": "llm", "prefix": "checkpoints"}
    del no_secret["csi"]["nodePublishSecretRef"]
    r = plan(tmp_path, job(CKPT, volume=no_secret))  # the pods do not start: said
    assert r.returncode == 0 and "note: inline volume ckpt has no nodePublishSecretRef, which " \
        "the node plugin requires" in r.stdout, r.stdout


def test_a_path_under_a_fusecache_claim_is_read_whatever_the_mount_says(tmp_path) -> None:
    r = plan(tmp_path, pv("ckpt-pv", {"bucket": "llm", "prefix": "checkpoints"}),
             pvc("ckpt", "ckpt-pv"), job(CKPT))
    assert r.returncode == 0, r.stderr
    assert "s3://llm/checkpoints/llama-8b/step-20000  on 2 nodes" in r.stdout
    assert "[a fusecache volume is read-only: read]" in r.stdout
    # on a claim mapped by hand (--pvc), which may be writable: still shown, not warmed
    mapped = plan(tmp_path, job(CKPT))
    path = tmp_path / "job.yaml"
    mapped = subprocess.run([sys.executable, "-m", "prefetchd.cli", "plan", str(path),
                             "--pvc", "ckpt=s3://llm/checkpoints"],
                            capture_output=True, text=True, timeout=120)
    assert mapped.returncode == 0 and "warm: nothing" in mapped.stdout, mapped.stdout


def test_subpaths_the_api_server_refuses_are_refused(tmp_path) -> None:
    objects = [pv("ckpt-pv", {"bucket": "llm", "prefix": "checkpoints"}), pvc("ckpt", "ckpt-pv")]
    for mount, said in (
            ({"subPath": "de-en/../../wmt14"}, "subPath: 'de-en/../../wmt14' must not contain"),
            ({"subPath": "/de-en"}, "subPath: '/de-en' must be a relative path"),
            ({"subPathExpr": "$(PAIR)/../x"}, "subPathExpr: '$(PAIR)/../x' must not contain"),
            ({"subPath": "a", "subPathExpr": "$(P)"}, "subPath and subPathExpr are mutually")):
        m = {"name": "ckpt", "mountPath": "/ckpt", **mount}
        assert said in refused(plan(tmp_path, *objects, job(["--data", "/ckpt/"], m))), mount


def test_claims_that_do_not_bind_and_claims_that_will(tmp_path) -> None:
    # made again over a Released PV still held for the earlier claim's uid: never binds
    released = pv("ckpt-pv", {"bucket": "llm", "prefix": "checkpoints"}, phase="Released",
                  ref={"uid": "aaaa-1"})
    r = plan(tmp_path, released, pvc("ckpt", "ckpt-pv", "Pending", uid="bbbb-2"), job(DATA))
    assert r.returncode == 0 and "PV ckpt-pv is Released" in r.stdout and \
        "warm: nothing" in r.stdout, r.stdout
    # reserved for the claim by its claimRef, the claim naming no volume yet: binds
    r = plan(tmp_path, pv("ckpt-pv", {"bucket": "llm", "prefix": "checkpoints"},
                          phase="Available"), pvc("ckpt", None, "Pending"), job(CKPT))
    assert "s3://llm/checkpoints/llama-8b/step-20000  on 2 nodes" in r.stdout, r.stdout


def test_unresolved_claims_say_why(tmp_path) -> None:
    fresh = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
             "metadata": {"name": "fusecache-fresh"}, "provisioner": DRIVER,
             "parameters": {"bucket": "scratch", "prefixPolicy": "volumeName"}}
    claim = pvc("ckpt", None, "Pending")
    claim["spec"]["storageClassName"] = "fusecache-fresh"
    r = plan(tmp_path, fresh, claim, job(DATA))
    assert "gives it a fresh empty prefix (prefixPolicy volumeName): nothing to warm" \
        in r.stdout, r.stdout
    elsewhere = pvc("ckpt", "ckpt-pv")
    elsewhere["metadata"]["namespace"] = "shared"
    r = plan(tmp_path, elsewhere, job(DATA))
    assert "claim llm/ckpt not in the files (one of that name is in namespace shared" \
        in r.stdout, r.stdout
    r = subprocess.run([sys.executable, "-m", "prefetchd.cli", "plan", "--json",
                        str(tmp_path / "job.yaml")], capture_output=True, text=True, timeout=120)
    [ref] = json.loads(r.stdout)["work"][0]["groups"][0]["datasets"]
    assert ref["resolved"] is None and ref["unresolved"].startswith("claim llm/ckpt not in")


def test_a_jobset_claim_of_a_fixed_fusecache_class_is_its_dataset(tmp_path) -> None:
    """A JobSet's volumeClaimPolicies claim of a fusecache class with a fixed prefix sees that
    prefix's data (it was reported new and empty); of a pvcName class, a new prefix."""
    fixed = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
             "metadata": {"name": "fusecache-c4"}, "provisioner": DRIVER,
             "parameters": {"bucket": "corpora", "prefix": "web/c4/en",
                            "prefixPolicy": "fixed"}}
    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
              "metadata": {"name": "probe", "namespace": "nlp"},
              "spec": {"volumeClaimPolicies": [{"templates": [{
                  "metadata": {"name": "corpus"},
                  "spec": {"accessModes": ["ReadOnlyMany"], "storageClassName": "fusecache-c4",
                           "resources": {"requests": {"storage": "1Ti"}}}}]}],
                  "replicatedJobs": [{"name": "readers", "replicas": 1, "template": {"spec": {
                      "parallelism": 2, "completions": 2, "template": {"spec": {
                          "restartPolicy": "Never", "containers": [{
                              "name": "r", "image": "t5x", "args": ["--data",
                                                                    "/corpus/validation"],
                              "volumeMounts": [{"name": "corpus", "mountPath": "/corpus",
                                                "readOnly": True}]}]}}}}}]}}
    r = plan(tmp_path, fixed, jobset)
    assert "s3://corpora/web/c4/en/validation  on 2 nodes  for readers" in r.stdout, r.stdout
    fixed["parameters"]["prefixPolicy"] = "pvcName"
    r = plan(tmp_path, fixed, jobset)
    assert "claim corpus-probe, made by the job from its template, of StorageClass " \
        "fusecache-c4, whose prefix is named after the claim" in r.stdout, r.stdout
