"""Every kind read from its upstream examples: pod groups, pod counts, constraints, datasets,
state as the controllers move it, Kueue queue and priority, release keys."""

from __future__ import annotations

import copy
import os

import pytest
import yaml
from workload_helpers import condition, doc, library

from prefetchd import workloads
from prefetchd.workloads import State

SHARED_CRDS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "k8s", "crds")
OWN_CRDS = os.path.join(os.path.dirname(__file__), "..", "k8s", "data", "crds")


def groups(work: workloads.UpcomingWork) -> list[tuple[str, int]]:
    return [(g.name, g.pods) for g in work.groups]


# ---------------------------------------------------------------- upstream examples as they are


@pytest.mark.parametrize("name,kind,expect_groups,nodes,state", [
    ("kubeflow-trainer/pytorchjob-simple.yaml", "PyTorchJob",
     [("Master", 1), ("Worker", 1)], 2, State.ADMITTED),
    ("kubeflow-trainer/tfjob-multi-worker-pvc.yaml", "TFJob", [("Worker", 2)], 2,
     State.ADMITTED),
    ("kueue/sample-pytorchjob.yaml", "PyTorchJob", [("Master", 1), ("Worker", 1)], 2,
     State.ADMITTED),
    ("kueue/sample-job.yaml", "Job", [("main", 3)], 3, State.ADMITTED),
    ("kueue/job-suspended-with-priority.yaml", "Job", [("main", 3)], 3, State.QUEUED),
    ("kueue/sample-jobset.yaml", "JobSet", [("workers", 1), ("driver", 1)], 2, State.ADMITTED),
    ("kueue/workload-for-sample-job.yaml", "Workload", [("dummy-job", 3)], 3, State.QUEUED),
    ("kueue/workload-team-a.yaml", "Workload", [("main", 3)], 3, State.QUEUED),
    ("jobset/paralleljobs.yaml", "JobSet", [("workers", 4), ("driver", 1)], 5, State.ADMITTED),
    ("jobset/single-pvc.yaml", "JobSet", [("initializer", 1), ("node", 3)], 3, State.ADMITTED),
    ("kubeflow-trainer/trainjob-01-multi-node.yaml", "TrainJob", [("node", 3)], 3,
     State.ADMITTED),
    ("kubeflow-trainer/trainjob-02-runtime-patches.yaml", "TrainJob", [("node", 2)], 2,
     State.ADMITTED),
    ("kubeflow-trainer/trainjob-03-kueue-integration.yaml", "TrainJob", [("node", 3)], 3,
     State.QUEUED),
    ("kubeflow-trainer/trainjob-05-multi-step.yaml", "TrainJob",
     [("dataset-initializer", 1), ("node", 2)], 2, State.ADMITTED),
    ("katib/experiment-random-batchjob.yaml", "Experiment", [("main", 1)], 3, State.ADMITTED),
    ("katib/experiment-pytorchjob-mnist.yaml", "Experiment", [("Master", 1), ("Worker", 1)],
     6, State.ADMITTED),
    ("katib/experiment-trainjob-pytorch.yaml", "Experiment", [("node", 2)], 6,
     State.ADMITTED),
    ("katib/experiment-trial-configmap-source.yaml", "Experiment", [("main", 1)], 2,
     State.ADMITTED),
])
def test_upstream_example(name: str, kind: str, expect_groups: list[tuple[str, int]],
                          nodes: int, state: State) -> None:
    lib = library("kubeflow-trainer/torch_distributed.yaml",
                  "kubeflow-trainer/trainjob-05-multi-step.yaml",
                  "katib/configmap-trial-templates.yaml",
                  "kueue/workloadpriorityclass-sample-priority.yaml")
    work = workloads.read(doc(name, kind), lib)
    assert work.kind == kind
    assert groups(work) == expect_groups
    assert work.nodes == nodes
    assert work.state is state


def test_kinds_match_the_crds() -> None:
    """Group, plural, scope and served version of every kind read, against the upstream CRDs
    (controller-gen names each file ``<group>_<plural>.yaml``); KubeRay's, which
    ../shared lacks, against the tests' own (tests/k8s/data/crds)."""
    if not os.path.isdir(SHARED_CRDS):
        pytest.skip("../shared/k8s/crds is not beside this checkout")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the CRDs are 0.5-1.4 MB each
    for k in workloads.KINDS:
        if k.group == "batch":
            continue  # built into Kubernetes
        fname = f"{k.group}_{k.plural}.yaml"
        found = [os.path.join(root, fname) for top in (SHARED_CRDS, OWN_CRDS)
                 for root, _, files in os.walk(top) if fname in files]
        assert len(found) == 1, (k, found)
        with open(found[0]) as fh:
            crd = yaml.load(fh, Loader=loader)
        assert crd["spec"]["names"]["kind"] == k.kind
        assert (crd["spec"]["scope"] == "Namespaced") == k.namespaced
        served = {v["name"] for v in crd["spec"]["versions"] if v.get("served")}
        assert k.versions[0] in served, (k, served)


