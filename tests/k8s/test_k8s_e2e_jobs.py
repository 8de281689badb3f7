"""Training work beyond pipelines, end to end: ``prefetchd run --kubernetes`` agents (one per
node, each on its own node cache) and ``prefetchd webhook`` as real processes against the fake
API server, real SeaweedFS. This module plays the controllers (Kueue, training-operator, Katib,
the scheduler) with the objects they make (tests/k8s/training_objects.py):

* a PyTorchJob (1 master + 3 workers) queued in Kueue is warmed while its Workload is pending
  on 4 nodes (4 agents); admitted, its pods are steered to 4 distinct warm nodes; the lead
  time and the warm-at-admission ratio are in the metrics; its pins go when it succeeds;
* two Jobs queued at once are warmed in Kueue priority order, not creation order;
* a Job queued in a ClusterQueue whose one flavor is a labelled node pool is warmed on that
  pool's nodes only, before admission (the queue objects watched like Kueue's own);
* a Katib Experiment's dataset stays pinned while Trials come and go, their pods prefer the
  warm nodes (a Trial's pod bound elsewhere has it warmed where it landed, at once, under
  the Experiment), and it is released when the Experiment completes.
* a CronJob's dataset is warm before its first run, stays pinned between runs (its Jobs are
  its own), each run's pods prefer the warm nodes, and it is released when it is suspended.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import training_objects as to
from k8s_helpers import node
from pvc_scenario import _PROBE, preferred_hosts, start, stop, wait_until

from prefetchd.k8s import placement as pl

pytestmark = [pytest.mark.k8s, pytest.mark.s3]

NS = "ml"
CRDS = ("kubeflow-trainer/crds/kubeflow.org_pytorchjobs.yaml",
        "kueue/crds/kueue.x-k8s.io_workloads.yaml",
        "kueue/crds/kueue.x-k8s.io_workloadpriorityclasses.yaml",
        "kueue/crds/kueue.x-k8s.io_resourceflavors.yaml",
        "kueue/crds/kueue.x-k8s.io_clusterqueues.yaml",
        "kueue/crds/kueue.x-k8s.io_localqueues.yaml",
        "katib/crds/kubeflow.org_experiments.yaml",
        "katib/crds/kubeflow.org_trials.yaml",
        "kubeflow-trainer/crds/trainer.kubeflow.org_trainjobs.yaml",
        "kubeflow-trainer/crds/trainer.kubeflow.org_clustertrainingruntimes.yaml")


class Site:
    """Nodes, agents and the webhook on the fake API server, and views of the node caches."""

    def __init__(self, fake: Any, local_s3: Any, bucket: str, tmp_path: Path,
                 nodes: list[str]) -> None:
        from test_k8s_e2e_agent import write_kubeconfig

        self.fake, self.s3, self.bucket, self.tmp = fake, local_s3, bucket, tmp_path
        self.nodes = nodes
        self.kubeconfig = str(write_kubeconfig(tmp_path / "kubeconfig", fake.url))
        self.caches = {n: tmp_path / f"cache-{n}" for n in nodes}
        self.procs: dict[str, subprocess.Popen] = {}
        self.ports: dict[str, int] = {}
        self.webhook: tuple[int, str] | None = None
        for n in nodes:
            fake.create(node(n, {"kubernetes.io/hostname": n, "kubernetes.io/os": "linux"},
                             status={"allocatable": {"cpu": "16", "memory": "64Gi",
                                                     "pods": "110"},
                                     "conditions": [{"type": "Ready", "status": "True"}]}))

    def put(self, files: dict[str, bytes]) -> None:
        client = self.s3.client()
        for key, data in files.items():
            client.put_object(Bucket=self.bucket, Key=key, Body=data)

    def start(self, webhook: bool = True) -> None:
        from test_k8s_e2e_agent import free_port
        from test_k8s_webhook import make_cert

        env = {**os.environ, **self.s3.env()}
        for var in ("NODE_NAME", "KUBERNETES_SERVICE_HOST", "AWS_CA_BUNDLE"):
            env.pop(var, None)
        for n in self.nodes:
            self.ports[n] = free_port()
            self.procs[n] = start([
                sys.executable, "-m", "prefetchd.cli", "--log-level", "INFO", "run",
                "--kubernetes", "--kubeconfig", self.kubeconfig, "--node-name", n,
                "--cache-dir", str(self.caches[n]), "--endpoint-url", self.s3.endpoint_url,
                "--publish-interval", "1", "--metrics-port", str(self.ports[n])],
                env, self.tmp / f"agent-{n}.log")
        if webhook:
            cert, key = make_cert(self.tmp)
            port = free_port()
            self.procs["webhook"] = start([
                sys.executable, "-m", "prefetchd.cli", "--log-level", "INFO", "webhook",
                "--kubeconfig", self.kubeconfig, "--port", str(port),
                "--tls-cert-file", cert, "--tls-key-file", key], env, self.tmp / "webhook.log")
            self.webhook = (port, cert)

        def annotated() -> bool:
            assert all(p.poll() is None for p in self.procs.values()), self.logs()
            return all(pl.CACHE_FREE_ANNOTATION in (self.fake.get("v1", "Node", n)["metadata"]
                                                    .get("annotations") or {})
                       for n in self.nodes)

        wait_until("every agent published its node", annotated, 90)

    def stop(self) -> None:
        for p in self.procs.values():
            stop(p)

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}"
                         for p in sorted(self.tmp.glob("*.log")))

    def snapshot(self) -> dict[str, dict[str, tuple[bool, bool]]] | None:
        """node -> key -> (every block cached, pinned), read by a short-lived process."""
        try:
            r = subprocess.run([sys.executable, "-c", _PROBE, self.bucket,
                                *map(str, self.caches.values())],
                               capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            return None
        assert r.returncode == 0, r.stderr[-2000:]
        got = json.loads(r.stdout)
        return {n: {k: (v[0], v[1]) for k, v in got[str(c)].items()}
                for n, c in self.caches.items()}

    def holders(self, keys: list[str], pinned: bool = True) -> set[str] | None:
        snap = self.snapshot()
        if snap is None:
            return None
        return {n for n, objs in snap.items()
                if all(objs.get(k, (False, False)) == (True, True) if pinned
                       else objs.get(k, (False,))[0] for k in keys)}

    def pinned_anywhere(self, keys: list[str]) -> bool | None:
        snap = self.snapshot()
        if snap is None:
            return None
        return any(objs.get(k, (False, False))[1] for objs in snap.values() for k in keys)

    def records(self, n: str) -> dict[str, Any]:
        path = self.caches[n] / "prefetchd" / "k8s-pins.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def create_pod(self, pod: dict[str, Any]) -> dict[str, Any]:
        """As the API server does: the pod goes through the webhook, then is stored."""
        from test_k8s_webhook import mutate

        assert self.webhook is not None

        class Srv:
            port = self.webhook[0]

        return self.fake.create(mutate(Srv(), self.webhook[1], pod)[1])  # type: ignore[arg-type]

    def schedule(self, pod: dict[str, Any]) -> str:
        """As the scheduler does with a weight-80 preference and room everywhere."""
        target = sorted(preferred_hosts(pod) or self.nodes)[0]
        self.fake.patch("v1", "Pod", pod["metadata"]["name"], {"spec": {"nodeName": target}},
                        pod["metadata"]["namespace"])
        return target

    def metrics(self, n: str) -> dict[str, float]:
        from test_k8s_e2e_agent import scrape

        return scrape(self.ports[n])


def install_crds(fake: Any) -> None:
    for path in CRDS:
        fake.create(to.crd(path))


def dataset(site: Site, prefix: str, n: int = 3) -> tuple[str, list[str]]:
    files = {f"{prefix}/part-{i}.bin": os.urandom(50_000 + 1000 * i) for i in range(n)}
    site.put(files)
    return f"s3://{site.bucket}/{prefix}/", sorted(files)


@pytest.fixture()
def site_factory(fake, local_s3, bucket, tmp_path):
    sites: list[Site] = []

    def make(nodes: list[str]) -> Site:
        site = Site(fake, local_s3, bucket, tmp_path, nodes)
        sites.append(site)
        return site

    yield make
    for s in sites:
        s.stop()
    for s in sites:  # no process warned or failed (the credentials never logged)
        for log in s.tmp.glob("*.log"):
            text = log.read_text()
            assert " WARNING " not in text and " ERROR " not in text, (log.name, text[-3000:])
            assert s.s3.env()["AWS_SECRET_ACCESS_KEY"] not in text


def test_queued_pytorchjob_is_warm_on_four_nodes_before_admission(fake, site_factory):
    site = site_factory(["n1", "n2", "n3", "n4"])
    install_crds(fake)
    fake.create(to.priority_class("high", 1000))
    uri, keys = dataset(site, "imagenet")
    site.start()
    try:
        # The user submits; Kueue's webhook suspends it; Kueue makes the pending Workload.
        job = fake.create(to.pytorchjob("train", NS, uri, workers=3, queue="user-queue",
                                        priority="high"))
        fake.patch("kubeflow.org/v1", "PyTorchJob", "train", {"status": to.v1_job_status(
            to.cond("Created", reason="PyTorchJobCreated"),
            to.cond("Suspended", reason="PyTorchJobSuspended"))}, NS)
        tpl = job["spec"]["pytorchReplicaSpecs"]
        wl = fake.create(to.workload_for(job, [("master", 1, tpl["Master"]["template"]),
                                               ("worker", 3, tpl["Worker"]["template"])],
                                         "user-queue", ("high", 1000)))
        # Queued: the dataset is warmed and pinned on as many nodes as the job has pods.
        wait_until("the queued job's data warm on all 4 nodes",
                   lambda: site.holders(keys) == set(site.nodes), 180)
        # and each warm done (recorded), not only its last object stored: admitted in
        # between, a node's warm finished 0.16 s after the admission (CI of stop 56)
        wait_until("the warms recorded on all 4 nodes", lambda: all(
            any(r.get("source") == "pytorchjob ml/train" for r in site.records(n).values())
            for n in site.nodes), 60)
        assert fake.get("kueue.x-k8s.io/v1beta2", "Workload", wl["metadata"]["name"], NS)[
            "status"]["conditions"][0]["status"] == "False"  # still pending
        # `prefetchd status` names who pins it, once (a blind test of the agent: a job's
        # owner was printed raw beside its name)
        from prefetchd import warm as warm_mod

        (row,) = [r for r in warm_mod.status(str(site.caches["n1"])) if r["uri"] == uri]
        assert row["pinned_by"] == ["pytorchjob ml/train"], row
        # Kueue admits; the training-operator unsuspends and makes the pods (Pending).
        status = to.admitted(wl)
        fake.patch("kueue.x-k8s.io/v1beta2", "Workload", wl["metadata"]["name"],
                   {"status": status}, NS)
        fake.patch("kubeflow.org/v1", "PyTorchJob", "train", {
            "spec": {"runPolicy": {"suspend": False}},
            "status": to.v1_job_status(to.cond("Created", reason="PyTorchJobCreated"),
                                       to.cond("Suspended", "False", "PyTorchJobResumed"))}, NS)
        placed: dict[str, str] = {}
        for rtype, i in (("Master", 0), ("Worker", 0), ("Worker", 1), ("Worker", 2)):
            pod = site.create_pod(to.pytorch_pod(job, rtype, i))
            placed[pod["metadata"]["name"]] = site.schedule(pod)
        assert len(set(placed.values())) == 4, placed  # four distinct warm nodes
        assert site.holders(keys) == set(site.nodes)
        # Metrics: warm before admission, and all of it.
        for n in site.nodes:
            m = wait_until("the job's metrics", lambda n=n: site.metrics(n).get(
                'prefetchd_job_warm_lead_seconds{job="pytorchjob ml/train"}') is not None, 30)
            assert m
            got = site.metrics(n)
            assert got['prefetchd_job_warm_lead_seconds{job="pytorchjob ml/train"}'] >= 0
            assert got['prefetchd_job_warm_at_admission_ratio{job="pytorchjob ml/train"}'] == 1
        # The job succeeds: the Workload finishes and every pin goes.
        fake.patch("kubeflow.org/v1", "PyTorchJob", "train", {"status": to.v1_job_status(
            to.cond("Created", reason="PyTorchJobCreated"),
            to.cond("Running", "False", "PyTorchJobSucceeded"),
            to.cond("Succeeded", reason="PyTorchJobSucceeded"))}, NS)
        fake.patch("kueue.x-k8s.io/v1beta2", "Workload", wl["metadata"]["name"],
                   {"status": to.finished(status)}, NS)
        wait_until("the pins released on every node",
                   lambda: site.pinned_anywhere(keys) is False, 60)
        # (a release unpins, then drops its record: CI saw the check fall between the two)
        assert wait_until("no pin records left", lambda: all(
            not site.records(n) for n in site.nodes), 10)
    except BaseException:
        print(site.logs())
        raise


def test_queued_trainjob_is_warm_on_its_nodes_before_admission(fake, site_factory):
    site = site_factory(["n1", "n2", "n3", "n4"])
    install_crds(fake)
    rt = fake.create(to.runtime("torch_distributed.yaml"))
    uri, keys = dataset(site, "llm")
    site.start()
    try:
        job = fake.create(to.trainjob("tune", NS, uri, nodes=4, queue="training-queue"))
        wl = fake.create(to.workload_for(job, [("node", 4, to.trainjob_pod_template(job, rt))],
                                         "training-queue", None))
        wait_until("the queued TrainJob's data warm on all 4 nodes",
                   lambda: site.holders(keys) == set(site.nodes), 180)
        status = to.admitted(wl)
        fake.patch("kueue.x-k8s.io/v1beta2", "Workload", wl["metadata"]["name"],
                   {"status": status}, NS)
        fake.patch("trainer.kubeflow.org/v1alpha1", "TrainJob", "tune",
                   {"spec": {"suspend": False}}, NS)
        placed = [site.schedule(site.create_pod(to.trainjob_pod(job, rt, i))) for i in range(4)]
        assert sorted(placed) == site.nodes, placed  # four distinct warm nodes
        fake.patch("kueue.x-k8s.io/v1beta2", "Workload", wl["metadata"]["name"],
                   {"status": to.finished(status)}, NS)
        wait_until("the pins released on every node",
                   lambda: site.pinned_anywhere(keys) is False, 60)
    except BaseException:
        print(site.logs())
        raise


def test_two_queued_jobs_are_warmed_in_priority_order(fake, site_factory):
    site = site_factory(["n1"])
    install_crds(fake)
    fake.create(to.priority_class("low", 10))
    fake.create(to.priority_class("high", 1000))
    low_uri, low_keys = dataset(site, "low")
    high_uri, high_keys = dataset(site, "high")
    # Both queued before the agent starts: the low one submitted first.
    for name, uri, prio in (("low", low_uri, ("low", 10)), ("high", high_uri, ("high", 1000))):
        job = fake.create(to.batch_job(name, NS, uri, "user-queue", prio[0]))
        fake.create(to.workload_for(job, [("main", 1, job["spec"]["template"])], "user-queue",
                                    prio))
    site.start(webhook=False)
    try:
        wait_until("both warm", lambda: site.holders(low_keys + high_keys) == {"n1"}, 120)
        recs = site.records("n1").values()
        warmed = {r["source"]: r["warmed_at"] for r in recs}
        assert set(warmed) == {"job ml/low", "job ml/high"}
        assert warmed["job ml/high"] < warmed["job ml/low"], warmed
        log = (site.tmp / "agent-n1.log").read_text()
        assert log.index("job ml/high: warming") < log.index("job ml/low: warming")
    except BaseException:
        print(site.logs())
        raise


def test_a_queued_job_is_warmed_on_the_nodes_of_its_queues_flavor(fake, site_factory):
    """Kueue sets a flavor's node labels on the pods only at admission; until then the
    ClusterQueue behind the job's LocalQueue says which nodes they can be. The pool is the two
    nodes ranked last for the dataset: before, it was warmed on the first two (as it is here
    until the LocalQueue is made)."""
    nodes = ["n1", "n2", "n3", "n4"]
    site = site_factory(nodes)
    install_crds(fake)
    fake.create(to.priority_class("normal", 100))
    uri, keys = dataset(site, "reserved-pool")
    ranked = [n.name for n in pl.rank(uri, [pl.NodeInfo(n) for n in nodes])]
    pool = sorted(ranked[2:])
    for n in pool:
        fake.patch("v1", "Node", n, {"metadata": {"labels": {"cloud.example.com/pool":
                                                             "reserved"}}})
    fake.create({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                 "metadata": {"name": "reserved"},
                 "spec": {"nodeLabels": {"cloud.example.com/pool": "reserved"}}})
    fake.create({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
                 "metadata": {"name": "team-cq"},
                 "spec": {"namespaceSelector": {}, "resourceGroups": [{
                     "coveredResources": ["cpu"],
                     "flavors": [{"name": "reserved",
                                  "resources": [{"name": "cpu", "nominalQuota": 8}]}]}]}})
    site.start(webhook=False)
    try:
        job = fake.create(to.batch_job("train", NS, uri, "team-q", "normal", parallelism=2))
        fake.create(to.workload_for(job, [("main", 2, job["spec"]["template"])], "team-q",
                                    ("normal", 100)))
        time.sleep(3)
        # the LocalQueue comes after the job (made in any order): the agents read it again
        fake.create({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                     "metadata": {"name": "team-q", "namespace": NS},
                     "spec": {"clusterQueue": "team-cq"}})
        # pinned there only: the nodes it was warmed on before the queue was known (the first
        # two ranked) released it (it stays in their caches, unpinned, until evicted)
        wait_until("the queued job's data warm and pinned on the pool's two nodes only",
                   lambda: site.holders(keys) == set(pool), 180)
        for n in nodes:
            log = (site.tmp / f"agent-{n}.log").read_text()
            assert log.count("job ml/train: warming") == 1, (n, log[-2000:])
            assert ("its pods can no longer run on this node" in log) == (n not in pool), n
        # Kueue's status updates of the queue objects change nothing of this
        fake.patch("kueue.x-k8s.io/v1beta2", "ClusterQueue", "team-cq", {"status": {
            "pendingWorkloads": 1, "conditions": [to.cond("Active", reason="Ready")]}})
        time.sleep(2)
        assert site.holders(keys) == set(pool)
        # the quota cut below the job's 2 CPUs: Kueue cannot admit it, nothing stays pinned;
        # raised again, it is warmed again
        def quota(cpus: int) -> None:
            cq = fake.get("kueue.x-k8s.io/v1beta2", "ClusterQueue", "team-cq")
            cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = cpus
            fake.patch("kueue.x-k8s.io/v1beta2", "ClusterQueue", "team-cq",
                       {"spec": cq["spec"]})

        quota(1)
        wait_until("the pins released while it cannot be admitted",
                   lambda: site.pinned_anywhere(keys) is False, 60)
        quota(8)
        wait_until("warm again on the pool", lambda: site.holders(keys) == set(pool), 60)
    except BaseException:
        print(site.logs())
        raise


def test_queued_jobs_without_a_kueue_class_are_warmed_in_their_pods_priority_order(
        fake, site_factory):
    """Kueue gives a job with no ``kueue.x-k8s.io/priority-class`` label its pods'
    PriorityClass value; the agent GETs that class (it does not watch them)."""
    site = site_factory(["n1"])
    install_crds(fake)
    fake.create(to.pod_priority_class("batch-low", 10))
    fake.create(to.pod_priority_class("batch-high", 1000))
    # the low one submitted first, and first by name: only the priority puts it second
    low_uri, low_keys = dataset(site, "alow")
    high_uri, high_keys = dataset(site, "zhigh")
    for name, uri in (("alow", low_uri), ("zhigh", high_uri)):
        job = to.batch_job(name, NS, uri, "user-queue", "unused")
        del job["metadata"]["labels"][to.PRIORITY_LABEL]
        job["spec"]["template"]["spec"]["priorityClassName"] = f"batch-{name[1:]}"
        fake.create(job)
    site.start(webhook=False)
    try:
        wait_until("both warm", lambda: site.holders(low_keys + high_keys) == {"n1"}, 120)
        log = (site.tmp / "agent-n1.log").read_text()
        assert log.index("job ml/zhigh: warming") < log.index("job ml/alow: warming"), log
    except BaseException:
        print(site.logs())
        raise


def test_experiment_data_outlives_trials_and_goes_with_the_experiment(fake, site_factory):
    site = site_factory(["n1", "n2", "n3"])
    install_crds(fake)
    uri, keys = dataset(site, "hpo")
    site.start()
    try:
        exp = fake.create(to.experiment("tune", NS, uri, parallel=2))
        # parallelTrialCount 2: warm on 2 nodes before any Trial exists.
        warm = wait_until("the experiment's data warm on 2 nodes",
                          lambda: (h := site.holders(keys)) is not None and len(h) == 2 and h,
                          120)
        for round_ in range(2):  # trials come and go
            trials = [fake.create(to.trial(exp, lr)) for lr in (f"0.0{round_}1", "0.02")]
            for tr in trials:
                fake.create(to.trial_job(tr))
                pod = site.create_pod(to.trial_pod(tr))
                host = site.schedule(pod)
                assert host in warm, (host, warm)  # each trial reads from a warm node
            for tr in trials:
                fake.patch("kubeflow.org/v1beta1", "Trial", tr["metadata"]["name"], {
                    "status": {"conditions": [to.cond("Created", reason="TrialCreated"),
                                              to.cond("Succeeded", reason="TrialSucceeded")]}},
                    NS)
                fake.delete("batch/v1", "Job", tr["metadata"]["name"], NS)
            # A Trial's end releases nothing: the Experiment goes on. Once every agent
            # holding the data has handled the Trials' end, the data is still pinned there.
            for tr in trials:
                line = f"trial ml/{tr['metadata']['name']} succeeded; its data stays pinned"
                wait_until("the agents handled the trials' end", lambda line=line: all(
                    line in (site.tmp / f"agent-{n}.log").read_text() for n in warm), 30)
            assert site.holders(keys) == warm
        # One more Trial, its pod bound to the third node (the warm ones were full): that
        # node's agent warms the data there at once, pinned under the Experiment.
        cold = next(n for n in site.nodes if n not in warm)
        tr = fake.create(to.trial(exp, "0.03"))
        fake.create(to.trial_job(tr))
        pod = site.create_pod(to.trial_pod(tr))
        fake.patch("v1", "Pod", pod["metadata"]["name"], {"spec": {"nodeName": cold}}, NS)
        wait_until("the data warm where the trial's pod landed",
                   lambda: site.holders(keys) == {*warm, cold}, 60)
        assert [r["source"] for r in site.records(cold).values()] == ["experiment ml/tune"]
        fake.patch("kubeflow.org/v1beta1", "Experiment", "tune", {"status": {"conditions": [
            to.cond("Created", reason="ExperimentCreated"),
            to.cond("Running", "False", "ExperimentSucceeded"),
            to.cond("Succeeded", reason="ExperimentMaxTrialsReached")]}}, NS)
        wait_until("the experiment's pins released",
                   lambda: site.pinned_anywhere(keys) is False, 60)
        # (a release unpins, then drops its record: wait for both)
        assert wait_until("no pin records left", lambda: all(
            not site.records(n) for n in site.nodes), 10)  # nor any under a trial pod
    except BaseException:
        print(site.logs())
        raise


def test_cronjob_data_stays_warm_between_runs_and_goes_when_suspended(fake, site_factory):
    site = site_factory(["n1", "n2", "n3"])
    uri, keys = dataset(site, "nightly")
    site.start()
    try:
        # site.start() saw every node annotated on the API server; an agent's own Node watch
        # may not have yet, and an agent that places the CronJob with a node missing from
        # its view warms it too (3 holders for 2 places: CI under load). Published every
        # second; a few seconds leave the watch events time to reach every agent.
        time.sleep(3)
        cj = fake.create(to.cronjob("nightly", NS, uri, parallelism=2))
        warm = wait_until("the cronjob's data warm on 2 nodes before any run",
                          lambda: (h := site.holders(keys)) is not None and len(h) == 2 and h,
                          120)
        for minutes in (29412120, 29413560):  # two nights
            job = fake.create(to.cronjob_run(cj, minutes))
            ref = {"apiVersion": "batch/v1", "kind": "Job", "namespace": NS,
                   "name": job["metadata"]["name"], "uid": job["metadata"]["uid"]}
            fake.patch("batch/v1", "CronJob", "nightly", {"status": {
                "active": [ref], "lastScheduleTime": "2026-12-02T02:00:00Z"}}, NS)
            hosts, pods = set(), []
            for _ in range(2):
                pod = site.create_pod(to.job_pod(job))
                pods.append(pod["metadata"]["name"])
                hosts.add(site.schedule(pod))
            assert hosts <= warm, (hosts, warm)  # every pod of the run reads from a warm node
            fake.patch("batch/v1", "Job", job["metadata"]["name"], {"status": {
                "succeeded": 2, "conditions": [to.cond("SuccessCriteriaMet"),
                                               to.cond("Complete")]}}, NS)
            fake.patch("batch/v1", "CronJob", "nightly", {"status": {
                "active": None, "lastSuccessfulTime": "2026-12-02T02:10:00Z"}}, NS)
            for name in pods:
                fake.delete("v1", "Pod", name, NS)
            time.sleep(2)  # the agents saw the run end: nothing of the CronJob's goes
            assert site.holders(keys) == warm
        sources = {r["source"] for n in warm for r in site.records(n).values()}
        assert "cronjob ml/nightly" in sources  # the runs' Jobs are the CronJob's, not work
        assert not any(s.startswith("job ") for s in sources), sources  # of their own
        fake.patch("batch/v1", "CronJob", "nightly", {"spec": {"suspend": True}}, NS)
        wait_until("the suspended cronjob's pins released",
                   lambda: site.pinned_anywhere(keys) is False, 60)
        assert wait_until("no pin records left", lambda: all(
            not site.records(n) for n in site.nodes), 10)  # nor any under a run's pod
    except BaseException:
        print(site.logs())
        raise
