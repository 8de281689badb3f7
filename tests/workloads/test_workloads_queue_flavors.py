"""A job waiting in a Kueue queue is warmed on the nodes of the flavors its ClusterQueue can
give it (prefetchd/workloads/_queue_flavors.py). Before, only an admitted Workload carried
its flavor's node labels, so a queued job's data was warmed on any node (a CPU node for a
GPU job, which the pods never reach) and not at all where the flavor's nodes are tainted.

The queue objects are shaped as Kueue's v1beta2 CRDs (../shared/k8s/crds/kueue) and its
single-clusterqueue-setup example; what Kueue's flavor assigner checks is in the CRD's field
descriptions (nodeLabels against the pods' nodeSelector and node affinity, nodeTaints against
the pods' and the flavor's tolerations)."""

from __future__ import annotations

import copy
import subprocess
import sys
from typing import Any

import yaml

from prefetchd import workloads
from prefetchd.k8s import placement
from prefetchd.workloads import State
from prefetchd.workloads._library import Library

KUEUE = "kueue.x-k8s.io/v1beta2"


def flavor(name: str, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": name},
            "spec": {**({"nodeLabels": labels} if labels else {}), **spec}}


def cluster_queue(name: str, groups: list[tuple[list[str], list[tuple[str, dict[str, Any]]]]],
                  **spec: Any) -> dict[str, Any]:
    return {"apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": name},
            "spec": {"namespaceSelector": {}, **spec, "resourceGroups": [
                {"coveredResources": covered,
                 "flavors": [{"name": f, "resources": [{"name": r, "nominalQuota": q}
                                                       for r, q in quota.items()]}
                             for f, quota in flavors]}
                for covered, flavors in groups]}}


def local_queue(name: str, namespace: str, cq: str) -> dict[str, Any]:
    return {"apiVersion": KUEUE, "kind": "LocalQueue",
            "metadata": {"name": name, "namespace": namespace}, "spec": {"clusterQueue": cq}}


def job(requests: dict[str, str], parallelism: int = 2, **pod: Any) -> dict[str, Any]:
    """A batch Job submitted to LocalQueue ml/team-q, suspended by Kueue's webhook."""
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "train", "namespace": "ml",
                         "labels": {"kueue.x-k8s.io/queue-name": "team-q"}},
            "spec": {"suspend": True, "parallelism": parallelism, "completions": parallelism,
                     "template": {"spec": {"restartPolicy": "Never", **pod, "containers": [{
                         "name": "t", "image": "pytorch",
                         "command": ["python", "train.py", "--data", "s3://ds/imagenet/"],
                         "resources": {"requests": requests}}]}}}}


GPU = {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "4"}
SPOT_TAINT = {"key": "spot", "value": "true", "effect": "NoSchedule"}
SPOT_TOLERATION = {"key": "spot", "operator": "Exists", "effect": "NoSchedule"}


def setup(*more: dict[str, Any]) -> list[dict[str, Any]]:
    """Two GPU flavors (a100 on tainted spot nodes whose flavor tolerates the taint, h100),
    one CPU flavor, a ClusterQueue with a resource group for each, LocalQueue ml/team-q."""
    return copy.deepcopy([
        flavor("a100", {"gpu": "a100"}, nodeTaints=[SPOT_TAINT], tolerations=[SPOT_TOLERATION]),
        flavor("h100", {"gpu": "h100"}), flavor("cpu", {"pool": "cpu"}),
        cluster_queue("gpu-cq", [
            (["cpu", "memory"], [("cpu", {"cpu": 64, "memory": "256Gi"})]),
            (["nvidia.com/gpu"], [("a100", {"nvidia.com/gpu": 8}),
                                  ("h100", {"nvidia.com/gpu": 16})])]),
        local_queue("team-q", "ml", "gpu-cq"), *more])


def node(name: str, labels: dict[str, str], taints: list[dict[str, str]] | None = None,
         ) -> placement.NodeInfo:
    return placement.NodeInfo.from_node({
        "metadata": {"name": name, "labels": labels,
                     "annotations": {placement.CACHE_FREE_ANNOTATION: str(100 << 30)}},
        "spec": {"taints": taints or []},
        "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8",
                                   "pods": "110"}}})


