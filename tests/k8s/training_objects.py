"""Training-work objects as their controllers make them, for the fake API server's tests.

Who uses it: tests/k8s/test_k8s_e2e_jobs.py. Each builder returns what the real controller
writes (names, labels, ownerReferences, status conditions), following ../shared/k8s/crds
(READMEs and upstream examples):

* CRDs: the upstream CustomResourceDefinition files, with the ``Established`` condition the
  API server sets once it serves them.
* Kueue: a job labelled ``kueue.x-k8s.io/queue-name`` is suspended by Kueue's webhook and
  gets a Workload named ``<kind>-<name>-<hash>``, controller-owned by the job, whose pod sets
  copy the job's templates; pending it has ``QuotaReserved`` False (reason Pending); on
  admission ``QuotaReserved`` and ``Admitted`` True and ``status.admission``; at the end
  ``Finished`` True. The job is then unsuspended (and finished) by its own controller.
* training-operator: a PyTorchJob's pods ``<job>-master-0`` / ``<job>-worker-N`` carry
  ``training.kubeflow.org/{job-name,operator-name,replica-type,replica-index}`` and are
  controller-owned by the job; conditions ``Created``, ``Suspended``, ``Running``,
  ``Succeeded``.
* CronJob controller: each run's Job is named ``<cronjob>-<scheduled minute since the epoch>``,
  carries the job template's labels and annotations plus
  ``batch.kubernetes.io/cronjob-scheduled-timestamp``, and is controller-owned by the CronJob,
  whose ``status.active`` lists it while it runs (``lastScheduleTime``, then
  ``lastSuccessfulTime``). Pods of a Job carry the Job controller's labels
  (``batch.kubernetes.io/job-name``, ``job-name``, ``batch.kubernetes.io/controller-uid``,
  ``controller-uid``) and are controller-owned by it.
* KubeRay: a RayJob's cluster is a RayCluster ``<rayjob>-<5 random characters>`` owned by the
  RayJob (labels ``ray.io/originated-from-cr-name``, ``ray.io/originated-from-crd``); its pods
  ``<cluster>-head-<random>`` and ``<cluster>-<group>-worker-<random>`` carry ``ray.io/cluster``,
  ``ray.io/group`` (``headgroup`` for the head), ``ray.io/node-type``, ``ray.io/is-ray-node``,
  ``ray.io/identifier`` and ``app.kubernetes.io/{name,created-by}``, and are controller-owned
  by the RayCluster (ray-operator/controllers/ray/common/pod.go ``labelPod``).
* Katib: Trials ``<experiment>-<random>`` labelled ``katib.kubeflow.org/experiment``, owned by
  the Experiment, with the rendered ``runSpec``; the Trial's Job is named as the Trial and
  owned by it; its pods carry the Job controller's labels and ``katib.kubeflow.org/trial``.
"""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
import uuid
from pathlib import Path
from typing import Any

import yaml

CRDS = Path(__file__).resolve().parents[2].parent / "shared" / "k8s" / "crds"
NOW = "2026-12-01T00:00:00Z"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"


def own_crd(name: str) -> dict[str, Any]:
    """A CRD of tests/k8s/data/crds (a kind ../shared/k8s/crds lacks), Established."""
    return crd(str(Path(__file__).resolve().parent / "data" / "crds" / name))


def shared_file(relpath: str) -> Path:
    """../shared/k8s/crds/<relpath>, which is not part of the repository: a clone on its own
    skips the calling test, saying which file it lacks."""
    path = CRDS / relpath
    if not path.is_file():
        import pytest

        pytest.skip(f"../shared/k8s/crds/{relpath} is not beside this checkout")
    return path


def crd(relpath: str) -> dict[str, Any]:
    """An upstream CRD (../shared/k8s/crds/<relpath>) as the API server holds it, Established."""
    path = Path(relpath) if Path(relpath).is_absolute() else shared_file(relpath)
    doc = yaml.safe_load(path.read_text())
    names = doc["spec"]["names"]
    doc["status"] = {"acceptedNames": {"kind": names["kind"], "plural": names["plural"]},
                     "conditions": [
                         {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
                          "lastTransitionTime": NOW},
                         {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                          "lastTransitionTime": NOW}],
                     "storedVersions": [v["name"] for v in doc["spec"]["versions"]
                                        if v.get("storage")]}
    return doc