# ---------------------------------------------------------------- Kubeflow Trainer


def test_trainjob_runtime_patches_reach_the_pods() -> None:
    lib = library("kubeflow-trainer/torch_distributed.yaml")
    work = workloads.read(doc("kubeflow-trainer/trainjob-02-runtime-patches.yaml"), lib)
    (node,) = work.groups
    spec = node.spec
    assert spec["nodeSelector"] == {"node-type": "training"}
    assert spec["tolerations"] == [{"key": "training-workload", "operator": "Equal",
                                    "value": "true", "effect": "NoSchedule"}]
    assert spec["serviceAccountName"] == "training-sa"
    # the patch's template.metadata labels are the JobSet's, not the pods'
    assert "team" not in node.labels
    (c,) = spec["containers"]
    assert c["image"] == "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"  # from the runtime
    assert c["command"][0] == "torchrun"  # from spec.trainer
    assert {e["name"]: e["value"] for e in c["env"]} == {"CUSTOM_VAR": "custom-value",
                                                        "PYTHONUNBUFFERED": "1"}
    req = node.requirements
    assert req.requests["cpu"] == 2 and req.requests["memory"] == 4 * 2**30
    assert dict(req.node_selector) == {"node-type": "training"}


def test_trainjob_dataset_initializer_storage_uri() -> None:
    files = "kubeflow-trainer/trainjob-05-multi-step.yaml"
    lib = library(files)
    job = doc(files, "TrainJob")
    work = workloads.read(job, lib)
    init, node = work.groups
    assert node.after == ("dataset-initializer",)
    assert work.stages == {"dataset-initializer": 0, "node": 1}
    (ref,) = init.datasets
    assert (ref.uri, ref.origin, ref.container, ref.warmable) == (
        "hf://tatsu-lab/alpaca", "env STORAGE_URI", "dataset-initializer", False)
    assert work.targets() == []  # hf:// is not warmed
    # The same job reading from S3 (one field changed): the initializer's node warms it.
    job["spec"]["initializer"]["dataset"]["storageUri"] = "s3://datasets/alpaca/"
    work = workloads.read(job, lib)
    (t,) = work.targets()
    assert (t.dataset, t.nodes, t.groups, t.stage) == ("s3://datasets/alpaca/", 1,
                                                       ("dataset-initializer",), 0)


def test_trainjob_storage_uri_without_initializer_is_noted() -> None:
    job = doc("kubeflow-trainer/trainjob-01-multi-node.yaml")
    job["spec"]["initializer"] = {"dataset": {"storageUri": "s3://datasets/x/"}}
    work = workloads.read(job, library("kubeflow-trainer/torch_distributed.yaml"))
    assert work.targets() == []
    assert any("no dataset-initializer step" in n for n in work.notes)


def test_trainjob_on_torchtune_runtime_volume_claims_and_gpus() -> None:
    lib = library("kubeflow-trainer/torchtune_llama3_2_1B.yaml")
    job = doc("kubeflow-trainer/trainjob-01-multi-node.yaml")
    job["spec"]["runtimeRef"]["name"] = "torchtune-llama3.2-1b"
    del job["spec"]["trainer"]["command"]
    work = workloads.read(job, lib)
    assert groups(work) == [("dataset-initializer", 1), ("model-initializer", 1), ("node", 3)]
    node = work.groups[2]
    assert node.after == ("dataset-initializer", "model-initializer")
    assert node.requirements.requests["nvidia.com/gpu"] == 2
    # the runtime's volumeClaimPolicies PVC, named <template>-<trainjob>, mounted by template name
    claims = {(r.claim, r.path) for r in node.datasets if r.claim}
    assert claims == {("initializer-multi-node-example", "dataset/data"),
                      ("initializer-multi-node-example", "model/original/tokenizer.model"),
                      ("initializer-multi-node-example", "model")}
    assert ("initializer-multi-node-example", "output") not in claims  # output_dir: a write


