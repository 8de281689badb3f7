"""``prefetchd run --kubernetes`` as a real process: fake API server + real SeaweedFS + node cache.

The corpus workflow (pipelines/argo_dag_s3_artifacts.yaml) is pointed at a fresh bucket holding
its datasets. The agent must publish its Node (free space, bucket labels), warm and pin the
datasets of steps that have not started, release the pins when the steps reading them have
finished, expose per-step metrics, and stop cleanly on SIGTERM.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
from k8s_helpers import corpus_workflow, node

import fusecache
from prefetchd import cli
from prefetchd.k8s import placement as pl
from prefetchd.k8s import worker as wk

pytestmark = pytest.mark.k8s

ROOT = Path(__file__).resolve().parents[2]
WF = "pipelines/argo_dag_s3_artifacts.yaml"
FILES = {
    "flowers102/labels.csv": b"id,label\n" + b"1,rose\n" * 2000,
    "flowers102/train/a.bin": os.urandom(300_000),
    "flowers102/train/b.bin": os.urandom(9_000_000),  # more than one 8 MiB block
    "flowers102/val/c.bin": os.urandom(70_000),
}


def wait_until(what: str, fn: Callable[[], Any], timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)  # polling with a deadline: the state lives in another process


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_port_pair(host: str = "127.0.0.1", taken: Iterable[int] = ()) -> int:
    """A port on *host* free right now whose next one is free too (an agent's
    ``--peer-listen`` port and its block lane on the next), below the kernel's ephemeral
    range: a port from ``bind(0)`` is one of those, and the next one was at times taken
    by another test's outgoing connection before the agent bound it ("--lane-listen ...:
    Address already in use", twice in CI on 2026-12-06)."""
    busy = set(taken)
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    rng = random.Random()
    while True:
        port = rng.randrange(10000, max(10002, low - 2))
        if busy & {port, port + 1}:
            continue
        with socket.socket() as a, socket.socket() as b:
            try:
                a.bind((host, port))
                b.bind((host, port + 1))
            except OSError:
                continue
        return port


def write_kubeconfig(path: Path, server: str) -> Path:
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": server}}],
        "users": [{"name": "agent", "user": {"token": "not-a-secret"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "agent"}}],
    }))
    return path


def cache_state(cache_dir: Path, bucket: str) -> dict[str, tuple[bool, bool]]:
    """key -> (every block cached, pinned), for the bucket's objects in the node cache."""
    if not (cache_dir / "cache.lmdb").exists():
        return {}
    cache = fusecache.NodeCache.open(cache_dir)
    try:
        return {o.key: (not cache.missing_blocks(o), cache.is_pinned(o))
                for o in cache.iter_objects(bucket)}
    finally:
        cache.close()


def step_status(wf: str, phase: str, **steps: tuple[str, str | None]) -> dict:
    """A DAG workflow's status as the controller writes it (node ``<workflow>.<task>``)."""
    return {"phase": phase, "nodes": {
        f"{wf}-{i}": {"id": f"{wf}-{i}", "name": f"{wf}.{step}", "displayName": step,
                      "phase": ph, "type": "Pod",
                    "startedAt": started, "hostNodeName": "n2",
                    **({"finishedAt": started} if ph == "Succeeded" else {})}
        for i, (step, (ph, started)) in enumerate(steps.items())}}


def scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def test_agent_warms_publishes_releases_and_stops(fake, local_s3, s3_env, bucket, tmp_path):
    s3 = local_s3.client()
    for key, data in FILES.items():
        s3.put_object(Bucket=bucket, Key=key, Body=data)
    wf = json.loads(json.dumps(corpus_workflow(WF, name="flowers", namespace="ml"))
                    .replace("example-vision", bucket))
    labels, train, val = (f"s3://{bucket}/flowers102/labels.csv",
                          f"s3://{bucket}/flowers102/train/", f"s3://{bucket}/flowers102/val/")
    fake.create(node("n1"))
    fake.create(wf)
    cache_dir, port = tmp_path / "cache", free_port()
    cmd = [sys.executable, "-m", "prefetchd.cli", "--log-level", "INFO", "run", "--kubernetes",
           "--kubeconfig", str(write_kubeconfig(tmp_path / "kubeconfig", fake.url)),
           "--node-name", "n1", "--cache-dir", str(cache_dir),
           "--endpoint-url", local_s3.endpoint_url, "--metrics-port", str(port),
           "--publish-interval", "1"]
    env = {**os.environ, **s3_env}
    env.pop("NODE_NAME", None)
    env.pop("KUBERNETES_SERVICE_HOST", None)
    log_path = tmp_path / "agent.log"
    with open(log_path, "w") as log_file:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log_file, stderr=log_file)
    try:
        # 1. every object of the three datasets is in the node cache, whole and pinned
        want = {k: (True, True) for k in FILES}
        wait_until("datasets warmed and pinned",
                   lambda: cache_state(cache_dir, bucket) == want or proc.poll() is not None)
        assert proc.poll() is None, log_path.read_text()
        rows = {r["uri"]: r for r in json.loads(subprocess.run(
            [sys.executable, "-m", "prefetchd.cli", "status", "--json", "--cache-dir",
             str(cache_dir)], cwd=ROOT, env=env, capture_output=True, check=True).stdout)}
        assert set(rows) == {labels, train, val}
        assert all(r["cached_objects"] == r["objects"] and r["pinned"] for r in rows.values())

        # 2. the Node says how much cache is free and which buckets of datasets it holds
        def published() -> dict | None:
            meta = fake.get("v1", "Node", "n1")["metadata"]
            held = {k for k in meta.get("labels") or {} if k.startswith(pl.HOLDS_LABEL_PREFIX)}
            ok = (pl.CACHE_FREE_ANNOTATION in (meta.get("annotations") or {})
                  and held == {pl.holds_label(d) for d in (labels, train, val)})
            return meta if ok else None

        meta = wait_until("node annotation and labels", published)
        free = int(meta["annotations"][pl.CACHE_FREE_ANNOTATION])
        cache = fusecache.NodeCache.open(cache_dir)
        try:
            st = cache.stats()
        finally:
            cache.close()
        assert st.used_bytes >= sum(len(v) for v in FILES.values())
        # limit - used, rewritten only when it moved by more than the publish threshold
        tolerance = max(wk.PUBLISH_MIN_DELTA, st.limit_bytes // 100)
        assert 0 < free <= st.limit_bytes
        assert abs(free - (st.limit_bytes - st.used_bytes)) < tolerance
        records = json.loads((cache_dir / "prefetchd" / "k8s-pins.json").read_text())
        assert sorted(r["dataset"] for r in records.values()) == sorted([labels, train, val])
        assert wk.pin_owner("workflow ml/flowers", "fetch-splits", train) in records

        # 3. the steps reading the datasets run and finish: their pins are released
        start = math.ceil(time.time()) + 1  # RFC 3339 has whole seconds: strictly after
        started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(start))
        fake.patch("argoproj.io/v1alpha1", "Workflow", "flowers", {"status": step_status(
            "flowers", "Running", **{"fetch-labels": ("Succeeded", started),
                          "fetch-splits": ("Succeeded", started),
                          "train": ("Running", started)})}, namespace="ml")
        unpinned = {k: (True, False) for k in FILES}
        wait_until("pins released", lambda: cache_state(cache_dir, bucket) == unpinned)
        wait_until("holds labels removed", lambda: not any(
            k.startswith(pl.HOLDS_LABEL_PREFIX)
            for k in fake.get("v1", "Node", "n1")["metadata"].get("labels") or {}))
        assert json.loads((cache_dir / "prefetchd" / "k8s-pins.json").read_text()) == {}

        # 4. per-step metrics: lead time (warm done before the step started), bytes warmed
        m = scrape(port)
        splits = '{step="fetch-splits",workflow="ml/flowers"}'
        lead = m[f"prefetchd_step_warm_lead_seconds{splits}"]
        assert 0 < lead < 60
        train_bytes = sum(len(v) for k, v in FILES.items() if "/train/" in k)
        val_bytes = len(FILES["flowers102/val/c.bin"])
        assert m[f"prefetchd_step_warmed_bytes{splits}"] == train_bytes + val_bytes
        assert m[f"prefetchd_step_transferred_bytes{splits}"] == train_bytes + val_bytes
        assert m["prefetchd_node_cache_limit_bytes"] > 0
        assert m['prefetchd_warms_total{outcome="done"}'] == 3

        # 5. SIGTERM: a clean, prompt stop
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        assert time.monotonic() - t0 < 5
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log_path.read_text()
    assert "prefetchd agent stopped" in text
    assert " WARNING " not in text and " ERROR " not in text, text
    assert "not-a-secret" not in text and s3_env["AWS_SECRET_ACCESS_KEY"] not in text