def cond(ctype: str, status: str = "True", reason: str = "", message: str = "") -> dict:
    return {"type": ctype, "status": status, "reason": reason or ctype, "message": message,
            "lastTransitionTime": NOW, "lastUpdateTime": NOW}


def owner_ref(obj: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"],
            "name": obj["metadata"]["name"], "uid": obj["metadata"]["uid"],
            "controller": True, "blockOwnerDeletion": True}


def priority_class(name: str, value: int) -> dict[str, Any]:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
            "metadata": {"name": name}, "value": value, "description": f"{name} jobs"}


def pod_priority_class(name: str, value: int) -> dict[str, Any]:
    """A scheduling.k8s.io PriorityClass (what a pod's ``priorityClassName`` names)."""
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": name}, "value": value, "globalDefault": False,
            "preemptionPolicy": "PreemptLowerPriority", "description": f"{name} pods"}


def trainer_container(dataset: str) -> dict[str, Any]:
    return {"name": "pytorch", "image": "docker.io/kubeflowkatib/pytorch-mnist-cpu:v1beta1",
            "command": ["python3", "/opt/pytorch-mnist/mnist.py", "--epochs=1"],
            "args": ["--data-dir", dataset],
            "resources": {"requests": {"cpu": "1", "memory": "200Mi"}}}


def pytorchjob(name: str, namespace: str, dataset: str, workers: int, queue: str,
               priority: str | None = None) -> dict[str, Any]:
    """A PyTorchJob (1 master + ``workers``) as submitted to a Kueue queue, after Kueue's
    webhook suspended it (``runPolicy.suspend: true``)."""
    labels = {QUEUE_LABEL: queue, **({PRIORITY_LABEL: priority} if priority else {})}

    def spec(n: int) -> dict[str, Any]:
        return {"replicas": n, "restartPolicy": "OnFailure",
                "template": {"spec": {"containers": [trainer_container(dataset)]}}}

    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"runPolicy": {"suspend": True},
                     "pytorchReplicaSpecs": {"Master": spec(1), "Worker": spec(workers)}}}


def v1_job_status(*conditions: dict[str, Any]) -> dict[str, Any]:
    return {"conditions": list(conditions), "replicaStatuses": {}}


def batch_job(name: str, namespace: str, dataset: str, queue: str, priority: str,
              parallelism: int = 1) -> dict[str, Any]:
    """A batch Job queued in Kueue (suspended by Kueue's webhook), as in the upstream
    job-suspended-with-priority example."""
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {QUEUE_LABEL: queue, PRIORITY_LABEL: priority}},
            "spec": {"parallelism": parallelism, "completions": parallelism, "suspend": True,
                     "template": {"spec": {"restartPolicy": "Never", "containers": [{
                         "name": "train", "image": "registry.k8s.io/e2e-test-images/agnhost",
                         "args": ["train", dataset],
                         "resources": {"requests": {"cpu": "1"}}}]}}}}


def workload_for(job: dict[str, Any], pod_sets: list[tuple[str, int, dict[str, Any]]],
                 queue: str, priority: tuple[str, int] | None) -> dict[str, Any]:
    """The Workload Kueue's job reconciler makes for ``job`` (pending: no quota yet)."""
    meta = job["metadata"]
    digest = hashlib.sha1(meta["uid"].encode()).hexdigest()[:5]
    spec: dict[str, Any] = {
        "active": True, "queueName": queue,
        "podSets": [{"name": n, "count": c, "template": copy.deepcopy(t)}
                    for n, c, t in pod_sets]}
    if priority:
        spec["priorityClassRef"] = {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass",
                                    "name": priority[0]}
        spec["priority"] = priority[1]
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": f"{job['kind'].lower()}-{meta['name']}-{digest}",
                         "namespace": meta["namespace"],
                         "labels": {"kueue.x-k8s.io/job-uid": meta["uid"]},
                         "ownerReferences": [owner_ref(job)]},
            "spec": spec,
            "status": {"conditions": [cond(
                "QuotaReserved", "False", "Pending",
                f"couldn't assign flavors to pod set {pod_sets[0][0]}: insufficient quota")]}}


