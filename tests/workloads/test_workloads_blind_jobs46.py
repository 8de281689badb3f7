"""Blind job round 46 (Kueue in depth): a Workload whose quota is reserved while an admission
check (a ProvisioningRequest) is pending already has its flavor, whose node labels and
tolerations its pods will run with; a Workload being evicted (``Evicted`` True while
``Admitted`` still is) is queued again, its old flavor no longer its own. Before, the first
was planned with no constraints (warmed on nodes its pods can never use) and the second as
admitted on the flavor it was evicted from. Objects as Kueue v1beta2 writes them."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import yaml

FLAVOR = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
          "metadata": {"name": "l4-dws"},
          "spec": {"nodeLabels": {"cloud.google.com/gke-nodepool": "l4-dws-pool"},
                   "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                                    "effect": "NoSchedule"}]}}
POD = {"spec": {"restartPolicy": "Never", "containers": [
    {"name": "qdm", "image": "qdm:1", "args": ["--obs=s3://climate/era5/daily/"]}]}}


def _job_and_workload(*conditions: tuple[str, str]) -> list[dict[str, Any]]:
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "qdm", "namespace": "climate", "uid": "u-qdm",
                        "labels": {"kueue.x-k8s.io/queue-name": "dws"}},
           "spec": {"parallelism": 4, "completions": 4, "suspend": True, "template": POD}}
    wl = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
          "metadata": {"name": "job-qdm-1", "namespace": "climate", "ownerReferences": [
              {"apiVersion": "batch/v1", "kind": "Job", "name": "qdm", "uid": "u-qdm",
               "controller": True}]},
          "spec": {"queueName": "dws", "podSets": [{"name": "main", "count": 4,
                                                    "template": POD}]},
          "status": {"admission": {"clusterQueue": "dws-cq", "podSetAssignments": [
              {"name": "main", "count": 4, "flavors": {"cpu": "l4-dws"}}]},
              "conditions": [{"type": t, "status": st, "reason": t, "message": "",
                              "lastTransitionTime": "2026-12-01T11:30:05Z"}
                             for t, st in conditions]}}
    return [FLAVOR, job, wl]


def _plan(tmp_path, objs: list[dict[str, Any]]) -> str:
    f = tmp_path / "q.yaml"
    f.write_text(yaml.safe_dump_all(objs, sort_keys=False))
    r = subprocess.run([sys.executable, "-m", "prefetchd.cli", "plan", str(f)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_a_reservation_waiting_on_an_admission_check_has_its_flavor(tmp_path) -> None:
    out = _plan(tmp_path, _job_and_workload(("QuotaReserved", "True"), ("Admitted", "False")))
    assert "queued in queue dws" in out
    assert "main x4  stage 0: nodeSelector cloud.google.com/gke-nodepool=l4-dws-pool; " \
           "tolerates nvidia.com/gpu:NoSchedule" in out


def test_a_workload_being_evicted_is_queued_without_its_old_flavor(tmp_path) -> None:
    out = _plan(tmp_path, _job_and_workload(("QuotaReserved", "True"), ("Admitted", "True"),
                                            ("Evicted", "True")))
    assert "queued in queue dws" in out and "main x4  stage 0: no constraints" in out


def test_a_pod_beside_a_job_is_listed_as_ignored_with_the_reason(tmp_path) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "gnn-0", "namespace": "climate", "labels": {
               "kueue.x-k8s.io/queue-name": "gpu", "kueue.x-k8s.io/pod-group-name": "gnn"}},
           "spec": POD["spec"]}
    out = _plan(tmp_path, [*_job_and_workload(("QuotaReserved", "True")), pod])
    assert "ignored: Pod climate/gnn-0 (a pod: its pod group gnn's Kueue Workload is " \
           "planned, not it)" in out