def test_trainjob_states_as_the_controller_moves_them() -> None:
    lib = library("kubeflow-trainer/torch_distributed.yaml")
    job = doc("kubeflow-trainer/trainjob-03-kueue-integration.yaml")
    job["status"] = {"conditions": [condition("Suspended", reason="Suspended")]}
    work = workloads.read(job, lib)
    assert (work.state, work.queue) == (State.QUEUED, "training-queue")
    job["spec"]["suspend"] = False  # Kueue admits it
    job["status"]["conditions"][0].update(status="False", reason="Resumed")
    assert workloads.read(job, lib).state is State.ADMITTED
    job["status"]["jobsStatus"] = [{"name": "node", "active": 1, "ready": 1, "succeeded": 0,
                                    "failed": 0, "suspended": 0}]
    assert workloads.read(job, lib).state is State.RUNNING
    job["status"]["conditions"].append(condition("Complete", reason="JobsCompleted"))
    assert workloads.read(job, lib).state is State.SUCCEEDED


def test_trainjob_on_namespaced_training_runtime() -> None:
    files = "kubeflow-trainer/trainjob-05-multi-step.yaml"
    job = doc(files, "TrainJob")
    job["metadata"]["namespace"] = "team-b"
    with pytest.raises(workloads.WorkloadError, match="unknown runtime TrainingRuntime "
                       "team-b/torch-with-dataset-init"):
        workloads.read(job, library(files))  # the runtime is in "default"


# ---------------------------------------------------------------- kubeflow.org/v1 jobs


def test_pytorchjob_states() -> None:
    job = doc("kueue/sample-pytorchjob.yaml")
    job["spec"]["runPolicy"] = {"suspend": True}
    assert workloads.read(job).state is State.QUEUED
    job["spec"]["runPolicy"]["suspend"] = False
    job["status"] = {"conditions": [condition("Created", reason="PyTorchJobCreated")]}
    assert workloads.read(job).state is State.ADMITTED
    job["status"]["conditions"].append(condition("Running", reason="PyTorchJobRunning"))
    assert workloads.read(job).state is State.RUNNING
    job["status"]["conditions"][1]["status"] = "False"
    job["status"]["conditions"].append(condition("Succeeded", reason="PyTorchJobSucceeded"))
    assert workloads.read(job).state is State.SUCCEEDED


@pytest.mark.parametrize("kind,field,types", [
    ("TFJob", "tfReplicaSpecs", ["Chief", "PS", "Worker", "Evaluator"]),
    ("MPIJob", "mpiReplicaSpecs", ["Launcher", "Worker"]),
    ("JAXJob", "jaxReplicaSpecs", ["Worker"]),
    ("XGBoostJob", "xgbReplicaSpecs", ["Master", "Worker"]),
    ("PaddleJob", "paddleReplicaSpecs", ["Master", "Worker"]),
])
def test_every_replica_spec_of_every_v1_kind(kind: str, field: str, types: list[str]) -> None:
    """The PyTorchJob example's pod template under each kind's replica-spec field."""
    base = doc("kubeflow-trainer/pytorchjob-simple.yaml")
    template = base["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    job = {"apiVersion": "kubeflow.org/v1", "kind": kind,
           "metadata": {"name": "j", "namespace": "ns"},
           "spec": {field: {t: {"replicas": i + 1, "template": copy.deepcopy(template)}
                            for i, t in enumerate(types)}}}
    work = workloads.read(job)
    assert groups(work) == [(t, i + 1) for i, t in enumerate(types)]
    assert work.key == f"{kind.lower()} ns/j"


# ---------------------------------------------------------------- Katib