@pytest.mark.parametrize("argv, message", [
    (["run"], "give --watch-dir DIR or --kubernetes"),
    (["run", "--kubernetes", "--watch-dir", "/tmp"], "two modes"),
    (["run", "--kubernetes", "--once", "--kubeconfig", "K"], "--once is for --watch-dir"),
    (["run", "--watch-dir", "/tmp", "--kubeconfig", "K"], "applies only with --kubernetes"),
    (["run", "--kubernetes", "--kubeconfig", "KUBECONFIG"], "--node-name"),
    (["run", "--kubernetes", "--node-name", "n1"], "not in a pod"),
    (["run", "--kubernetes", "--node-name", "n1", "--kubeconfig", "/nonexistent"],
     "no such file"),
    (["webhook", "--tls-cert-file", "/nonexistent", "--tls-key-file", "/nonexistent"],
     "--tls-cert-file /nonexistent: no such file"),
])
def test_bad_combinations_are_one_line_errors(argv, message, tmp_path, monkeypatch, capsys):
    for var in ("NODE_NAME", "KUBERNETES_SERVICE_HOST", "KUBECONFIG"):
        monkeypatch.delenv(var, raising=False)
    kubeconfig = write_kubeconfig(tmp_path / "kc", "http://127.0.0.1:1")
    argv = [str(kubeconfig) if a == "KUBECONFIG" else a for a in argv]
    assert cli.main(argv) == cli.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("prefetchd: error: ") and message in err, err


def _bad_start_files(tmp_path: Path) -> dict[str, str]:
    from test_k8s_webhook import make_cert

    cert, key = make_cert(tmp_path)
    _, other_key = make_cert(tmp_path, "other")
    (tmp_path / "text.txt").write_text("plain text, not PEM\n")
    good = json.loads(write_kubeconfig(tmp_path / "kc.json", "http://127.0.0.1:1").read_text())
    (tmp_path / "kc-list.yaml").write_text(json.dumps({**good, "clusters": "not a list"}))
    (tmp_path / "kc-tab.yaml").write_text("apiVersion: v1\nkind: Config\nclusters:\n"
                                          "- name: fake\n\tcluster: {}\n")
    (tmp_path / "kc-ctx.yaml").write_text(json.dumps({**good, "current-context": "nope"}))
    return {"CACHE": str(tmp_path / "c"), "CERT": cert, "KEY": key, "OTHERKEY": other_key,
            "TEXT": str(tmp_path / "text.txt"), "GOODKC": str(tmp_path / "kc.json"),
            **{k: str(tmp_path / f"kc-{k.lower()}.yaml") for k in ("LIST", "TAB", "CTX")}}


WEBHOOK = ["webhook", "--port", "0", "--kubeconfig"]
AGENT = ["run", "--kubernetes", "--node-name", "n1", "--cache-dir", "CACHE", "--kubeconfig"]


