"""A Kueue-queued PyTorchJob (1 master + 3 workers), a running one with a pod the scheduler
binds off its data, a CronJob, a Kueue-queued KubeRay RayJob, and a Job queued in a
ClusterQueue whose flavor is a node pool, on a real control plane.

kube-apiserver, kube-scheduler and kube-controller-manager v1.36 with four fake Ready nodes
(../shared/k8s/harness/k8s_harness.sh; no kubelet, no Kueue or training-operator: this test
writes what those controllers write, through the real API server, which validates it against
the upstream CRDs of ../shared/k8s/crds). Compared with the fake API server: the CRDs are
real and Established by the API server, four ``prefetchd run --kubernetes`` agents and the
webhook run under the RBAC of manifests/prefetchd/base/rbac.yaml with service-account tokens,
the API server calls the webhook (registered by URL), and the real scheduler binds the pods.
The CronJob's runs are made by the real CronJob and Job controllers.

Runs when ``FUSECACHE_K8S_ASSETS`` names the folder of the control-plane binaries (see
tests/k8s/test_k8s_real_cluster.py); skips otherwise.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import real_control_plane
import training_objects as to
from fake_apiserver import RESOURCES
from pvc_scenario import _PROBE, start, stop, wait_until

from prefetchd.k8s import placement as pl

pytestmark = [pytest.mark.k8s, pytest.mark.s3, pytest.mark.real_cluster]

NS = "ml"
NODES = ("node-1", "node-2", "node-3", "node-4")
BUCKET = "real-jobs"
CRDS = ("kubeflow-trainer/crds/kubeflow.org_pytorchjobs.yaml",
        "kueue/crds/kueue.x-k8s.io_workloads.yaml",
        "kueue/crds/kueue.x-k8s.io_workloadpriorityclasses.yaml",
        "kueue/crds/kueue.x-k8s.io_resourceflavors.yaml",
        "kueue/crds/kueue.x-k8s.io_clusterqueues.yaml",
        "kueue/crds/kueue.x-k8s.io_localqueues.yaml")
# KubeRay's kinds, which ../shared lacks: the tests' own CRDs (tests/k8s/data/crds)
OWN_CRDS = tuple(Path(__file__).resolve().parent / "data" / "crds" / f"ray.io_{p}.yaml"
                 for p in ("rayjobs", "rayclusters"))
PLURALS = {(r.api_version, r.kind): (r.plural, r.namespaced) for r in RESOURCES}


class Api:
    """Raw REST of the real API server (admin), any kind the fake server also serves."""

    def __init__(self, kubeconfig: str) -> None:
        from kubernetes import client, config

        cfg = client.Configuration()
        config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
        self.api = client.ApiClient(cfg)

    def request(self, method: str, path: str, body: Any = None,
                content_type: str = "application/json") -> dict[str, Any]:
        m, url, headers, data, post = self.api.param_serialize(
            method, path, header_params={"Accept": "application/json",
                                         "Content-Type": content_type},
            body=body, auth_settings=["BearerToken"])
        resp = self.api.call_api(m, url, headers, data, post,
                                 _request_timeout=(5.0, 30.0)).response
        if resp.status >= 300:
            raise RuntimeError(f"{method} {path}: HTTP {resp.status}: {resp.data[:800]!r}")
        return json.loads(resp.data)

    @staticmethod
    def path(api_version: str, kind: str, namespace: str | None, name: str = "") -> str:
        plural, namespaced = PLURALS[(api_version, kind)]
        base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        if namespaced:
            base += f"/namespaces/{namespace}"
        return f"{base}/{plural}" + (f"/{name}" if name else "")

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        status = obj.get("status")
        body = {k: v for k, v in obj.items() if k != "status"}
        meta = obj["metadata"]
        got = self.request("POST", self.path(obj["apiVersion"], obj["kind"],
                                             meta.get("namespace")), body)
        if status:
            got = self.status(obj["apiVersion"], obj["kind"], meta["name"], status,
                              meta.get("namespace"))
        return got

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict:
        return self.request("GET", self.path(api_version, kind, namespace, name))

    def patch(self, api_version: str, kind: str, name: str, body: dict[str, Any],
              namespace: str | None = None) -> dict[str, Any]:
        return self.request("PATCH", self.path(api_version, kind, namespace, name), body,
                            "application/merge-patch+json")

    def status(self, api_version: str, kind: str, name: str, status: dict[str, Any],
               namespace: str | None = None) -> dict[str, Any]:
        """As a controller writes status: through the status subresource."""
        return self.request("PATCH", self.path(api_version, kind, namespace, name) + "/status",
                            {"status": status}, "application/merge-patch+json")


@pytest.fixture()
def control_plane(tmp_path: Path) -> Iterator[dict[str, str]]:
    crds = " ".join([str(to.shared_file(c)) for c in CRDS] + [str(c) for c in OWN_CRDS])
    with real_control_plane.control_plane(
            tmp_path, nodes=len(NODES), namespace=NS,
            setup=f"&& for f in {crds}; do kc create -f $f >&2; done "
                  # a CRD just made may have no status.conditions yet, which kubectl wait
                  # reports as an error instead of waiting: ask again
                  "&& for i in $(seq 20); do kc wait --for=condition=Established --timeout=60s"
                  " crd --all >&2 && break; sleep 0.5; done "
                  "&& kc wait --for=condition=Established --timeout=60s crd --all >&2") as env:
        yield env


def _register_webhook(api: Api, port: int, cafile: str) -> None:
    ca = base64.b64encode(Path(cafile).read_bytes()).decode()
    api.request("POST", "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "prefetchd-steering-test"},
        "webhooks": [{
            "name": "steering.fusecache.io", "sideEffects": "None",
            "admissionReviewVersions": ["v1"], "failurePolicy": "Ignore", "timeoutSeconds": 5,
            "clientConfig": {"url": f"https://127.0.0.1:{port}/mutate", "caBundle": ca},
            "namespaceSelector": {"matchLabels": {"fusecache.io/steering": "enabled"}},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                       "resources": ["pods"]}]}]})
    probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe", "namespace": NS},
             "spec": {"containers": [{"name": "c", "image": "busybox",
                                      "args": ["s3://probe-bucket/x/"]}]}}

    def mutated() -> bool:
        got = api.request("POST", f"/api/v1/namespaces/{NS}/pods?dryRun=All", probe)
        return "fusecache.io/preferred-nodes" in (got["metadata"].get("annotations") or {})

    wait_until("the webhook mutating a dry-run pod", mutated, 60)


def _holders(caches: dict[str, Path], keys: list[str]) -> set[str] | None:
    r = subprocess.run([sys.executable, "-c", _PROBE, BUCKET, *map(str, caches.values())],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout)
    return {n for n, c in caches.items()
            if all(got[str(c)].get(k) == [True, True] for k in keys)}


class Site:
    """Four agents and the webhook under their service accounts, against the real API server."""

    def __init__(self, env_k8s: dict[str, str], private_s3: Any, tmp_path: Path) -> None:
        from test_k8s_e2e_agent import free_port

        self.api = Api(env_k8s["KUBECONFIG"])
        self.s3, self.tmp = private_s3, tmp_path
        self.env = {**os.environ, **private_s3.env()}
        for var in ("NODE_NAME", "KUBERNETES_SERVICE_HOST", "AWS_CA_BUNDLE", "KUBECONFIG"):
            self.env.pop(var, None)
        self.agent_kc = real_control_plane.sa_kubeconfig(env_k8s, "prefetchd",
                                                         tmp_path / "kc-agent")
        self.webhook_kc = real_control_plane.sa_kubeconfig(env_k8s, "prefetchd-webhook",
                                                           tmp_path / "kc-webhook")
        self.caches = {n: tmp_path / f"cache-{n}" for n in NODES}
        self.ports = {n: free_port() for n in NODES}
        self.procs: dict[str, subprocess.Popen] = {}

    def dataset(self, prefix: str) -> tuple[str, list[str]]:
        s3 = self.s3.client()
        try:
            s3.create_bucket(Bucket=BUCKET)
        except s3.exceptions.BucketAlreadyOwnedByYou:
            pass
        files = {f"{prefix}/part-{i}.bin": os.urandom(60_000 + i) for i in range(3)}
        for k, v in files.items():
            s3.put_object(Bucket=BUCKET, Key=k, Body=v)
        return f"s3://{BUCKET}/{prefix}/", sorted(files)

    def start(self) -> None:
        from test_k8s_e2e_agent import free_port
        from test_k8s_webhook import make_cert

        for n in NODES:
            self.start_agent(n)
        cert, key = make_cert(self.tmp)
        port = free_port()
        self.procs["webhook"] = start([
            sys.executable, "-m", "prefetchd.cli", "--log-level", "INFO", "webhook",
            "--kubeconfig", self.webhook_kc, "--port", str(port), "--tls-cert-file", cert,
            "--tls-key-file", key], self.env, self.tmp / "webhook.log")

        def annotated() -> bool:
            assert all(p.poll() is None for p in self.procs.values()), "a process exited"
            return all(pl.CACHE_FREE_ANNOTATION in (self.api.get("v1", "Node", n)["metadata"]
                                                    .get("annotations") or {}) for n in NODES)

        wait_until("every agent published its node", annotated, 90)
        _register_webhook(self.api, port, cert)

    def start_agent(self, n: str) -> None:
        self.procs[n] = start([
            sys.executable, "-m", "prefetchd.cli", "--log-level", "INFO", "run",
            "--kubernetes", "--kubeconfig", self.agent_kc, "--node-name", n,
            "--cache-dir", str(self.caches[n]), "--endpoint-url", self.s3.endpoint_url,
            "--publish-interval", "1", "--metrics-port", str(self.ports[n])],
            self.env, self.tmp / f"agent-{n}.log")

    def holders(self, keys: list[str]) -> set[str] | None:
        return _holders(self.caches, keys)

    def bound_off_data(self, pod: dict[str, Any], warm: set[str], keys: list[str],
                       source: str) -> str:
        """Create a pod of the work *source* that can only go to a node without its data
        (its nodeSelector names one, as when the warm nodes are full), wait for the
        scheduler to bind it there and that node's agent to warm the data at once; the
        node."""
        cold = sorted(set(NODES) - warm)[0]
        pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": cold}
        [(name, host)] = self.create_bound([pod]).items()
        assert host == cold
        t0 = time.monotonic()
        wait_until("the data warm where the pod landed",
                   lambda: self.holders(keys) == {*warm, cold}, 60)
        print(f"warm on {cold} {time.monotonic() - t0:.1f}s after the pod was bound")
        # (its urgent lane took the pod: "before its data", or without those words when the
        # job's own placement had just asked this node for the data, as it may when the node
        # annotations change while the pod is made: a race, not a second warm)
        # (the pod may come to that agent before its work does: then its pod path warms
        # the data under the pod first, and the work takes the pod when it comes; stop 56)
        log = self.tmp / f"agent-{cold}.log"
        wait_until(f"{source} taking pod {name} on {cold}",
                   lambda: f"{source}: pod {name} bound here" in log.read_text(), 30)
        return cold

    def create_bound(self, pods: list[dict[str, Any]]) -> dict[str, str]:
        """Create the pods (as their controller makes them, without a status) and wait for
        the scheduler to bind them all: {pod name: node}."""
        names = []
        for pod in pods:
            pod.pop("status", None)
            names.append(self.api.create(pod)["metadata"]["name"])

        def bound() -> dict[str, str] | None:
            got = {p: self.api.get("v1", "Pod", p, NS)["spec"].get("nodeName") for p in names}
            return got if all(got.values()) else None

        return wait_until(f"the scheduler binding the {len(names)} pods", bound, 60)

    def job_pods_bound(self, job: str, count: int, timeout: float) -> dict[str, dict[str, Any]]:
        """The *count* pods the Job controller made for *job*, once the scheduler bound
        them all: {pod name: pod}."""
        selector = f"batch.kubernetes.io/job-name={job}"

        def bound() -> dict[str, dict[str, Any]] | None:
            pods = self.api.request("GET",
                                    f"/api/v1/namespaces/{NS}/pods?labelSelector={selector}")
            got = {p["metadata"]["name"]: p for p in pods["items"]}
            return got if len(got) == count and all(p["spec"].get("nodeName")
                                                    for p in got.values()) else None

        return wait_until(f"the Job controller's {count} pods of {job} bound", bound, timeout)

    def sources(self) -> set[str]:
        out = set()
        for c in self.caches.values():
            path = c / "prefetchd" / "k8s-pins.json"
            if path.exists():
                out |= {r["source"] for r in json.loads(path.read_text()).values()}
        return out

    def stop(self) -> None:
        for p in self.procs.values():
            stop(p)
        self.api.api.close()

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-4000:]}"
                         for p in sorted(self.tmp.glob("*.log")))


def test_queued_pytorchjob_on_a_real_control_plane(control_plane, private_s3, tmp_path):
    site = Site(control_plane, private_s3, tmp_path)
    api = site.api
    uri, keys = site.dataset("imagenet")
    try:
        site.start()
        api.create(to.priority_class("high", 1000))
        job = api.create(to.pytorchjob("train", NS, uri, workers=3, queue="user-queue",
                                       priority="high"))
        api.status("kubeflow.org/v1", "PyTorchJob", "train", to.v1_job_status(
            to.cond("Created", reason="PyTorchJobCreated"),
            to.cond("Suspended", reason="PyTorchJobSuspended")), NS)
        tpl = job["spec"]["pytorchReplicaSpecs"]
        wl = api.create(to.workload_for(job, [("master", 1, tpl["Master"]["template"]),
                                              ("worker", 3, tpl["Worker"]["template"])],
                                        "user-queue", ("high", 1000)))
        t0 = time.monotonic()
        wait_until("the queued job's data warm on all 4 nodes",
                   lambda: site.holders(keys) == set(NODES), 180)
        print(f"queued PyTorchJob warm on 4 nodes {time.monotonic() - t0:.1f}s after its "
              "Workload was created")
        status = to.admitted(wl)
        api.status("kueue.x-k8s.io/v1beta2", "Workload", wl["metadata"]["name"], status, NS)
        api.patch("kubeflow.org/v1", "PyTorchJob", "train",
                  {"spec": {"runPolicy": {"suspend": False}}}, NS)
        placed = site.create_bound([to.pytorch_pod(job, rtype, i) for rtype, i in (
            ("Master", 0), ("Worker", 0), ("Worker", 1), ("Worker", 2))])
        names = list(placed)
        print("pods bound:", placed)
        assert len(set(placed.values())) == 4, placed
        steered = {p: api.get("v1", "Pod", p, NS)["metadata"]["annotations"][
            "fusecache.io/preferred-nodes"] for p in names}
        print("pods steered:", steered)
        assert steered == placed  # the webhook named one warm node each, the scheduler took it
        from test_k8s_e2e_agent import scrape

        for n in NODES:
            lead = wait_until("the lead time", lambda n=n: scrape(site.ports[n]).get(
                'prefetchd_job_warm_lead_seconds{job="pytorchjob ml/train"}') is not None, 30)
            assert lead
            m = scrape(site.ports[n])
            print(n, "lead", m['prefetchd_job_warm_lead_seconds{job="pytorchjob ml/train"}'],
                  "ratio", m['prefetchd_job_warm_at_admission_ratio{job="pytorchjob ml/train"}'])
            assert m['prefetchd_job_warm_at_admission_ratio{job="pytorchjob ml/train"}'] == 1
        api.status("kueue.x-k8s.io/v1beta2", "Workload", wl["metadata"]["name"],
                   to.finished(status), NS)
        wait_until("the pins released", lambda: site.holders(keys[:1]) == set(), 60)
    except BaseException:
        print(site.logs())
        raise
    finally:
        site.stop()


def test_a_job_pod_the_scheduler_binds_off_its_data_is_warmed_where_it_lands(
        control_plane, private_s3, tmp_path):
    """A running PyTorchJob (1 master + 1 worker) is warm on 2 of the 4 nodes. One more
    worker pod can only go elsewhere (its nodeSelector names a node without the data, as
    when the warm nodes are full); the real scheduler binds it there, and that node's agent
    warms the job's data at once, pinned under the job; the job's end releases it there too.
    """
    site = Site(control_plane, private_s3, tmp_path)
    api = site.api
    uri, keys = site.dataset("resnet")
    try:
        site.start()
        job = to.pytorchjob("run", NS, uri, workers=2, queue="user-queue")
        job["spec"]["runPolicy"]["suspend"] = False
        job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 1
        job = api.create(job)
        api.status("kubeflow.org/v1", "PyTorchJob", "run", to.v1_job_status(
            to.cond("Created", reason="PyTorchJobCreated"),
            to.cond("Running", reason="PyTorchJobRunning")), NS)
        warm = wait_until("the running job's data warm on 2 nodes",
                          lambda: (h := site.holders(keys)) is not None and len(h) == 2 and h,
                          120)
        cold = site.bound_off_data(to.pytorch_pod(job, "Worker", 1), warm, keys,
                                   "pytorchjob ml/run")
        pins = site.caches[cold] / "prefetchd" / "k8s-pins.json"
        # (the pod may come to this agent before its job does: its pod path then warms the
        # data under the pod at once, and the job, when it comes, takes the pod and drops
        # the pod's pins; the data is warm before that, so wait for it; stop 56 saw it)
        wait_until("the data pinned under the job alone where the pod landed",
                   lambda: {r["source"] for r in json.loads(pins.read_text()).values()}
                   == {"pytorchjob ml/run"}, 30)
        api.status("kubeflow.org/v1", "PyTorchJob", "run", to.v1_job_status(
            to.cond("Created", reason="PyTorchJobCreated"),
            to.cond("Running", "False", "PyTorchJobSucceeded"),
            to.cond("Succeeded", reason="PyTorchJobSucceeded")), NS)
        wait_until("the pins released on every node",
                   lambda: site.holders(keys[:1]) == set(), 60)
    except BaseException:
        print(site.logs())
        raise
    finally:
        site.stop()


def test_cronjob_runs_made_by_the_real_controllers(control_plane, private_s3, tmp_path):
    """A CronJob every minute: warm on its 2 nodes before the CronJob controller makes the
    first run's Job; the Job controller's pods go through the webhook to those nodes and the
    scheduler binds them there; no pin is taken under the Job or its pods (they are the
    CronJob's); suspended, with its run deleted, the CronJob's pins go."""
    site = Site(control_plane, private_s3, tmp_path)
    api = site.api
    uri, keys = site.dataset("nightly")
    try:
        site.start()
        cj = to.cronjob("nightly", NS, uri, parallelism=2)
        cj["spec"]["schedule"] = "* * * * *"
        api.create(cj)
        warm = wait_until("the cronjob's data warm on 2 nodes",
                          lambda: (h := site.holders(keys)) is not None and len(h) == 2 and h,
                          120)
        assert not api.request("GET", f"/apis/batch/v1/namespaces/{NS}/jobs")["items"], \
            "the first run started before the data was warm: the test proves nothing"
        jobs = wait_until("the CronJob controller making the first run's Job", lambda: api.request(
            "GET", f"/apis/batch/v1/namespaces/{NS}/jobs")["items"], 90)
        job = jobs[0]
        [ref] = job["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["name"], ref.get("controller")) == ("CronJob", "nightly", True)
        print("the controller's Job:", job["metadata"]["name"], job["metadata"].get("annotations"))
        pods = site.job_pods_bound(job["metadata"]["name"], 2, 60)
        placed = {n: p["spec"]["nodeName"] for n, p in pods.items()}
        steered = {n: p["metadata"]["annotations"]["fusecache.io/preferred-nodes"]
                   for n, p in pods.items()}
        print("pods bound:", placed, "steered:", steered)
        assert set(placed.values()) <= warm and steered == placed
        time.sleep(3)  # the agents have seen the Job and its pods
        assert site.sources() == {"cronjob ml/nightly"}, site.sources()
        api.patch("batch/v1", "CronJob", "nightly", {"spec": {"suspend": True}}, NS)
        time.sleep(3)
        assert site.holders(keys) == warm  # suspended, but its run goes on: still pinned
        api.request("DELETE", f"/apis/batch/v1/namespaces/{NS}/jobs/{job['metadata']['name']}"
                    "?propagationPolicy=Background")
        wait_until("the suspended cronjob's pins released once its run is gone",
                   lambda: site.holders(keys[:1]) == set(), 90)
    except BaseException:
        print(site.logs())
        raise
    finally:
        site.stop()


def test_a_parallel_jobs_pods_get_a_warm_node_each_and_outlive_an_agent_restart(
        control_plane, private_s3, tmp_path):
    """A blind test of the agent on this control plane: the Job controller makes a parallel
    Job's pods milliseconds apart, each admitted before the last is stored, and the webhook
    steered two of three to one node (six times in six); and an agent restarted read none
    of the Jobs it listed (a JobList's items carry no kind) and released their pins."""
    site = Site(control_plane, private_s3, tmp_path)
    api = site.api
    uri, keys = site.dataset("par")
    try:
        site.start()
        job = to.batch_job("par", NS, uri, "", "", parallelism=3)
        del job["metadata"]["labels"]
        job["spec"]["suspend"] = False
        api.create(job)
        pods = site.job_pods_bound("par", 3, 90)
        placed = {n: p["spec"]["nodeName"] for n, p in pods.items()}
        steered = {n: p["metadata"]["annotations"]["fusecache.io/preferred-nodes"]
                   for n, p in pods.items()}
        print("pods bound:", placed, "steered:", steered)
        assert len(set(steered.values())) == 3 and steered == placed
        warm = wait_until("the job's data warm where its pods are",
                          lambda: (h := site.holders(keys)) is not None and
                          set(placed.values()) <= h and h, 90)
        first = sorted(warm)[0]
        stop(site.procs[first])
        site.start_agent(first)
        log = tmp_path / f"agent-{first}.log"
        wait_until("the restarted agent listing its work", lambda: "job ml/par" in
                   log.read_text(), 60)
        time.sleep(3)
        text = log.read_text()
        assert "is not a kind prefetchd reads" not in text, text[-3000:]
        assert site.holders(keys) == warm  # nothing released by the restart
    except BaseException:
        print(site.logs())
        raise
    finally:
        site.stop()


def test_a_job_queued_for_a_node_pool_on_a_real_control_plane(control_plane, private_s3,
                                                               tmp_path):
    """A batch Job in LocalQueue ml/team-q, whose ClusterQueue's one flavor is the node pool
    ``cloud.example.com/pool=reserved``: two of the four nodes, those ranked last for its
    dataset (before, it was warmed on the first two, which its pods never reach). Queued,
    its data is warm on the pool's nodes only; admitted, it is unsuspended with the flavor's
    nodeSelector as Kueue's job reconciler does, and the real Job controller's pods are
    steered and bound there. The queue objects are checked by the real API server against
    Kueue's CRDs, and read by the agents under manifests' RBAC."""
    site = Site(control_plane, private_s3, tmp_path)
    api = site.api
    uri, keys = site.dataset("pool")
    kueue = "kueue.x-k8s.io/v1beta2"
    try:
        site.start()
        ranked = [n.name for n in pl.rank(uri, [pl.NodeInfo.from_node(api.get("v1", "Node", n))
                                                for n in NODES])]
        pool = set(ranked[2:])
        for n in pool:
            api.patch("v1", "Node", n, {"metadata": {"labels": {
                "cloud.example.com/pool": "reserved"}}})
        api.create(to.priority_class("normal", 100))
        api.create({"apiVersion": kueue, "kind": "ResourceFlavor",
                    "metadata": {"name": "reserved"},
                    "spec": {"nodeLabels": {"cloud.example.com/pool": "reserved"}}})
        api.create({"apiVersion": kueue, "kind": "ClusterQueue", "metadata": {"name": "team-cq"},
                    "spec": {"namespaceSelector": {}, "resourceGroups": [{
                        "coveredResources": ["cpu"],
                        "flavors": [{"name": "reserved",
                                     "resources": [{"name": "cpu", "nominalQuota": 8}]}]}]}})
        api.create({"apiVersion": kueue, "kind": "LocalQueue",
                    "metadata": {"name": "team-q", "namespace": NS},
                    "spec": {"clusterQueue": "team-cq"}})
        job = api.create(to.batch_job("train", NS, uri, "team-q", "normal", parallelism=2))
        wl = api.create(to.workload_for(job, [("main", 2, job["spec"]["template"])], "team-q",
                                        ("normal", 100)))
        t0 = time.monotonic()
        wait_until("the queued job's data warm on the pool's 2 nodes",
                   lambda: site.holders(keys) == pool, 180)
        print(f"queued Job warm on {sorted(pool)} (ranked {ranked}) "
              f"{time.monotonic() - t0:.1f}s after its Workload was created")
        time.sleep(3)  # (and nowhere else a little later)
        assert site.holders(keys) == pool
        status = to.admitted(wl, "team-cq")
        for a in status["admission"]["podSetAssignments"]:
            a["flavors"] = {"cpu": "reserved"}
        api.status(kueue, "Workload", wl["metadata"]["name"], status, NS)
        api.patch("batch/v1", "Job", "train", {"spec": {"suspend": False, "template": {
            "spec": {"nodeSelector": {"cloud.example.com/pool": "reserved"}}}}}, NS)
        pods = site.job_pods_bound("train", 2, 60)
        placed = {p: pod["spec"]["nodeName"] for p, pod in pods.items()}
        print("pods bound:", placed)
        assert set(placed.values()) == pool, placed
        api.status(kueue, "Workload", wl["metadata"]["name"], to.finished(status), NS)
        wait_until("the pins released", lambda: site.holders(keys[:1]) == set(), 60)
    except BaseException:
        print(site.logs())
        raise
    finally:
        site.stop()


def test_queued_rayjob_on_a_real_control_plane(control_plane, private_s3, tmp_path):
    """A RayJob (a head with no CPUs for tasks, 2 GPU-group workers) queued in Kueue: its
    entrypoint's data warm on 2 nodes before Kueue admits it; once admitted, the worker pods
    KubeRay makes go through the webhook to those nodes and the scheduler binds them there
    (the head, which reads nothing, anywhere); a third worker the autoscaler adds, bound to
    a node without the data, gets it there at once; the job's end releases it everywhere."""
    site = Site(control_plane, private_s3, tmp_path)
    api = site.api
    uri, keys = site.dataset("news")
    try:
        site.start()
        job = api.create(to.rayjob("embed", NS, uri, workers=2, queue="user-queue"))
        spec = job["spec"]["rayClusterSpec"]
        wl = api.create(to.workload_for(job, [
            ("head", 1, spec["headGroupSpec"]["template"]),
            ("gpu", 2, spec["workerGroupSpecs"][0]["template"])], "user-queue", None))
        t0 = time.monotonic()
        warm = wait_until("the queued job's data warm on 2 nodes",
                          lambda: (h := site.holders(keys)) is not None and len(h) == 2 and h,
                          180)
        print(f"queued RayJob warm on {sorted(warm)} {time.monotonic() - t0:.1f}s after its "
              "Workload was created")
        status = to.admitted(wl)
        api.status("kueue.x-k8s.io/v1beta2", "Workload", wl["metadata"]["name"], status, NS)
        api.patch("ray.io/v1", "RayJob", "embed", {"spec": {"suspend": False}}, NS)
        cluster = api.create(to.raycluster_of(job))
        api.status("ray.io/v1", "RayJob", "embed", {
            "jobDeploymentStatus": "Initializing",
            "rayClusterName": cluster["metadata"]["name"]}, NS)
        placed = site.create_bound([to.ray_pod(cluster, group, suffix) for group, suffix in (
            ("headgroup", "h4w8c"), ("gpu", "bxq2z"), ("gpu", "k9d2m"))])
        workers = {p: n for p, n in placed.items() if "-gpu-worker-" in p}
        steered = {p: api.get("v1", "Pod", p, NS)["metadata"].get("annotations", {}).get(
            "fusecache.io/preferred-nodes") for p in workers}
        print("pods bound:", placed, "steered:", steered)
        assert set(workers.values()) == warm and steered == workers
        api.status("ray.io/v1", "RayJob", "embed", {
            "jobDeploymentStatus": "Running", "jobStatus": "RUNNING"}, NS)
        site.bound_off_data(to.ray_pod(cluster, "gpu", "z5t7p"), warm, keys, "rayjob ml/embed")
        api.status("ray.io/v1", "RayJob", "embed", {
            "jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"}, NS)
        wait_until("the pins released on every node",
                   lambda: site.holders(keys[:1]) == set(), 60)
    except BaseException:
        print(site.logs())
        raise
    finally:
        site.stop()


def _csi_provisioner(tmp_path: Path, kubeconfig: str) -> list[subprocess.Popen]:
    """fusecache-csi's controller and the real csi-provisioner sidecar on its socket, as
    manifests/controller.yaml runs them (the socket and a kubeconfig swapped in); skips
    when FUSECACHE_K8S_ASSETS has no csi-provisioner."""
    import yaml

    prov = Path(os.environ["FUSECACHE_K8S_ASSETS"]) / "csi-provisioner"
    if not os.access(prov, os.X_OK):
        pytest.skip(f"no csi-provisioner in FUSECACHE_K8S_ASSETS ({prov}): build "
                    "kubernetes-csi/external-provisioner's cmd/csi-provisioner there")
    doc = yaml.safe_load((real_control_plane.ROOT / "manifests" / "controller.yaml").read_text())
    args = next(c["args"] for c in doc["spec"]["template"]["spec"]["containers"]
                if c["name"] == "csi-provisioner")
    sock = tmp_path / "csi-controller.sock"
    procs = [start([sys.executable, "-m", "csi.main", "--mode", "controller", "--endpoint",
                    f"unix://{sock}", "--state-dir", str(tmp_path / "csi-state")],
                   dict(os.environ), tmp_path / "csi-controller.log")]
    wait_until("the CSI controller's socket", sock.exists, 60)
    procs.append(start([str(prov), f"--csi-address={sock}", f"--kubeconfig={kubeconfig}",
                        "--leader-election=false", "-v=4",
                        *(a for a in args if not a.startswith(("--csi-address",
                                                               "--leader-election")))],
                       dict(os.environ), tmp_path / "csi-provisioner.log"))
    return procs


def test_a_jobs_generic_ephemeral_volumes_of_a_fusecache_class(control_plane, private_s3,
                                                               tmp_path):
    """A batch Job of 2 pods whose only data is a generic ephemeral volume of a fusecache
    StorageClass (prefixPolicy fixed). Everything between is the real thing: the Job
    controller makes the pods, the webhook steers them by the class (the pods have no
    claim when they are created), kube-controller-manager's ephemeral-volume controller
    makes each pod's claim ``<pod>-data``, the real csi-provisioner has fusecache-csi's
    CreateVolume provision it, the binder binds it and the scheduler binds the pods. The
    agents warm the class's dataset before the pods are bound, on the nodes they land on;
    when the kubelet's pod phases finish the Job, the pins go."""
    site = Site(control_plane, private_s3, tmp_path)
    api = site.api
    uri, keys = site.dataset("ephemeral")
    procs = _csi_provisioner(tmp_path, control_plane["KUBECONFIG"])
    try:
        api.request("POST", "/apis/storage.k8s.io/v1/storageclasses", {
            "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": "fusecache-fixed"}, "provisioner": "csi.fusecache.io",
            "parameters": {"bucket": BUCKET, "prefix": "ephemeral", "prefixPolicy": "fixed",
                           "endpointUrl": private_s3.endpoint_url, "region": "us-east-1"},
            "reclaimPolicy": "Delete", "volumeBindingMode": "Immediate"})
        site.start()
        job = api.request("POST", f"/apis/batch/v1/namespaces/{NS}/jobs", {
            "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "scan", "namespace": NS},
            "spec": {"parallelism": 2, "completions": 2, "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "scan", "image": "busybox", "command": [
                    "sh", "-c", "cat /data/* | wc -c"],
                    "volumeMounts": [{"name": "data", "mountPath": "/data",
                                      "readOnly": True}]}],
                "volumes": [{"name": "data", "ephemeral": {"volumeClaimTemplate": {"spec": {
                    "accessModes": ["ReadOnlyMany"], "storageClassName": "fusecache-fixed",
                    "resources": {"requests": {"storage": "1Gi"}}}}}}]}}}})
        pods = site.job_pods_bound(job["metadata"]["name"], 2, 120)  # claims provisioned
        placed = {n: p["spec"]["nodeName"] for n, p in pods.items()}
        steered = {n: p["metadata"].get("annotations", {}).get("fusecache.io/preferred-nodes")
                   for n, p in pods.items()}
        print("pods bound:", placed, "steered:", steered)
        for name in pods:
            claim = api.get("v1", "PersistentVolumeClaim", f"{name}-data", NS)
            [ref] = claim["metadata"]["ownerReferences"]
            assert (ref["kind"], ref["name"], ref.get("controller")) == ("Pod", name, True)
            pv = api.get("v1", "PersistentVolume", claim["spec"]["volumeName"])
            attrs = pv["spec"]["csi"]["volumeAttributes"]
            assert (pv["spec"]["csi"]["driver"], attrs["bucket"], attrs["prefix"]) == (
                "csi.fusecache.io", BUCKET, "ephemeral"), pv["spec"]["csi"]
        assert steered == placed, "the webhook did not steer by the class"
        warm = wait_until("the class's dataset warm where the pods are",
                          lambda: (h := site.holders(keys)) is not None
                          and h >= set(placed.values()) and h, 90)
        print("warm on:", sorted(warm), "pins:", site.sources())
        for name in pods:  # what the kubelet reports when the container exits 0
            api.status("v1", "Pod", name, {"phase": "Succeeded"}, NS)
        wait_until("the Job controller finishing the Job", lambda: any(
            c["type"] == "Complete" and c["status"] == "True" for c in api.request(
                "GET", f"/apis/batch/v1/namespaces/{NS}/jobs/scan").get("status", {}).get(
                "conditions", [])), 90)
        wait_until("the pins released on every node",
                   lambda: site.holders(keys[:1]) == set(), 90)
    except BaseException:
        print(site.logs())
        raise
    finally:
        site.stop()
        for p in procs:
            stop(p)