NODES = [node("spot-a100", {"gpu": "a100", "pool": "cpu"}, [SPOT_TAINT]),
         node("h100-1", {"gpu": "h100", "pool": "cpu"}),
         node("cpu-only", {"pool": "cpu"}),
         node("other-pool", {"gpu": "h100", "pool": "batch"})]


def eligible(obj: dict[str, Any], objects: list[dict[str, Any]]) -> list[str]:
    work = workloads.read(copy.deepcopy(obj), Library(objects))
    req = work.groups[0].requirements
    return [n.name for n in NODES if placement.eligible(req, n)]


def test_a_queued_gpu_job_is_placed_on_the_nodes_of_either_gpu_flavor() -> None:
    # Before: every node with room was eligible, the CPU-only node too, and the tainted spot
    # node never (the pods tolerate nothing; Kueue adds the flavor's toleration on admission).
    assert eligible(job(GPU), []) == ["h100-1", "cpu-only", "other-pool"]
    assert eligible(job(GPU), setup()) == ["spot-a100", "h100-1"]
    work = workloads.read(job(GPU), Library(setup()))
    assert work.state is State.QUEUED
    assert work.notes == ["while queued: ClusterQueue gpu-cq (LocalQueue ml/team-q): pod set "
                          "main gets flavor cpu and a100 or h100: warmed on its nodes"]


def test_one_flavor_gives_the_node_selector_kueue_adds_on_admission() -> None:
    objects = setup(cluster_queue("cpu-cq", [(["cpu", "memory"],
                                              [("cpu", {"cpu": 64, "memory": "256Gi"})])]),
                    local_queue("team-q", "ml", "cpu-cq"))  # (replaces the one of setup)
    work = workloads.read(job({"cpu": "2", "memory": "8Gi"}), Library(objects))
    assert work.groups[0].spec["nodeSelector"] == {"pool": "cpu"}
    assert "affinity" not in work.groups[0].spec


def test_flavors_kueue_would_not_give_are_left_out_and_said() -> None:
    # the pods' own nodeSelector rules h100 out; a100's taint is tolerated by the flavor
    work = workloads.read(job(GPU, nodeSelector={"gpu": "a100"}), Library(setup()))
    assert work.groups[0].requirements.node_selector == {"gpu": "a100", "pool": "cpu"}
    assert "(h100: its node label gpu=h100 is not the pods' nodeSelector gpu=a100)" \
        in work.notes[0]
    # a taint neither the pods nor the flavor tolerate rules it out
    objects = setup()
    del objects[0]["spec"]["tolerations"]
    assert eligible(job(GPU), objects) == ["h100-1"]
    assert "a100: the pods do not tolerate its taint spot" in \
        workloads.read(job(GPU), Library(objects)).notes[0]
    # quota: 3 pods x 4 GPUs = 12 > a100's 8, with no cohort to borrow from
    assert eligible(job(GPU, parallelism=3), setup()) == ["h100-1"]
    # required node affinity on a flavor label: only the flavor it allows
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "gpu", "operator": "NotIn", "values": ["a100"]}]}]}}}
    assert eligible(job(GPU, affinity=affinity), setup()) == ["h100-1"]


