"""The PVC end-to-end scenario, on the fake API server or on a real control plane.

Who uses this: tests/k8s/test_k8s_e2e_pvc.py (fake API server, :class:`FakePlatform`) and
tests/k8s/test_k8s_real_cluster.py (kube-apiserver + scheduler + controller manager). Real
processes: three ``prefetchd run --kubernetes`` agents (one per node, each on its own cache dir,
``--replicas 2``), ``prefetchd webhook``, a SeaweedFS of the test's own, and at the end
``fusecache mount`` on a warmed cache with S3 stopped. What the cluster's controllers make is
made by tests/k8s/argo_sim.py (Argo, KFP); what differs between the two platforms (admission,
scheduling, claim binding, credentials) is the :class:`Platform`'s. Five workflows at once, of
three kinds:

* ``argo``: an Argo Workflow whose train step mounts a bound static PV of csi.fusecache.io
  through a workflow parameter (``claimName: {{workflow.parameters.dataset-claim}}``);
* ``kfp``: the compiled KFP v2 pipeline tests/k8s/data/kfp_mount_pvc_pipeline.yaml
  (``kubernetes.mount_pvc`` with the claim a pipeline parameter, resolved from the run's
  parameter values) as the KFP backend submits it;
* ``vct``: an Argo ``volumeClaimTemplates`` claim, bound to a fusecache PV only while the
  workflow runs (after its prepare step started).

Each is checked: the dataset (the train sub-folder only) complete in exactly two caches and
absent from the third before the train pod exists; the pod steered to those nodes and bound to
one of them (one KFP run's pod instead required on the third node: the data is then warmed
there at once, under the workflow); no pin under a pod; ``prefetchd status`` naming the
workflow's step as the pinner; after Succeeded no pin anywhere; the bytes served
sha256-exact from the cache with S3 stopped. The time from submission to fully warmed is
printed per dataset (and written to ``$FUSECACHE_E2E_REPORT`` when set).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from argo_sim import (
    ArgoRun,
    Cluster,
    KfpRun,
    argo_workflow,
    claim,
    kfp_workflow,
    static_pv,
)

from fusecache.locals3 import LocalS3
from prefetchd.k8s import placement as pl

ROOT = Path(__file__).resolve().parents[2]
KFP_IR = Path(__file__).resolve().parent / "data" / "kfp_mount_pvc_pipeline.yaml"
BUCKET = "datasets"
REPLICAS = 2
KINDS = ("argo", "kfp", "vct", "argo", "kfp")
# This run's train pod gets a nodeSelector for a node its data is not on (the warm nodes
# full): the scheduler must put it there, and that node's agent warm its data at once.
OFF_DATA_RUN = 1


class Platform(Protocol):
    """What the scenario needs of a cluster besides its objects."""

    cluster: Cluster
    nodes: tuple[str, ...]
    namespace: str

    def agent_kubeconfig(self, node: str) -> str: ...

    def webhook_kubeconfig(self) -> str: ...

    def register_webhook(self, port: int, cafile: str) -> None: ...

    def create_pod(self, pod: dict[str, Any]) -> dict[str, Any]:
        """Create through admission (the webhook mutates it); returns the stored pod."""
        ...

    def schedule(self, pod: dict[str, Any]) -> str:
        """The node the pod is bound to (by the scheduler, or as a scheduler would)."""
        ...

    def bind(self, pv: dict[str, Any], namespace: str, claim_name: str) -> None: ...

def wait_until(what: str, fn: Callable[[], Any], timeout: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)  # polling with a deadline: the state lives in other processes


def files_of(i: int) -> dict[str, bytes]:
    """Dataset i: what train reads (train/) and what it does not (other/)."""
    out = {f"ds-{i}/train/part-{j}.bin": os.urandom(40_000 + 9_000 * j + 100 * i)
           for j in range(4)}
    if i == 0:
        out["ds-0/train/big.bin"] = os.urandom(9_000_000)  # more than one 8 MiB block
    out[f"ds-{i}/other/unread.bin"] = os.urandom(30_000)
    return out


_PROBE = """
import json, sys
from pathlib import Path
import fusecache
out = {}
for d in sys.argv[2:]:
    objs = {}
    if (Path(d) / "cache.lmdb").exists():
        cache = fusecache.NodeCache.open(d)
        try:
            objs = {o.key: [not cache.missing_blocks(o), cache.is_pinned(o)]
                    for o in cache.iter_objects(sys.argv[1])}
        finally:
            cache.close()
    out[d] = objs