def admitted(workload: dict[str, Any], cluster_queue: str = "cluster-queue") -> dict[str, Any]:
    """The status Kueue's scheduler writes when it admits the Workload."""
    return {"admission": {"clusterQueue": cluster_queue, "podSetAssignments": [
                {"name": ps["name"], "count": ps["count"], "flavors": {"cpu": "default-flavor"},
                 "resourceUsage": {"cpu": str(ps["count"])}}
                for ps in workload["spec"]["podSets"]]},
            "conditions": [cond("QuotaReserved", reason="QuotaReserved",
                                message=f"Quota reserved in ClusterQueue {cluster_queue}"),
                           cond("Admitted", reason="Admitted",
                                message="The workload is admitted")]}


def finished(workload_status: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(workload_status)
    out["conditions"].append(cond("Finished", reason="Succeeded",
                                  message="Job finished successfully"))
    return out


def pytorch_pod(job: dict[str, Any], rtype: str, index: int) -> dict[str, Any]:
    """A pod the training-operator makes for replica ``rtype`` (Master/Worker) #index."""
    spec = copy.deepcopy(job["spec"]["pytorchReplicaSpecs"][rtype]["template"]["spec"])
    name = job["metadata"]["name"]
    labels = {"training.kubeflow.org/job-name": name,
              "training.kubeflow.org/operator-name": "pytorchjob-controller",
              "training.kubeflow.org/replica-type": rtype.lower(),
              "training.kubeflow.org/replica-index": str(index)}
    if rtype == "Master":
        labels["training.kubeflow.org/job-role"] = "master"
    for c in spec["containers"]:
        c["env"] = [{"name": "MASTER_PORT", "value": "23456"},
                    {"name": "MASTER_ADDR", "value": f"{name}-master-0"},
                    {"name": "WORLD_SIZE", "value": "4"},
                    {"name": "RANK", "value": str(index + (0 if rtype == "Master" else 1))}]
    spec["restartPolicy"] = "OnFailure"
    spec["schedulerName"] = "default-scheduler"
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{name}-{rtype.lower()}-{index}",
                         "namespace": job["metadata"]["namespace"], "labels": labels,
                         "ownerReferences": [owner_ref(job)]},
            "spec": spec, "status": {"phase": "Pending"}}


def experiment(name: str, namespace: str, dataset: str, parallel: int) -> dict[str, Any]:
    """A Katib Experiment whose trials are batch Jobs reading ``dataset`` (after the upstream
    experiment-random-batchjob example, with the dataset as an argument)."""
    return {"apiVersion": "kubeflow.org/v1beta1", "kind": "Experiment",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "objective": {"type": "minimize", "goal": 0.001,
                              "objectiveMetricName": "loss"},
                "algorithm": {"algorithmName": "random"},
                "parallelTrialCount": parallel, "maxTrialCount": 6, "maxFailedTrialCount": 3,
                "parameters": [{"name": "lr", "parameterType": "double",
                                "feasibleSpace": {"min": "0.01", "max": "0.05"}}],
                "trialTemplate": {
                    "primaryContainerName": "training-container",
                    "trialParameters": [{"name": "learningRate", "reference": "lr",
                                         "description": "Learning rate"}],
                    "trialSpec": {"apiVersion": "batch/v1", "kind": "Job", "spec": {
                        "template": {"spec": {"restartPolicy": "Never", "containers": [{
                            "name": "training-container",
                            "image": "ghcr.io/kubeflow/katib/pytorch-mnist-cpu:latest",
                            "command": ["python3", "/opt/pytorch-mnist/mnist.py",
                                        "--lr=${trialParameters.learningRate}",
                                        "--data", dataset],
                            "resources": {"limits": {"cpu": "500m", "memory": "1Gi"}}}]}}}}}},
            "status": {"conditions": [cond("Created", reason="ExperimentCreated"),
                                      cond("Running", reason="ExperimentRunning")]}}