def test_experiment_static_parameters_substituted() -> None:
    exp = doc("katib/experiment-random-batchjob.yaml")
    # a dataset parameter with one feasible value: static, so warmable before any trial
    exp["spec"]["parameters"].append({"name": "data", "parameterType": "categorical",
                                      "feasibleSpace": {"list": ["s3://datasets/mnist/"]}})
    exp["spec"]["trialTemplate"]["trialParameters"].append({"name": "dataPath",
                                                           "reference": "data"})
    c = exp["spec"]["trialTemplate"]["trialSpec"]["spec"]["template"]["spec"]["containers"][0]
    c["command"].append("--data=${trialParameters.dataPath}")
    work = workloads.read(exp)
    assert "--data=s3://datasets/mnist/" in work.groups[0].spec["containers"][0]["command"]
    assert "--lr=${trialParameters.learningRate}" in \
        work.groups[0].spec["containers"][0]["command"]  # tuned: left for the Trial
    (t,) = work.targets()
    assert (t.dataset, t.nodes) == ("s3://datasets/mnist/", 3)  # parallelTrialCount 3
    assert work.release_key == "experiment kubeflow/random"
    # Two feasible values that are locations: the trials running at once read different
    # ones, so each is warmed (blind job round 57: neither was, nor shown as a read), and the
    # candidates are shown
    exp["spec"]["parameters"][-1]["feasibleSpace"]["list"].append("s3://datasets/fashion/")
    work = workloads.read(exp)
    assert [(t.dataset, t.nodes) for t in work.targets()] == [
        ("s3://datasets/mnist/", 3), ("s3://datasets/fashion/", 3)]
    assert "per-trial values: dataPath (one of s3://datasets/mnist/, s3://datasets/fashion/), " \
        "learningRate, momentum" in work.notes
    # A location holding a per-trial part drawn from a short list: the trials running at
    # once read different ones, so each is warmed; a part that is a location of its own
    # (the list above) or a range is a runtime-only dataset, never a guess.
    c["command"][-1] = "--data=s3://datasets/${trialParameters.dataPath}/train"
    (ref,) = workloads.read(exp).groups[0].datasets
    assert ref.pattern == "--data=s3://datasets/${trialParameters.dataPath}/train"
    assert not ref.warmable
    exp["spec"]["parameters"][-1]["feasibleSpace"]["list"] = ["mnist", "fashion"]
    refs = workloads.read(exp).groups[0].datasets
    assert [r.uri for r in refs] == ["s3://datasets/mnist/train", "s3://datasets/fashion/train"]
    c["command"][-1] = "--data=s3://datasets/${trialParameters.learningRate}/train"
    (ref,) = workloads.read(exp).groups[0].datasets
    assert not ref.warmable


def test_experiment_configmap_trial_template() -> None:
    exp = doc("katib/experiment-trial-configmap-source.yaml")
    work = workloads.read(exp, library("katib/configmap-trial-templates.yaml"))
    (g,) = work.groups
    assert g.spec["containers"][0]["name"] == "training-container"
    assert work.copies == 2  # parallelTrialCount


def test_experiment_states() -> None:
    exp = doc("katib/experiment-random-batchjob.yaml")
    exp["status"] = {"conditions": [condition("Created", katib=True)]}
    assert workloads.read(exp).state is State.ADMITTED
    exp["status"]["conditions"].append(condition("Running", katib=True))
    assert workloads.read(exp).state is State.RUNNING
    exp["status"]["conditions"][1]["status"] = "False"
    exp["status"]["conditions"].append(condition("Succeeded", reason="ExperimentGoalReached",
                                                 katib=True))
    assert workloads.read(exp).state.done
    # trials whose Jobs go through a Kueue queue wait there until they run
    queued = doc("katib/experiment-random-batchjob.yaml")
    queued["status"] = {"conditions": [condition("Created", katib=True)]}
    run = queued["spec"]["trialTemplate"]["trialSpec"]
    run.setdefault("metadata", {})["labels"] = {"kueue.x-k8s.io/queue-name": "hpo"}
    work = workloads.read(queued)
    assert work.state is State.QUEUED and work.queue == "hpo"
    queued["status"]["conditions"].append(condition("Running", katib=True))
    assert workloads.read(queued).state is State.RUNNING


def _trial_of(exp: dict, name: str, lr: str, momentum: str) -> dict:
    """A Trial as the Katib controller makes it from ``exp``: runSpec rendered."""
    run = copy.deepcopy(exp["spec"]["trialTemplate"]["trialSpec"])
    text = yaml.safe_dump(run).replace("${trialParameters.learningRate}", lr).replace(
        "${trialParameters.momentum}", momentum)
    run = yaml.safe_load(text)
    run["metadata"] = {"name": name, "namespace": "kubeflow"}
    return {
        "apiVersion": "kubeflow.org/v1beta1", "kind": "Trial",
        "metadata": {"name": name, "namespace": "kubeflow", "uid": "t-1",
                     "labels": {"katib.kubeflow.org/experiment": exp["metadata"]["name"]},
                     "ownerReferences": [{"apiVersion": "kubeflow.org/v1beta1",
                                          "kind": "Experiment",
                                          "name": exp["metadata"]["name"], "uid": "e-1",
                                          "controller": True, "blockOwnerDeletion": True}]},
        "spec": {"runSpec": run, "primaryContainerName": "pytorch",
                 "parameterAssignments": [{"name": "lr", "value": lr},
                                          {"name": "momentum", "value": momentum}]},
    }