print(json.dumps(out))
"""


def cache_objects(cache_dirs: list[Path]) -> dict[str, dict[str, tuple[bool, bool]]] | None:
    """cache dir -> key -> (every block cached, pinned), for the bucket's objects.

    Read by a short-lived process, not this one: this process must not hold LMDB handles on
    caches the agents write (and an LMDB wait there would hold this process's GIL, stopping
    the fake API server with it). None when the probe did not answer in time (poll again).
    """
    try:
        r = subprocess.run([sys.executable, "-c", _PROBE, BUCKET, *map(str, cache_dirs)],
                           capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return None
    if r.returncode != 0:
        raise AssertionError(f"cache probe failed: {r.stderr[-2000:]}")
    return {d: {k: (v[0], v[1]) for k, v in objs.items()}
            for d, objs in json.loads(r.stdout).items()}


class Nodes:
    """The three node caches, read together (one snapshot per poll)."""

    def __init__(self, caches: dict[str, Path], files: dict[int, dict[str, bytes]]) -> None:
        self.caches, self.files = caches, files

    def snapshot(self) -> dict[str, dict[str, tuple[bool, bool]]] | None:
        got = cache_objects(list(self.caches.values()))
        return None if got is None else {n: got[str(c)] for n, c in self.caches.items()}

    def snapshot_now(self) -> dict[str, dict[str, tuple[bool, bool]]]:
        return wait_until("a cache snapshot", self.snapshot, 180)

    def holders(self, snap: dict, i: int) -> tuple[set[str], set[str]]:
        """(nodes holding all of dataset i's train/ objects, nodes holding any object of ds-i)."""
        want = [k for k in self.files[i] if "/train/" in k]
        full = {n for n, objs in snap.items() if all(objs.get(k, (False,))[0] for k in want)}
        some = {n for n, objs in snap.items() if any(k.startswith(f"ds-{i}/") for k in objs)}
        return full, some


def start(cmd: list[str], env: dict[str, str], log_path: Path) -> subprocess.Popen:
    with open(log_path, "w") as log_file:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log_file, stderr=log_file)


def stop(proc: subprocess.Popen) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return -9
    return proc.returncode