def trial(exp: dict[str, Any], lr: str) -> dict[str, Any]:
    """A Trial the Katib controller makes for ``exp`` with one suggestion substituted."""
    name = f"{exp['metadata']['name']}-{uuid.uuid4().hex[:8]}"
    run = copy.deepcopy(exp["spec"]["trialTemplate"]["trialSpec"])
    run["metadata"] = {"name": name, "namespace": exp["metadata"]["namespace"]}
    for c in run["spec"]["template"]["spec"]["containers"]:
        c["command"] = [a.replace("${trialParameters.learningRate}", lr) for a in c["command"]]
    return {"apiVersion": "kubeflow.org/v1beta1", "kind": "Trial",
            "metadata": {"name": name, "namespace": exp["metadata"]["namespace"],
                         "labels": {"katib.kubeflow.org/experiment": exp["metadata"]["name"]},
                         "ownerReferences": [owner_ref(exp)]},
            "spec": {"objective": exp["spec"]["objective"],
                     "parameterAssignments": [{"name": "lr", "value": lr}],
                     "primaryContainerName": "training-container",
                     "successCondition":
                         'status.conditions.#(type=="Complete")#|#(status=="True")#',
                     "failureCondition": 'status.conditions.#(type=="Failed")#|#(status=="True")#',
                     "runSpec": run},
            "status": {"conditions": [cond("Created", reason="TrialCreated")]}}


def trial_pod(tr: dict[str, Any]) -> dict[str, Any]:
    """The pod of a Trial's Job (Job controller's labels, plus Katib's trial label)."""
    run = tr["spec"]["runSpec"]
    name = tr["metadata"]["name"]
    spec = copy.deepcopy(run["spec"]["template"]["spec"])
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{name}-{uuid.uuid4().hex[:5]}",
                         "namespace": tr["metadata"]["namespace"],
                         "labels": {"batch.kubernetes.io/job-name": name, "job-name": name,
                                    "katib.kubeflow.org/trial": name,
                                    "katib.kubeflow.org/experiment":
                                        tr["metadata"]["labels"]["katib.kubeflow.org/experiment"]},
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                              "name": name, "uid": str(uuid.uuid4()),
                                              "controller": True,
                                              "blockOwnerDeletion": True}]},
            "spec": spec, "status": {"phase": "Pending"}}


def trial_job(tr: dict[str, Any]) -> dict[str, Any]:
    """The run object Katib creates for a Trial: named as the Trial, owned by it."""
    job = copy.deepcopy(tr["spec"]["runSpec"])
    job["metadata"]["ownerReferences"] = [owner_ref(tr)]
    job["metadata"]["labels"] = {"katib.kubeflow.org/trial": tr["metadata"]["name"]}
    return job


def runtime(relpath: str) -> dict[str, Any]:
    """An upstream (Cluster)TrainingRuntime from ../shared/k8s/crds/kubeflow-trainer/runtimes."""
    return yaml.safe_load(shared_file(f"kubeflow-trainer/runtimes/{relpath}").read_text())


def trainjob(name: str, namespace: str, dataset: str, nodes: int, queue: str) -> dict[str, Any]:
    """A TrainJob on ClusterTrainingRuntime torch-distributed, queued in Kueue (as the
    upstream trainjob-03-kueue-integration example: ``suspend: true``)."""
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {QUEUE_LABEL: queue}},
            "spec": {"runtimeRef": {"apiGroup": "trainer.kubeflow.org",
                                    "kind": "ClusterTrainingRuntime",
                                    "name": "torch-distributed"},
                     "suspend": True,
                     "trainer": {"numNodes": nodes, "image": "python:3.11-slim",
                                 "command": ["python3", "train.py"],
                                 "args": ["--data", dataset],
                                 "resourcesPerNode": {"requests": {"cpu": "2",
                                                                   "memory": "4Gi"}}}}}