def test_several_flavors_combine_with_the_pods_own_affinity_terms() -> None:
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["cpu"]}]},
            {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["batch"]}]}]}}}
    work = workloads.read(job(GPU, affinity=affinity), Library(setup()))
    terms = work.groups[0].spec["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert len(terms) == 4  # each of the pods' two terms with each GPU flavor's labels
    assert [n.name for n in NODES if placement.eligible(work.groups[0].requirements, n)] == [
        "spot-a100", "h100-1"]  # (the cpu flavor's pool=cpu is in the node selector)


def test_nothing_is_added_without_the_queue_objects_or_for_admitted_work() -> None:
    bare = job(GPU)
    assert workloads.read(bare, Library(setup()[:3])).notes == []  # no ClusterQueue known
    other_ns = copy.deepcopy(bare)
    other_ns["metadata"]["namespace"] = "dev"  # LocalQueue team-q is in ml
    assert "nodeSelector" not in workloads.read(other_ns, Library(setup())).groups[0].spec
    running = copy.deepcopy(bare)
    running["spec"]["suspend"] = False  # admitted: the pods have Kueue's own choice
    assert "nodeSelector" not in workloads.read(running, Library(setup())).groups[0].spec
    # a GPU flavor without node labels: its pods may run on any node of the cpu flavor
    objects = setup()
    del objects[1]["spec"]["nodeLabels"]
    assert eligible(job(GPU), objects) == ["spot-a100", "h100-1", "cpu-only"]
    del objects[2]["spec"]["nodeLabels"]  # and the cpu one neither: anywhere
    assert "affinity" not in workloads.read(job(GPU), Library(objects)).groups[0].spec


def test_a_pod_set_no_flavor_can_take_is_said() -> None:
    unknown = setup()[1:]  # a100 not known: which flavor it gets is not known
    assert "ResourceFlavor a100 not found" in workloads.read(job(GPU), Library(unknown)).notes[0]
    # Kueue never admits these: nothing is warmed for them (jobs round 55: they were, on
    # any node, the plan's own note saying they wait)
    tpu = workloads.read(job({"cpu": "1", "google.com/tpu": "4"}), Library(setup()))
    where = "while queued: ClusterQueue gpu-cq (LocalQueue ml/team-q): "
    assert tpu.notes == [
        f"{where}pod set main requests google.com/tpu, which no resource group covers",
        f"{where}Kueue cannot admit it as it is (pod set main): nothing is warmed while it "
        "waits"]
    assert [g.pods for g in tpu.groups] == [0] and tpu.targets() == []
    huge = workloads.read(job({"cpu": "40"}), Library(setup()))  # 2 x 40 CPUs > 64
    assert huge.notes[0] == (f"{where}no flavor can take pod set main (cpu: cpu quota 64 is "
                             "less than the pod set's 80)")
    assert huge.targets() == []


def workload_of(j: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    """The Workload Kueue's job reconciler makes for Job *j* (uid j-1), with *status*."""
    j["metadata"]["uid"] = "j-1"
    return {"apiVersion": KUEUE, "kind": "Workload",
            "metadata": {"name": "job-train-3b2a1", "namespace": "ml",
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                              "name": "train", "uid": "j-1",
                                              "controller": True,
                                              "blockOwnerDeletion": True}]},
            "spec": {"active": True, "queueName": "team-q", "podSets": [
                {"name": "main", "count": 2, "template": j["spec"]["template"]}]},
            "status": status}


def test_a_queued_workload_gets_the_same_as_its_job() -> None:
    j = job(GPU)
    wl = workload_of(j, {"conditions": [{"type": "QuotaReserved", "status": "False",
                                         "reason": "Pending", "message": "insufficient quota"}]})
    assert eligible(wl, setup()) == eligible(j, setup()) == ["spot-a100", "h100-1"]