def preferred_hosts(pod: dict) -> set[str]:
    terms = ((((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {})
             .get("preferredDuringSchedulingIgnoredDuringExecution") or [])
    return {v for t in terms for e in t["preference"].get("matchExpressions") or []
            if e["key"] == "kubernetes.io/hostname" for v in e["values"]}


def run_scenario(platform: Platform, private_s3: LocalS3, tmp_path: Path) -> dict[int, float]:
    """The whole scenario; returns seconds from submission to fully warmed, per workflow."""
    from test_k8s_e2e_agent import free_port
    from test_k8s_webhook import make_cert

    from mounting import mounted

    cluster, NODES, NS = platform.cluster, platform.nodes, platform.namespace  # noqa: N806

    s3 = private_s3.client()
    s3.create_bucket(Bucket=BUCKET)
    files = {i: files_of(i) for i in range(len(KINDS))}
    for fs in files.values():
        for key, data in fs.items():
            s3.put_object(Bucket=BUCKET, Key=key, Body=data)
    env = {**os.environ, **private_s3.env()}
    for var in ("NODE_NAME", "KUBERNETES_SERVICE_HOST", "AWS_CA_BUNDLE"):
        env.pop(var, None)
    caches = {n: tmp_path / f"cache-{n}" for n in NODES}
    procs: dict[str, subprocess.Popen] = {}
    logs = {n: tmp_path / f"agent-{n}.log" for n in NODES}
    try:
        for n in NODES:
            procs[n] = start([sys.executable, "-m", "prefetchd.cli", "--log-level", "INFO", "run",
                              "--kubernetes", "--kubeconfig", platform.agent_kubeconfig(n),
                              "--node-name", n,
                              "--replicas", str(REPLICAS), "--cache-dir", str(caches[n]),
                              "--endpoint-url", private_s3.endpoint_url,
                              "--publish-interval", "1"], env, logs[n])
        cert, key = make_cert(tmp_path)
        port = free_port()
        procs["webhook"] = start([sys.executable, "-m", "prefetchd.cli", "--log-level", "INFO",
                                  "webhook", "--kubeconfig", platform.webhook_kubeconfig(),
                                  "--port", str(port),
                                  "--tls-cert-file", cert, "--tls-key-file", key,
                                  "--replicas", str(REPLICAS)], env, tmp_path / "webhook.log")
        platform.register_webhook(port, cert)

        def annotated() -> bool:
            assert all(p.poll() is None for p in procs.values()), "a process exited"
            return all(pl.CACHE_FREE_ANNOTATION in (cluster.get("v1", "Node", n)["metadata"]
                                                    .get("annotations") or {}) for n in NODES)

        wait_until("every agent published its node", annotated, 60)
        wait_until("the webhook listening", lambda: _listening(port), 30)

        # ---- submit five workflows at once; "Argo" starts them and runs their prepare step
        runs: dict[int, ArgoRun] = {}
        prepare_host: dict[int, str] = {}
        submitted_wall: dict[int, float] = {}
        for i, kind in enumerate(KINDS):  # the datasets' static PVs, bound beforehand
            if kind in ("argo", "kfp"):
                cluster.create(claim(f"ds-{i}", NS))
                platform.bind(static_pv(f"pv-ds-{i}", BUCKET, f"ds-{i}",
                                        private_s3.endpoint_url), NS, f"ds-{i}")
        for i, kind in enumerate(KINDS):  # then five workflows submitted at once
            if kind == "argo":
                wf = argo_workflow(f"train-{i}", NS, f"ds-{i}")
            elif kind == "vct":
                wf = argo_workflow(f"train-{i}", NS, None, data_arg="/data/./train",
                                   template_claim=True)
            else:
                wf = kfp_workflow(KFP_IR, f"train-{i}", NS,
                                  {"dataset_claim": f"ds-{i}", "run_id": f"run-{i}"})
            wf = cluster.create(wf)
            submitted_wall[i] = time.time()
            runs[i] = (KfpRun(cluster, wf, KFP_IR, {"dataset_claim": f"ds-{i}", "run_id": "r"})
                       if kind == "kfp" else ArgoRun(cluster, wf))
        for i, run in runs.items():
            run.start()
            pod = platform.create_pod(_step(run, "prepare", "Pending", create_pod=True))
            prepare_host[i] = platform.schedule(pod)
            run.pod_phase(_node_name(run, "prepare"), "Running")
            _step(run, "prepare", "Running", host=prepare_host[i])
            if KINDS[i] == "vct":  # the provisioner binds the template claim while it runs
                platform.bind(static_pv(f"pv-ds-{i}", BUCKET, f"ds-{i}"), NS,
                              f"{run.name}-data")

        # ---- every dataset is warmed on exactly --replicas nodes, before its train pod exists
        nodes = Nodes(caches, files)
        warmed_at: dict[int, float] = {}

        def all_warmed() -> bool:
            assert all(p.poll() is None for p in procs.values()), "a process exited"
            snap = nodes.snapshot()
            if snap is None:
                return False
            for i in runs:
                full, _ = nodes.holders(snap, i)
                if len(full) >= REPLICAS and i not in warmed_at:
                    warmed_at[i] = time.monotonic()
            return len(warmed_at) == len(runs)

        wait_until("every dataset warmed on two nodes", all_warmed, 240)
        # the warm's own finish time (the agents' pin records, wall clock) minus submission;
        # the poll above only bounds it from above
        done_at: dict[int, float] = {}
        for n in NODES:
            for rec in _records(caches[n]).values():
                i = int(rec["dataset"].split("/ds-", 1)[1].split("/", 1)[0])
                done_at[i] = max(done_at.get(i, 0.0), rec["warmed_at"])
        lead = {i: round(done_at[i] - submitted_wall[i], 2) for i in runs}
        print(f"\nsubmission -> fully warmed, seconds: {json.dumps(lead)}")
        if os.environ.get("FUSECACHE_E2E_REPORT"):
            Path(os.environ["FUSECACHE_E2E_REPORT"]).write_text(json.dumps(
                {"kinds": KINDS, "submit_to_warm_s": lead}))

        holders: dict[int, set[str]] = {}
        bound_to: dict[int, str] = {}
        for i, run in runs.items():
            _step(run, "prepare", "Succeeded", host=prepare_host[i])
            run.pod_phase(_node_name(run, "prepare"), "Succeeded")
            snap = nodes.snapshot_now()
            full, some = nodes.holders(snap, i)
            assert len(full) == REPLICAS and some == full, (i, full, some)  # nowhere else
            assert not any(k.startswith(f"ds-{i}/other/") for objs in snap.values()
                           for k in objs), "a file train does not read was warmed"
            holders[i] = full
            # "Argo" creates the train pod only now; the API server calls the webhook
            made = _step(run, "train", "Pending", create_pod=True, claim_name=f"ds-{i}")
            elsewhere = sorted(set(NODES) - full)[0] if i == OFF_DATA_RUN else None
            if elsewhere:  # its user pinned it to a node without its data
                made["spec"]["nodeSelector"] = {"kubernetes.io/hostname": elsewhere}
            pod = platform.create_pod(made)
            # the webhook names only nodes the pod may run on
            assert preferred_hosts(pod) == ({elsewhere} if elsewhere else full), \
                (i, preferred_hosts(pod), full)
            bound_to[i] = platform.schedule(pod)  # the scheduler follows the preference
            assert bound_to[i] == elsewhere if elsewhere else bound_to[i] in full, \
                (i, bound_to[i], full, elsewhere)

        # the train pod bound where its data is not: that node's agent warms the data there
        # at once, under the workflow (released by its DAG below, served with S3 gone)
        off = bound_to[OFF_DATA_RUN]
        wait_until("the data warm where the off-data pod landed", lambda: (
            snap := nodes.snapshot()) is not None and off in nodes.holders(snap, OFF_DATA_RUN)[0],
            60)
        assert {r["source"] for r in _records(caches[off]).values()
                if f"/ds-{OFF_DATA_RUN}/" in r["dataset"]} == {
            f"workflow {NS}/{runs[OFF_DATA_RUN].name}"}

        # every agent has seen every train pod (Pending until after this check) as a step of
        # its workflow, not as a pending pod of its own (prepare pods may have been Running
        # before an agent's pod watch started, which then never lists them)
        pods = [run.pods[_node_name(run, "train")] for run in runs.values()]

        def pods_seen() -> bool:
            texts = [logs[n].read_text() for n in NODES]
            return all(f"pod {NS}/{p}: a step of workflow" in t for t in texts for p in pods)

        wait_until("agents saw the step pods", pods_seen, 60)
        for n in NODES:
            records = _records(caches[n])
            assert all(r["source"].startswith("workflow ") for r in records.values()), records
            assert {r["source"] for r in records.values()} <= {
                f"workflow {NS}/{r.name}" for r in runs.values()}
            # prefetchd status says who pins what: the workflow and its step, never a pod
            rows = {r["uri"]: r for r in json.loads(subprocess.run(
                [sys.executable, "-m", "prefetchd.cli", "status", "--json", "--cache-dir",
                 str(caches[n])], cwd=ROOT, env=env, capture_output=True, check=True).stdout)}
            for i, run in runs.items():
                if n in holders[i]:
                    row = rows[f"s3://{BUCKET}/ds-{i}/train/"]
                    assert row["pinned_by"] == [f"workflow {NS}/{run.name} step train"], row

        # ---- train runs and finishes; the workflows succeed: every pin goes, within seconds
        for i, run in runs.items():
            host = bound_to[i]
            run.pod_phase(_node_name(run, "train"), "Running")
            _step(run, "train", "Running", host=host)
            run.pod_phase(_node_name(run, "train"), "Succeeded")
            _step(run, "train", "Succeeded", host=host)
            run.finish()

        def no_pins() -> bool:
            snap = nodes.snapshot()
            return snap is not None and not any(
                p for objs in snap.values() for _, p in objs.values()) and \
                all(_records(caches[n]) == {} for n in NODES)

        wait_until("no pin left anywhere", no_pins, 30)
        for n in NODES:
            rows = json.loads(subprocess.run(
                [sys.executable, "-m", "prefetchd.cli", "status", "--json", "--cache-dir",
                 str(caches[n])], cwd=ROOT, env=env, capture_output=True, check=True).stdout)
            assert all(not r["pinned"] and r["pinned_by"] == [] for r in rows), rows
        for name, p in procs.items():
            assert stop(p) == 0, name
    finally:
        for p in procs.values():
            stop(p)
    for n in NODES:
        text = logs[n].read_text()
        assert " WARNING " not in text and " ERROR " not in text, text
        assert "prefetchd agent stopped" in text
        assert env["AWS_SECRET_ACCESS_KEY"] not in text

    # ---- S3 gone: each dataset is served from a node that warmed it, every byte exact
    private_s3.stop()
    for i in runs:
        node_name = bound_to[i]
        want = {k: v for k, v in files[i].items() if "/train/" in k}
        with mounted(f"s3://{BUCKET}/ds-{i}/train", tmp_path / f"mnt-{i}", env, "--cache-dir",
                     str(caches[node_name]), "--read-timeout", "5") as mp:
            got = {f"ds-{i}/train/{name}": hashlib.sha256((mp / name).read_bytes()).hexdigest()
                   for name in os.listdir(mp)}
        assert got == {k: hashlib.sha256(v).hexdigest() for k, v in want.items()}
    return lead


def _listening(port: int) -> bool:
    import socket

    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def _records(cache_dir: Path) -> dict[str, Any]:
    path = cache_dir / "prefetchd" / "k8s-pins.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _node_name(run: ArgoRun, task: str) -> str:
    return f"{run.name}.root.{task}.executor" if isinstance(run, KfpRun) else \
        f"{run.name}.{task}"


def _step(run: ArgoRun, task: str, phase: str, **kw: Any) -> Any:
    if isinstance(run, KfpRun):
        return run.kfp_step(task, phase, **kw)
    kw.pop("claim_name", None)
    return run.argo_step(task, phase, **kw)