def test_trial_shares_its_experiments_release_key() -> None:
    exp = doc("katib/experiment-pytorchjob-mnist.yaml")
    trial = _trial_of(exp, "pytorchjob-mnist-7x2kq", "0.0213", "0.61")
    work = workloads.read(trial)
    assert groups(work) == [("Master", 1), ("Worker", 1)]
    assert "--lr=0.0213" in work.groups[0].spec["containers"][0]["command"]
    assert work.release_key == workloads.read(exp).release_key == \
        "experiment kubeflow/pytorchjob-mnist"
    assert work.owner is None  # a Trial is read on its own, not skipped for its Experiment
    trial["status"] = {"conditions": [condition("Created", katib=True),
                                      condition("Running", katib=True)]}
    assert workloads.read(trial).state is State.RUNNING
    trial["status"]["conditions"].append(condition("Succeeded", katib=True))
    assert workloads.read(trial).state is State.SUCCEEDED


# ---------------------------------------------------------------- Kueue


def _admit(wl: dict, flavor: str = "default-flavor", pods_ready: bool = False) -> None:
    """The status Kueue writes on admission (see kueue/README: QuotaReserved, Admitted)."""
    ps = wl["spec"]["podSets"][0]
    wl["status"] = {
        "admission": {"clusterQueue": "cluster-queue", "podSetAssignments": [{
            "name": ps["name"], "count": ps["count"],
            "flavors": {"cpu": flavor, "memory": flavor},
            "resourceUsage": {"cpu": "3", "memory": "600Mi"}}]},
        "conditions": [condition("QuotaReserved", reason="QuotaReserved"),
                       condition("Admitted", reason="Admitted")],
    }
    if pods_ready:
        wl["status"]["conditions"].append(condition("PodsReady", reason="PodsReady"))


def test_workload_priority_queue_and_owner() -> None:
    wl = doc("kueue/workload-for-sample-job.yaml")
    wl["metadata"].update(namespace="default", ownerReferences=[{
        "apiVersion": "batch/v1", "kind": "Job", "name": "sample-job", "uid": "j-1",
        "controller": True, "blockOwnerDeletion": True}],
        labels={"kueue.x-k8s.io/job-uid": "j-1"})
    work = workloads.read(wl)
    assert (work.state, work.queue, work.priority_class, work.priority) == (
        State.QUEUED, "user-queue", "sample-priority", 10000)
    job = workloads.read(doc("kueue/job-suspended-with-priority.yaml"),
                         library("kueue/workloadpriorityclass-sample-priority.yaml"))
    assert work.owner == work.release_key == job.key == "job default/sample-job"
    assert job.priority == 10000


def test_workload_admission_adds_flavor_constraints() -> None:
    wl = doc("kueue/workload-team-a.yaml")
    wl["status"] = {"conditions": [condition("QuotaReserved", "False", reason="Pending",
                                             message="couldn't assign flavors")]}
    assert workloads.read(wl).state is State.QUEUED
    _admit(wl)
    flavor = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
              "metadata": {"name": "default-flavor"},
              "spec": {"nodeLabels": {"cloud.example.com/pool": "a100"},
                       "tolerations": [{"key": "gpu", "operator": "Exists",
                                        "effect": "NoSchedule"}]}}
    work = workloads.read(wl, workloads.Library([flavor]))
    assert work.state is State.ADMITTED
    assert dict(work.groups[0].requirements.node_selector) == {"cloud.example.com/pool": "a100"}
    assert work.groups[0].spec["tolerations"][0]["key"] == "gpu"
    unknown = workloads.read(wl)
    assert any("ResourceFlavor default-flavor unknown" in n for n in unknown.notes)
    _admit(wl, pods_ready=True)
    assert workloads.read(wl).state is State.RUNNING
    wl["status"]["conditions"].append(condition("Finished", reason="Succeeded"))
    assert workloads.read(wl).state is State.SUCCEEDED
    wl["status"]["conditions"][-1]["reason"] = "Failed"
    assert workloads.read(wl).state is State.FAILED
    del wl["status"]
    wl["spec"]["active"] = False
    assert workloads.read(wl).state is State.INACTIVE