@pytest.mark.parametrize("argv, message", [
    ([*WEBHOOK, "GOODKC", "--tls-cert-file", "TEXT", "--tls-key-file", "TEXT"],
     "webhook: --tls-cert-file TEXT: not a PEM certificate"),
    ([*WEBHOOK, "GOODKC", "--tls-cert-file", "CERT", "--tls-key-file", "TEXT"],
     "webhook: --tls-key-file TEXT: not a PEM private key (or an encrypted one)"),
    ([*WEBHOOK, "GOODKC", "--tls-cert-file", "CERT", "--tls-key-file", "OTHERKEY"],
     "webhook: --tls-key-file OTHERKEY: not the private key of --tls-cert-file CERT"),
    ([*WEBHOOK, "LIST", "--tls-cert-file", "CERT", "--tls-key-file", "KEY"],
     "webhook: --kubeconfig LIST: clusters: expected a list, got str"),
    ([*AGENT, "LIST"], "run --kubernetes: --kubeconfig LIST: clusters: expected a list, got str"),
    ([*AGENT, "TAB"], "run --kubernetes: --kubeconfig TAB: line 5 malformed YAML: found "
                      "character '\\t' that cannot start any token"),
    ([*AGENT, "CTX"], "run --kubernetes: kubeconfig CTX: Expected object with name nope in "),
])
def test_unreadable_tls_files_and_kubeconfigs_are_named_exit_2(argv, message, tmp_path):
    """Blind job round 36: 'SSLError: [SSL] PEM lib', a kubernetes-client ConfigException or
    ScannerError, exit 1, naming no file; now one line naming the file and what is wrong with
    it, exit 2, before anything starts."""
    files = _bad_start_files(tmp_path)
    argv = [files.get(a, a) for a in argv]
    message = re.sub(r"\b[A-Z]+\b", lambda m: files.get(m.group(), m.group()), message)
    env = {k: v for k, v in os.environ.items()
           if k not in ("NODE_NAME", "KUBERNETES_SERVICE_HOST", "KUBECONFIG")}
    r = subprocess.run([sys.executable, "-m", "prefetchd.cli", *argv], cwd=ROOT,
                       capture_output=True, text=True, timeout=60, env=env)
    err = r.stderr
    assert r.returncode == cli.EXIT_BAD_INPUT, err
    assert err.count("\n") == 1 and err.startswith(f"prefetchd: error: {message}"), err
    assert "not-a-secret" not in err and not (tmp_path / "c").exists()


def test_webhook_command_steers_a_pod_and_stops_on_sigterm(fake, tmp_path):
    from test_k8s_webhook import TRAIN_POD, add_cluster, make_cert, mutate

    add_cluster(fake)
    cert, key = make_cert(tmp_path)
    port = free_port()
    cmd = [sys.executable, "-m", "prefetchd.cli", "--log-level", "INFO", "webhook",
           "--kubeconfig", str(write_kubeconfig(tmp_path / "kubeconfig", fake.url)),
           "--port", str(port), "--tls-cert-file", cert, "--tls-key-file", key,
           "--replicas", "2"]
    log_path = tmp_path / "webhook.log"
    with open(log_path, "w") as log_file:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log_file, stderr=log_file)
    try:
        def listening() -> bool:
            assert proc.poll() is None, log_path.read_text()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return True
            except OSError:
                return False

        wait_until("webhook listening", listening)

        class Srv:  # what mutate() needs of a server
            pass

        srv = Srv()
        srv.port = port  # type: ignore[attr-defined]
        resp, pod = mutate(srv, cert, TRAIN_POD)  # type: ignore[arg-type]
        terms = pod["spec"]["affinity"]["nodeAffinity"][
            "preferredDuringSchedulingIgnoredDuringExecution"]
        hosts = [v for t in terms for e in t["preference"]["matchExpressions"]
                 if e["key"] == "kubernetes.io/hostname" for v in e["values"]]
        # two replicas among the nodes with GPUs, untainted, running an agent: both of them
        assert set(hosts) == {"host-0", "host-1"}
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log_path.read_text()
    assert "prefetchd webhook stopped" in text
    assert " WARNING " not in text and " ERROR " not in text, text