def test_prefetchd_plan_reads_the_queue_objects_given_with_the_job(tmp_path) -> None:
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump_all([*setup(), job(GPU)]))
    r = subprocess.run([sys.executable, "-m", "prefetchd.cli", "plan", str(path)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "while queued: ClusterQueue gpu-cq (LocalQueue ml/team-q): pod set main gets " \
        "flavor cpu and a100 or h100: warmed on its nodes" in r.stdout
    assert "ResourceFlavor" not in r.stderr and "ignored" not in r.stdout, (r.stdout, r.stderr)


def test_a_cohort_lends_its_other_queues_quota_up_to_the_borrowing_limit() -> None:
    """Jobs round 55: borrowing with no borrowingLimit was taken as unbounded; Kueue lends at
    most what the cohort's other ClusterQueues hold of that flavor (their lendingLimit)."""
    three = job(GPU, parallelism=3)  # 12 GPUs: more than a100's own 8
    objects = setup()
    objects[3]["spec"]["cohortName"] = "research"
    assert eligible(three, objects) == ["h100-1"]  # alone in its cohort: nothing to borrow
    other = cluster_queue("team-b", [
        (["cpu", "memory"], [("cpu", {"cpu": 8, "memory": "32Gi"})]),
        (["nvidia.com/gpu"], [("a100", {"nvidia.com/gpu": 8})])], cohortName="research")
    assert eligible(three, [*objects, other]) == ["spot-a100", "h100-1"]  # 8 + 8 >= 12
    lends_two = copy.deepcopy(other)
    lends_two["spec"]["resourceGroups"][1]["flavors"][0]["resources"][0]["lendingLimit"] = 2
    assert eligible(three, [*objects, lends_two]) == ["h100-1"]  # 8 + 2 < 12
    capped = copy.deepcopy(objects)
    capped[3]["spec"]["resourceGroups"][1]["flavors"][0]["resources"][0]["borrowingLimit"] = 3
    assert eligible(three, [*capped, other]) == ["h100-1"]  # 8 + min(8, 3) < 12
    elsewhere = copy.deepcopy(other)
    elsewhere["spec"]["cohortName"] = "prod"
    assert eligible(three, [*objects, elsewhere]) == ["h100-1"]
    # a Cohort object may hold quota of its own (not read): the flavor is not ruled out
    cohort = {"apiVersion": KUEUE, "kind": "Cohort", "metadata": {"name": "research"},
              "spec": {}}
    assert eligible(three, [*objects, cohort]) == ["spot-a100", "h100-1"]


def test_pod_sets_are_given_flavors_in_order_and_their_usage_adds_up() -> None:
    """Jobs round 55: a master of 8 GPUs and workers of 32 against an a100 flavor of 32 and an
    h100 one of 16: Kueue gives the master a100 (the first that fits), then the workers fit in
    neither (24 a100 left, 16 h100): it can never be admitted. Checked per pod set, it was
    planned on both."""
    objects = setup()
    objects[3]["spec"]["resourceGroups"][1]["flavors"][0]["resources"][0]["nominalQuota"] = 32
    objects[3]["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = 640
    gpu_pod = {"restartPolicy": "OnFailure", "containers": [{
        "name": "pytorch", "image": "pytorch", "args": ["--data", "s3://ds/imagenet/"],
        "resources": {"requests": {"cpu": "8", "nvidia.com/gpu": "8"}}}]}
    pj = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
          "metadata": {"name": "big", "namespace": "ml",
                       "labels": {"kueue.x-k8s.io/queue-name": "team-q"}},
          "spec": {"runPolicy": {"suspend": True}, "pytorchReplicaSpecs": {
              "Master": {"replicas": 1, "template": {"spec": gpu_pod}},
              "Worker": {"replicas": 4, "template": {"spec": gpu_pod}}}}}
    work = workloads.read(pj, Library(objects))
    assert [g.pods for g in work.groups] == [0, 0] and work.targets() == []
    assert any("no flavor can take pod set Worker (a100: nvidia.com/gpu quota 32 is less than "
               "the pod set's 32 with the 8 of the pod sets before it; h100: nvidia.com/gpu "
               "quota 16 is less than the pod set's 32)" in n for n in work.notes), work.notes
    pj["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 3  # 8 + 24 = 32: it fits
    work = workloads.read(pj, Library(objects))
    assert [g.pods for g in work.groups] == [1, 3] and work.targets()


def test_a_queue_named_but_missing_is_said() -> None:
    """Jobs round 55: a queue-name label naming no LocalQueue, a LocalQueue naming a missing
    ClusterQueue: Kueue keeps such a job waiting; the plan said nothing."""
    typo = job(GPU)
    typo["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "team-qq"
    assert workloads.read(typo, Library(setup())).notes == [
        "while queued: LocalQueue ml/team-qq not found: Kueue keeps the job waiting until it "
        "exists; which flavors its pods get is not known"]
    no_cq = [o for o in setup() if o["kind"] != "ClusterQueue"] + [
        cluster_queue("other", [(["cpu"], [("cpu", {"cpu": 1})])])]
    assert workloads.read(job(GPU), Library(no_cq)).notes == [
        "while queued: LocalQueue ml/team-q feeds ClusterQueue gpu-cq, which is not found: "
        "Kueue keeps the job waiting until it exists"]
    # no queue objects known at all (a plan of the job alone): nothing said
    assert workloads.read(job(GPU), Library()).notes == []


def test_malformed_queue_objects_are_refused_by_prefetchd_plan(tmp_path) -> None:
    """Jobs round 55: wrong-shaped queue objects were read as if fine (exit 0), or blamed
    the job with a Python exception."""
    def refused(objects: list[dict[str, Any]]) -> str:
        path = tmp_path / "q.yaml"
        path.write_text(yaml.safe_dump_all([*objects, job(GPU)]))
        r = subprocess.run([sys.executable, "-m", "prefetchd.cli", "plan", str(path)],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r
        return r.stderr.strip()

    def with_cq(edit: Any) -> list[dict[str, Any]]:
        objects = setup()
        edit(objects[3]["spec"])
        return objects

    assert "ClusterQueue gpu-cq: spec.resourceGroups[1].flavors[0].resources: names " \
        "['nvidia.com/gpu', 'cpu']" in refused(with_cq(lambda s: s["resourceGroups"][1][
            "flavors"][0]["resources"].append({"name": "cpu", "nominalQuota": 1})))
    assert "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: 'lots' is not a " \
        "quantity" in refused(with_cq(lambda s: s["resourceGroups"][0]["flavors"][0][
            "resources"][0].update(nominalQuota="lots")))
    assert "spec.resourceGroups[1].flavors[0].resources[0].borrowingLimit: set without a " \
        "cohort" in refused(with_cq(lambda s: s["resourceGroups"][1]["flavors"][0][
            "resources"][0].update(borrowingLimit=4)))
    assert "spec.resourceGroups: not a list" in refused(with_cq(
        lambda s: s.update(resourceGroups={"cpu": 1})))
    bad_taint = setup()
    bad_taint[0]["spec"]["nodeTaints"][0]["effect"] = "NoSchedul"
    assert "ResourceFlavor a100: spec.nodeTaints[0].effect: 'NoSchedul' is not one of " \
        "NoSchedule, PreferNoSchedule, NoExecute" in refused(bad_taint)
    bad_labels = setup()
    bad_labels[1]["spec"]["nodeLabels"] = ["gpu=h100"]
    assert "ResourceFlavor h100: spec.nodeLabels: not a mapping" in refused(bad_labels)
    no_cq = setup()
    del no_cq[4]["spec"]["clusterQueue"]
    assert "LocalQueue ml/team-q: spec.clusterQueue: not set" in refused(no_cq)


def test_admitted_its_workload_s_flavors_replace_the_queued_notes() -> None:
    """Jobs round 55: a suspended job whose Workload is admitted kept the notes of its queued
    reading (a quota it had been found too small for)."""
    j = job(GPU)
    wl = workload_of(j, {
        "admission": {"clusterQueue": "gpu-cq", "podSetAssignments": [{
            "name": "main", "count": 2,
            "flavors": {"cpu": "cpu", "memory": "cpu", "nvidia.com/gpu": "h100"}}]},
        "conditions": [{"type": "QuotaReserved", "status": "True", "reason": "x"},
                       {"type": "Admitted", "status": "True", "reason": "x"}]})
    lib = Library(setup())
    queued = workloads.read(j, lib)
    assert queued.notes and all(n.startswith("while queued: ") for n in queued.notes)
    merged = workloads.with_queue_record(queued, workloads.read(wl, lib))
    assert merged.notes == []
    assert merged.groups[0].spec["nodeSelector"] == {"gpu": "h100", "pool": "cpu"}
    assert "affinity" not in merged.groups[0].spec
    unknown = workloads.with_queue_record(workloads.read(j), workloads.read(wl))
    assert any("ResourceFlavor h100 unknown" in n for n in unknown.notes), unknown.notes