def trainjob_pod_template(job: dict[str, Any], rt: dict[str, Any]) -> dict[str, Any]:
    """The node pod template the trainer controller builds: the runtime's, with the job's
    trainer image, command, args and resources."""
    (rjob,) = [r for r in rt["spec"]["template"]["spec"]["replicatedJobs"]
               if r["name"] == "node"]
    tpl = copy.deepcopy(rjob["template"]["spec"]["template"])
    tr = job["spec"]["trainer"]
    for c in tpl["spec"]["containers"]:
        if c["name"] == "node":
            c.update(image=tr["image"], command=tr["command"], args=tr["args"],
                     resources=tr["resourcesPerNode"])
    return tpl


def trainjob_pod(job: dict[str, Any], rt: dict[str, Any], index: int) -> dict[str, Any]:
    """A pod of the TrainJob's JobSet (replicated job ``node``, one indexed Job)."""
    name, ns = job["metadata"]["name"], job["metadata"]["namespace"]
    tpl = trainjob_pod_template(job, rt)
    job_name = f"{name}-node-0"
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{job_name}-{index}-{uuid.uuid4().hex[:5]}", "namespace": ns,
                         "labels": {**(tpl.get("metadata") or {}).get("labels", {}),
                                    "jobset.sigs.k8s.io/jobset-name": name,
                                    "jobset.sigs.k8s.io/replicatedjob-name": "node",
                                    "jobset.sigs.k8s.io/job-index": "0",
                                    "batch.kubernetes.io/job-name": job_name,
                                    "job-name": job_name,
                                    "batch.kubernetes.io/job-completion-index": str(index)},
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                              "name": job_name, "uid": str(uuid.uuid4()),
                                              "controller": True,
                                              "blockOwnerDeletion": True}]},
            "spec": {**copy.deepcopy(tpl["spec"]), "subdomain": name,
                     "hostname": f"{job_name}-{index}"},
            "status": {"phase": "Pending"}}


def cronjob(name: str, namespace: str, dataset: str, parallelism: int) -> dict[str, Any]:
    """A nightly fine-tune: a CronJob whose Job runs ``parallelism`` pods reading ``dataset``."""
    return {"apiVersion": "batch/v1", "kind": "CronJob",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"schedule": "0 2 * * *", "concurrencyPolicy": "Forbid",
                     "successfulJobsHistoryLimit": 3, "failedJobsHistoryLimit": 1,
                     "suspend": False,
                     "jobTemplate": {
                         "metadata": {"labels": {"app": name}},
                         "spec": {"parallelism": parallelism, "completions": parallelism,
                                  "template": {"metadata": {"labels": {"app": name}},
                                               "spec": {"restartPolicy": "Never",
                                                        "containers": [trainer_container(
                                                            dataset)]}}}}}}


def cronjob_run(cj: dict[str, Any], minutes: int) -> dict[str, Any]:
    """The Job the CronJob controller makes for the run scheduled at ``minutes``."""
    tmpl = copy.deepcopy(cj["spec"]["jobTemplate"])
    meta = tmpl.get("metadata") or {}
    stamp = dt.datetime.fromtimestamp(minutes * 60, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": f"{cj['metadata']['name']}-{minutes}",
                         "namespace": cj["metadata"]["namespace"],
                         "labels": dict(meta.get("labels") or {}),
                         "annotations": {**(meta.get("annotations") or {}),
                                         "batch.kubernetes.io/cronjob-scheduled-timestamp":
                                             stamp},
                         "ownerReferences": [owner_ref(cj)]},
            "spec": tmpl["spec"]}


def job_pod(job: dict[str, Any]) -> dict[str, Any]:
    """One pod of a batch Job, as the Job controller makes it."""
    name, uid = job["metadata"]["name"], job["metadata"]["uid"]
    tmpl = copy.deepcopy(job["spec"]["template"])
    labels = {**((tmpl.get("metadata") or {}).get("labels") or {}),
              "batch.kubernetes.io/job-name": name, "job-name": name,
              "batch.kubernetes.io/controller-uid": uid, "controller-uid": uid}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{name}-{uuid.uuid4().hex[:5]}",
                         "namespace": job["metadata"]["namespace"], "labels": labels,
                         "ownerReferences": [owner_ref(job)]},
            "spec": tmpl["spec"], "status": {"phase": "Pending"}}