def test_warm_order_admitted_first_then_priority_then_age() -> None:
    lib = library("kueue/workloadpriorityclass-sample-priority.yaml")
    high = doc("kueue/job-suspended-with-priority.yaml")
    high["metadata"]["creationTimestamp"] = "2026-11-30T10:05:00Z"
    low = copy.deepcopy(high)
    low["metadata"].update(name="low", creationTimestamp="2026-11-30T10:00:00Z")
    del low["metadata"]["labels"]["kueue.x-k8s.io/priority-class"]
    older_high = copy.deepcopy(high)
    older_high["metadata"].update(name="older", creationTimestamp="2026-11-30T09:00:00Z")
    admitted = copy.deepcopy(low)
    admitted["metadata"]["name"] = "admitted"
    admitted["spec"]["suspend"] = False
    works = [workloads.read(o, lib) for o in (low, high, admitted, older_high)]
    ordered = [w.name for w in sorted(works, key=workloads.order_key)]
    assert ordered == ["admitted", "older", "sample-job", "low"]


def test_a_pod_priority_class_is_the_priority_of_a_job_kueue_has_no_class_for() -> None:
    """Kueue gives a job without a ``kueue.x-k8s.io/priority-class`` label the value of its
    pods' ``priorityClassName`` (a scheduling.k8s.io PriorityClass); the label wins."""
    pclass = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
              "metadata": {"name": "research-high"}, "value": 5000}
    lib = library("kueue/workloadpriorityclass-sample-priority.yaml")
    lib.add(pclass)
    job = doc("kueue/job-suspended-with-priority.yaml")
    job["spec"]["template"]["spec"]["priorityClassName"] = "research-high"
    assert (workloads.read(job, lib).priority_class, workloads.read(job, lib).priority) == (
        "sample-priority", 10000)
    del job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"]
    work = workloads.read(job, lib)
    assert (work.priority_class, work.priority) == ("research-high", 5000)
    assert (work.to_json(lambda r: None)["priority_class"], work.to_json(lambda r: None)[
        "priority"]) == ("research-high", 5000)
    assert workloads.read(job).priority is None  # the class not known: no value
    job["spec"]["template"]["spec"]["priorityClassName"] = "system-node-critical"
    assert workloads.read(job).priority == 2_000_001_000
    fetched: list[str] = []

    def get_json(path: str) -> dict | None:
        fetched.append(path)
        return {k: v for k, v in pclass.items() if k not in ("kind", "apiVersion")}

    job["spec"]["template"]["spec"]["priorityClassName"] = "research-high"
    work = workloads.read(job, workloads.Library(fetch=workloads.fetcher(get_json)))
    assert work.priority == 5000
    assert fetched == ["/apis/scheduling.k8s.io/v1/priorityclasses/research-high"]


# ---------------------------------------------------------------- JobSet and owners


def test_jobset_volume_claims_depends_on_and_shell_writes() -> None:
    work = workloads.read(doc("jobset/single-pvc.yaml"))
    init, node = work.groups
    assert node.after == ("initializer",)
    # the initializer writes qwen3.txt (shell redirection): nothing to read there
    assert init.datasets == ()
    reads = [(r.claim, r.path) for r in node.datasets if r.claim]
    assert reads == [("initializer-volume-claim-trainjob", "qwen3.txt")]


def test_owned_objects_name_their_owner() -> None:
    js = doc("jobset/paralleljobs.yaml")
    js["metadata"].update(name="multi-node-example", namespace="default", ownerReferences=[{
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "name": "multi-node-example", "uid": "u", "controller": True}])
    work = workloads.read(js)
    assert work.owner == work.release_key == "trainjob default/multi-node-example"
    job = doc("kueue/sample-job.yaml")
    job["metadata"].update(name="x-workers-0", ownerReferences=[{
        "apiVersion": "ray.io/v1", "kind": "RayJob", "name": "nightly", "uid": "c",
        "controller": True}])
    # KubeRay's submitter Job: its pod only hands the entrypoint to the RayJob's cluster
    assert workloads.read(job).owner == "rayjob default/nightly"
    job["metadata"]["ownerReferences"][0].update(apiVersion="ray.io/v1", kind="RayService")
    assert workloads.read(job).owner is None  # a kind not read: the Job is its own work
    job["metadata"]["ownerReferences"][0].update(apiVersion="batch/v1", kind="CronJob")
    assert workloads.read(job).owner == "cronjob default/nightly"  # a run of the CronJob
