"""Adapter: KubeRay RayJob (ray.io/v1) -> UpcomingWork: a Ray cluster made for one program.

Who calls this: :mod:`prefetchd.workloads._registry`. A RayJob's operator makes a RayCluster
from ``spec.rayClusterSpec`` (a head pod, and worker groups of ``replicas`` pods each, as
KubeRay counts them: clamped to ``minReplicas``..``maxReplicas``, times ``numOfHosts``, none
while the group is suspended) and runs ``spec.entrypoint``, a shell command, against it: the
driver runs on the head and its Ray tasks (Ray Data reads, Ray Train workers) wherever the
cluster has room. So the entrypoint's locations are read on every group that can run tasks:
the workers, and the head unless its ``rayStartParams`` give it no CPUs (``num-cpus: "0"``,
the usual production set-up); paths it names under a group's volumes narrow those volumes
(as an MPI launcher's command line narrows its workers', :mod:`._common`); a head that runs
no tasks reads nothing of a volume it shares with them under which the entrypoint names
paths (those are the tasks' reads; its template is often the workers' copied). Environment from
``runtimeEnvYAML``'s ``env_vars`` serves the entrypoint's ``$(VAR)``. Groups are named as
Kueue names the RayJob's pod sets: ``head``, then each worker group's ``groupName``.

State: ``spec.suspend`` -> queued (Kueue holds it); ``status.jobDeploymentStatus`` Complete
-> succeeded (failed when ``jobStatus`` is not SUCCEEDED), Failed / ValidationFailed ->
failed, Running -> running, else admitted. A RayJob with ``clusterSelector`` runs on a
RayCluster that already exists: it makes no pods, so nothing is warmed for it (a note says so).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import yaml

from prefetchd.k8s import datasets as k8s_datasets
from prefetchd.workloads import _common, _podspec
from prefetchd.workloads._library import Library
from prefetchd.workloads._model import (
    DatasetRef,
    PodGroup,
    State,
    UpcomingWork,
    WorkloadError,
    count,
    mapping,
    sequence,
)

HEAD = "head"  # Kueue's pod-set name for the head group (KubeRay labels its pods "headgroup")
ENTRYPOINT = "entrypoint"  # the container name the entrypoint's datasets are shown under


def _worker_pods(wg: Mapping[str, Any], where: str) -> int:
    """Pods of a worker group as KubeRay starts it (GetWorkerGroupDesiredReplicas)."""
    if wg.get("suspend") is True:
        return 0
    low = count(wg.get("minReplicas", 0), f"{where}.minReplicas")
    replicas = count(wg.get("replicas", 0), f"{where}.replicas")
    if wg.get("maxReplicas") is not None:
        replicas = min(replicas, count(wg["maxReplicas"], f"{where}.maxReplicas"))
    hosts = count(wg.get("numOfHosts", 1), f"{where}.numOfHosts")
    return max(replicas, low) * hosts


def _state(obj: Mapping[str, Any], spec: Mapping[str, Any]) -> State:
    status = mapping(obj.get("status"), "status")
    deployment = status.get("jobDeploymentStatus")
    if deployment == "Complete":
        return State.SUCCEEDED if status.get("jobStatus") == "SUCCEEDED" else State.FAILED
    if deployment in ("Failed", "ValidationFailed"):
        return State.FAILED
    if spec.get("suspend"):
        return State.QUEUED
    return State.RUNNING if deployment == "Running" else State.ADMITTED


def _runtime_env(spec: Mapping[str, Any]) -> list[dict[str, str]]:
    """``runtimeEnvYAML``'s ``env_vars`` as container env (the entrypoint's environment)."""
    text = spec.get("runtimeEnvYAML")
    if not text:
        return []
    try:
        env = yaml.safe_load(str(text))
    except yaml.YAMLError as exc:
        raise WorkloadError(f"spec.runtimeEnvYAML: malformed YAML ({exc})") from None
    env_vars = mapping(mapping(env, "spec.runtimeEnvYAML").get("env_vars"),
                       "spec.runtimeEnvYAML.env_vars")
    return [{"name": str(k), "value": str(v)} for k, v in env_vars.items()]


def _runs_tasks(group: PodGroup, start_params: Mapping[str, Any]) -> bool:
    """A pod Ray may schedule tasks on: not a head started with no CPUs."""
    return not (group.name == HEAD and str(start_params.get("num-cpus", "")).strip() == "0")


def _with_cluster_configs(program: dict[str, Any], cluster: Mapping[str, Any],
                          library: Library, namespace: str) -> dict[str, Any]:
    """The entrypoint's program with the files it names of the ConfigMap volumes the
    cluster's pods mount (``--config /home/ray/cfg/data.json``): the cluster runs it where
    they are mounted."""
    specs = [((cluster.get("headGroupSpec") or {}).get("template") or {}).get("spec") or {}]
    specs += [(wg.get("template") or {}).get("spec") or {}
              for wg in cluster.get("workerGroupSpecs") or [] if isinstance(wg, Mapping)]
    volumes: dict[Any, Any] = {}
    mounts: dict[Any, Any] = {}
    for ps in specs:
        if not isinstance(ps, Mapping):
            continue
        for v in ps.get("volumes") or []:
            if isinstance(v, Mapping) and _podspec.volume_configmaps(v):  # (projected too)
                volumes.setdefault(v.get("name"), v)
        for c in ps.get("containers") or []:
            for m in (c.get("volumeMounts") or []) if isinstance(c, Mapping) else []:
                if isinstance(m, Mapping) and m.get("name") in volumes:
                    mounts.setdefault(m.get("mountPath"), m)
    if not mounts:
        return program
    pod = {"containers": [{**program, "volumeMounts": list(mounts.values())}],
           "volumes": list(volumes.values())}
    made = _podspec.with_configmaps(pod, library, namespace)
    return dict(made["containers"][0]) if made is not pod else program


def _start_params(group: Mapping[str, Any], at: str) -> Mapping[str, Any]:
    """A group's ``rayStartParams``: strings, as the CRD has them (``num-cpus: 0`` unquoted
    is refused by the API server; blind job round 50)."""
    params = mapping(group.get("rayStartParams"), f"{at}.rayStartParams")
    for key, value in params.items():
        if not isinstance(value, str):
            raise WorkloadError(f"{at}.rayStartParams.{key}: {value!r} is not a string (quote "
                                f"it: \"{value}\"; the API server refuses it)")
    return params


def read(obj: Mapping[str, Any], library: Library) -> UpcomingWork:
    work = _common.start(obj, library)
    spec = mapping(obj.get("spec"), "spec")
    work.state = _state(obj, spec)
    cluster = mapping(spec.get("rayClusterSpec"), "spec.rayClusterSpec")
    if not cluster:
        if spec.get("clusterSelector"):
            work.notes.append("spec.clusterSelector: runs on an existing RayCluster, whose "
                              "pods are not this job's; nothing is warmed for it")
            return work
        raise WorkloadError("spec.rayClusterSpec: missing (and no spec.clusterSelector)")
    head = mapping(cluster.get("headGroupSpec"), "spec.rayClusterSpec.headGroupSpec")
    at = "spec.rayClusterSpec.headGroupSpec"
    work.groups.append(_podspec.group(HEAD, 1, head.get("template"), f"{at}.template"))
    start_params = {HEAD: _start_params(head, at)}
    for i, wg in enumerate(sequence(cluster.get("workerGroupSpecs"),
                                    "spec.rayClusterSpec.workerGroupSpecs")):
        at = f"spec.rayClusterSpec.workerGroupSpecs[{i}]"
        wg = mapping(wg, at)
        name = str(wg.get("groupName") or "")
        if not name:
            raise WorkloadError(f"{at}.groupName: missing")
        work.groups.append(_podspec.group(name, _worker_pods(wg, at), wg.get("template"),
                                          f"{at}.template"))
        start_params[name] = _start_params(wg, at)
    if cluster.get("suspend") is True:
        work.groups = [replace(g, pods=0) for g in work.groups]
    entrypoint = str(spec.get("entrypoint") or "")
    if entrypoint:
        program = {"name": ENTRYPOINT, "command": ["sh", "-c", entrypoint],
                   "env": _runtime_env(spec)}
        program = _with_cluster_configs(program, cluster, library, work.namespace)
        words = k8s_datasets.container_words(program)
        found = _podspec.settled(words)
        refs = [DatasetRef(origin, ENTRYPOINT, uri=uri, direction=direction)
                for uri, origin, direction in found if direction != "write"]
        writes = tuple(uri for uri, _o, direction in found if direction == "write")
        # with no worker to run on, Ray runs the tasks on the head whatever its CPUs say
        workers = [g for g in work.groups if g.name != HEAD and g.pods]
        for i, g in enumerate(work.groups):
            if g.pods and (_runs_tasks(g, start_params[g.name]) or not workers):
                g = _common.with_program(g, words, refs)
            elif g.pods:  # the driver only: what the entrypoint names under a volume the
                g = _common.without_program_mounts(g, words)  # head shares is the tasks'
            work.groups[i] = replace(g, writes=g.writes + writes)
    return work