def rayjob(name: str, namespace: str, dataset: str, workers: int, queue: str) -> dict[str, Any]:
    """A RayJob (a head without CPUs for tasks, one GPU worker group of ``workers``) running
    ``python embed.py --input <dataset>``, as submitted to a Kueue queue after Kueue's webhook
    suspended it (``spec.suspend: true``)."""
    def template(cname: str, image: str) -> dict[str, Any]:
        return {"spec": {"containers": [{"name": cname, "image": image,
                                         "resources": {"limits": {"cpu": "1"}}}]}}

    return {"apiVersion": "ray.io/v1", "kind": "RayJob",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {QUEUE_LABEL: queue}},
            "spec": {"suspend": True, "shutdownAfterJobFinishes": True,
                     "entrypoint": f"python /home/ray/embed.py --input {dataset}",
                     "rayClusterSpec": {
                         "rayVersion": "2.40.0",
                         "headGroupSpec": {"rayStartParams": {"num-cpus": "0"},
                                           "template": template("ray-head",
                                                                "rayproject/ray:2.40.0")},
                         "workerGroupSpecs": [{
                             "groupName": "gpu", "replicas": workers, "minReplicas": 1,
                             "maxReplicas": 8, "rayStartParams": {},
                             "template": template("ray-worker", "rayproject/ray:2.40.0")}]}}}


def raycluster_of(job: dict[str, Any], suffix: str = "x7k2q") -> dict[str, Any]:
    """The RayCluster KubeRay makes for a RayJob (status.rayClusterName of the job)."""
    name = job["metadata"]["name"]
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": f"{name}-{suffix}", "namespace": job["metadata"]["namespace"],
                         "uid": str(uuid.uuid4()),
                         "labels": {**job["metadata"].get("labels", {}),
                                    "ray.io/originated-from-cr-name": name,
                                    "ray.io/originated-from-crd": "RayJob",
                                    "ray.io/job-submission-mode": "K8sJobMode"},
                         "ownerReferences": [owner_ref(job)]},
            "spec": copy.deepcopy(job["spec"]["rayClusterSpec"])}


def ray_pod(cluster: dict[str, Any], group: str, suffix: str = "bxq2z") -> dict[str, Any]:
    """A pod KubeRay makes for a RayCluster's group ("headgroup" for the head)."""
    name = cluster["metadata"]["name"]
    head = group == "headgroup"
    spec = copy.deepcopy(cluster["spec"]["headGroupSpec"]["template"]["spec"] if head else next(
        g for g in cluster["spec"]["workerGroupSpecs"] if g["groupName"] == group
    )["template"]["spec"])
    node_type = "head" if head else "worker"
    labels = {"ray.io/is-ray-node": "yes", "ray.io/cluster": name,
              "ray.io/node-type": node_type, "ray.io/group": group,
              "ray.io/identifier": f"{name}-{node_type}",
              "app.kubernetes.io/name": "kuberay",
              "app.kubernetes.io/created-by": "kuberay-operator"}
    def label(key: str) -> dict[str, Any]:
        return {"fieldRef": {"fieldPath": f"metadata.labels['{key}']"}}

    for c in spec["containers"]:  # as setContainerEnvVars adds them (downward API)
        c["env"] = [{"name": "RAY_CLUSTER_NAME", "valueFrom": label("ray.io/cluster")},
                    {"name": "RAY_CLUSTER_NAMESPACE",
                     "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                    {"name": "RAY_CLOUD_INSTANCE_ID",
                     "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "RAY_NODE_TYPE_NAME", "valueFrom": label("ray.io/group")},
                    {"name": "KUBERAY_GEN_RAY_START_CMD",
                     "value": "ray start --head --num-cpus=0 --block" if head else
                     "ray start --address=" + name + "-head-svc:6379 --block"}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{name}-{'head' if head else group + '-worker'}-{suffix}",
                         "namespace": cluster["metadata"]["namespace"], "labels": labels,
                         "ownerReferences": [owner_ref(cluster)]},
            "spec": spec, "status": {"phase": "Pending"}}
