"""The cache group from Kubernetes (prefetchd/k8s/group_watch.py): Node annotations -> group.json.

Nodes are made as the kubelet registers them (labels, ``status.addresses``, capacity and
allocatable, conditions). Unit part: the member table from Node events (endpoint host from the
InternalIP, nodes without the annotation or with a bad one are not members, a deleted node
leaves). End to end: two real ``prefetchd run --kubernetes --peer-listen`` agents against the
fake API server publish their peer annotation and both write the same members into their
group files; a third node without an agent is not a member; deleting a Node drops it from the
running agents' files without a restart.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from fake_apiserver import ApiError
from test_k8s_e2e_agent import free_port_pair, wait_until, write_kubeconfig

from fusecache.group import load_group
from prefetchd.k8s import group_watch as gw

ROOT = Path(__file__).resolve().parents[2]


def kubelet_node(name: str, ip: str, annotations: dict[str, str] | None = None) -> dict:
    """A Node as the kubelet registers it (then the agent annotates it)."""
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                       "kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
                       "node.kubernetes.io/instance-type": "m5.2xlarge"},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                            "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                            **(annotations or {})},
        },
        "spec": {"podCIDR": "10.244.1.0/24", "podCIDRs": ["10.244.1.0/24"]},
        "status": {
            "addresses": [{"type": "InternalIP", "address": ip},
                          {"type": "Hostname", "address": name}],
            "capacity": {"cpu": "8", "memory": "32386364Ki", "pods": "110",
                         "ephemeral-storage": "101430960Ki"},
            "allocatable": {"cpu": "7910m", "memory": "31235388Ki", "pods": "110",
                            "ephemeral-storage": "93478772582"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "kubelet is posting ready status"}],
            "nodeInfo": {"kubeletVersion": "v1.30.2", "osImage": "Debian GNU/Linux 12"},
        },
    }


def test_members_from_node_events(tmp_path, caplog):
    m = gw.GroupMembership("n1", str(tmp_path), replicas=2, striping=True)
    ann = gw.peer_annotation(":7471", 200.0, ["b1"], ["s3://b1/ds/"], lane_port=7472)
    m.on_node("ADDED", kubelet_node("n1", "10.0.0.1", {gw.PEER_ANNOTATION: ann}))
    m.on_node("ADDED", kubelet_node("n2", "10.0.0.2", {
        gw.PEER_ANNOTATION: gw.peer_annotation("10.244.2.7:7471", 100.0)}))
    m.on_node("ADDED", kubelet_node("n3", "10.0.0.3"))  # no agent: not a member
    with caplog.at_level(logging.WARNING):
        m.on_node("ADDED", kubelet_node("n4", "10.0.0.4", {gw.PEER_ANNOTATION: "{not json"}))
    assert "n4: not a cache-group member" in caplog.text
    g = load_group(tmp_path / "group.json")
    assert g.self_name == "n1" and g.replicas == 2 and g.striping
    assert [(x.name, x.endpoint, x.weight) for x in g.members] == [
        ("n1", "10.0.0.1:7471", 200.0), ("n2", "10.244.2.7:7471", 100.0)]
    assert g.member("n1").buckets == ("b1",) and g.member("n1").datasets == ("s3://b1/ds/",)
    # its block lane, on the host the endpoint resolved to; n2 publishes none
    assert g.member("n1").lane == "10.0.0.1:7472" and g.member("n2").lane == ""
    version = g.version
    # the same Node again (a kubelet heartbeat): no rewrite
    m.on_node("MODIFIED", kubelet_node("n2", "10.0.0.2", {
        gw.PEER_ANNOTATION: gw.peer_annotation("10.244.2.7:7471", 100.0)}))
    assert load_group(tmp_path / "group.json").version == version
    # the agent on n2 stops publishing (annotation removed), then n1 is deleted
    m.on_node("MODIFIED", kubelet_node("n2", "10.0.0.2"))
    assert [x.name for x in load_group(tmp_path / "group.json").members] == ["n1"]
    m.on_node("DELETED", kubelet_node("n1", "10.0.0.1", {gw.PEER_ANNOTATION: ann}))
    assert load_group(tmp_path / "group.json").members == ()


def test_member_from_node_rejects_bad_annotations():
    cases = {
        json.dumps({"endpoint": "10.0.0.1"}): "endpoint",
        json.dumps({"endpoint": "10.0.0.1:99999"}): "port",
        json.dumps({"endpoint": ":7471", "weight": 0}): "weight",
        json.dumps({"endpoint": ":7471", "buckets": "b1"}): "buckets",
        json.dumps({"endpoint": ":7471", "lane_port": "7472"}): "lane_port",
        json.dumps({"endpoint": ":7471", "lane_port": 70000}): "lane_port",
        json.dumps(["x"]): "object",
    }
    for raw, word in cases.items():
        with pytest.raises(ValueError, match=word):
            gw.member_from_node(kubelet_node("n", "10.0.0.9", {gw.PEER_ANNOTATION: raw}))
    node = kubelet_node("n", "10.0.0.9", {gw.PEER_ANNOTATION: json.dumps({"endpoint": ":1"})})
    node["status"]["addresses"] = [{"type": "Hostname", "address": "n"}]
    with pytest.raises(ValueError, match="InternalIP"):
        gw.member_from_node(node)


def _agent(fake_url: str, tmp: Path, name: str, listen: str, endpoint: str) -> tuple:
    cache = tmp / name
    log_path = tmp / f"{name}.log"
    cmd = [sys.executable, "-m", "prefetchd.cli", "--log-level", "INFO", "run", "--kubernetes",
           "--kubeconfig", str(write_kubeconfig(tmp / f"{name}.kubeconfig", fake_url)),
           "--node-name", name, "--cache-dir", str(cache), "--endpoint-url", endpoint,
           "--publish-interval", "1", "--peer-listen", listen, "--replicas", "1",
           "--peer-insecure"]
    env = {k: v for k, v in os.environ.items()
           if k not in ("NODE_NAME", "KUBERNETES_SERVICE_HOST", "POD_IP")}
    with open(log_path, "w") as f:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=f, stderr=f)
    return proc, cache, log_path


@pytest.mark.k8s
def test_agents_publish_and_write_the_group(fake, local_s3, s3_env, tmp_path):
    for i, n in enumerate(("n1", "n2", "n3"), start=1):
        fake.create(kubelet_node(n, f"127.0.0.{i}"))
    procs = {}
    try:
        for i, n in enumerate(("n1", "n2"), start=1):
            procs[n] = _agent(fake.url, tmp_path, n,
                              f"127.0.0.{i}:{free_port_pair(f'127.0.0.{i}')}",
                              local_s3.endpoint_url)

        def members(n: str) -> list[tuple[str, str]] | None:
            p = procs[n][1] / "group.json"
            if not p.exists():
                return None
            g = load_group(p)
            return [(m.name, m.endpoint) for m in g.members]

        # the port is published alone: every agent takes the host from the InternalIP
        want = [("n1", "127.0.0.1:"), ("n2", "127.0.0.2:")]

        def listed(n: str) -> bool:
            got = members(n)
            return got is not None and len(got) == 2 and all(
                g[0] == w[0] and g[1].startswith(w[1]) for g, w in zip(got, want, strict=True))

        for n in ("n1", "n2"):
            wait_until(f"{n}'s group file lists n1 and n2",
                       lambda n=n: listed(n) or procs[n][0].poll() is not None)
            assert procs[n][0].poll() is None, procs[n][2].read_text()
        assert members("n1") == members("n2")
        for m in load_group(procs["n1"][1] / "group.json").members:
            # each agent serves its cache in-process, and its block lane on the next port
            host, _, port = m.endpoint.rpartition(":")
            assert m.lane == f"{host}:{int(port) + 1}", m
            for p in (int(port), int(port) + 1):
                socket.create_connection((host, p), timeout=5).close()
        ann = json.loads(fake.get("v1", "Node", "n1")["metadata"]["annotations"][
            gw.PEER_ANNOTATION])
        assert ann["endpoint"].startswith(":") and ann["weight"] > 0
        assert ann["lane_port"] == int(ann["endpoint"][1:]) + 1
        assert load_group(procs["n1"][1] / "group.json").self_name == "n1"
        # n2's Node goes away: the running agent on n1 drops it, no restart
        fake.delete("v1", "Node", "n2")
        wait_until("n2 left n1's group", lambda: [m for m, _ in members("n1")] == ["n1"])
        for proc, _, log_path in procs.values():
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=15) == 0, log_path.read_text()
    finally:
        for proc, _, _ in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    text = procs["n1"][2].read_text()
    assert "cache group: 2 members (n1, n2)" in text
    assert "not-a-secret" not in text


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def issue(tmp: Path, node: str, tag: str) -> dict[str, bytes]:
    """What cert-manager's CA issuer puts in a Certificate's Secret: tls.crt, tls.key, ca.crt."""
    ca_key, ca = tmp / "ca.key", tmp / "ca.crt"
    if not ca.exists():
        _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                 "-nodes", "-keyout", str(ca_key), "-out", str(ca), "-subj", "/CN=peer-ca",
                 "-days", "2")
    key, csr, crt = (tmp / f"{node}-{tag}.{x}" for x in ("key", "csr", "crt"))
    ext = tmp / f"{node}.ext"
    ext.write_text(f"subjectAltName=DNS:{node}\nextendedKeyUsage=serverAuth,clientAuth\n")
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={node}")
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
             "-CAcreateserial", "-out", str(crt), "-days", "2", "-extfile", str(ext))
    return {"tls.crt": crt.read_bytes(), "tls.key": key.read_bytes(), "ca.crt": ca.read_bytes()}


def tls_secret(cert: dict, files: dict[str, bytes]) -> dict:
    """The Secret as cert-manager writes it for *cert* (a Certificate object)."""
    spec = cert["spec"]
    return {
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {
            "name": spec["secretName"], "namespace": cert["metadata"]["namespace"],
            "labels": {"controller.cert-manager.io/fao": "true"},
            "annotations": {
                "cert-manager.io/certificate-name": cert["metadata"]["name"],
                "cert-manager.io/common-name": spec["commonName"],
                "cert-manager.io/alt-names": ",".join(spec["dnsNames"]),
                "cert-manager.io/issuer-kind": spec["issuerRef"]["kind"],
                "cert-manager.io/issuer-name": spec["issuerRef"]["name"],
                "cert-manager.io/issuer-group": spec["issuerRef"]["group"],
                "cert-manager.io/uri-sans": "", "cert-manager.io/ip-sans": ""},
        },
        "data": {k: base64.b64encode(v).decode() for k, v in files.items()},
    }


@pytest.mark.k8s
def test_agent_takes_its_peer_certificate_from_cert_manager(fake, local_s3, s3_env, tmp_path):
    fake.create(kubelet_node("n1", "127.0.0.1"))
    listen = f"127.0.0.1:{free_port_pair()}"
    cache = tmp_path / "n1"
    log_path = tmp_path / "n1.log"
    cmd = [sys.executable, "-m", "prefetchd.cli", "--log-level", "INFO", "run", "--kubernetes",
           "--kubeconfig", str(write_kubeconfig(tmp_path / "kubeconfig", fake.url)),
           "--node-name", "n1", "--cache-dir", str(cache), "--endpoint-url",
           local_s3.endpoint_url, "--publish-interval", "1", "--peer-listen", listen,
           "--peer-tls-secret", "prefetchd-peer", "--peer-tls-namespace", "fusecache-system",
           "--peer-issuer", "ClusterIssuer/prefetchd-peer-ca"]
    env = {k: v for k, v in os.environ.items()
           if k not in ("NODE_NAME", "KUBERNETES_SERVICE_HOST", "POD_IP", "POD_NAMESPACE")}
    with open(log_path, "w") as f:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=f, stderr=f)
    try:
        # the agent asks cert-manager for a certificate named after its node
        def certificate() -> dict | None:
            if proc.poll() is not None:
                return {"dead": log_path.read_text()}
            try:
                return fake.get("cert-manager.io/v1", "Certificate", "prefetchd-peer-n1",
                                namespace="fusecache-system")
            except ApiError:
                return None

        cert = wait_until("the Certificate", certificate)
        assert "dead" not in cert, cert
        assert cert["spec"]["commonName"] == "n1" and cert["spec"]["dnsNames"] == ["n1"]
        assert cert["spec"]["issuerRef"]["kind"] == "ClusterIssuer"
        assert "client auth" in cert["spec"]["usages"]
        # cert-manager issues it; the agent writes the files, names them in the group file and
        # serves with them
        first = issue(tmp_path, "n1", "1")
        fake.create(tls_secret(cert, first))
        tls_dir = cache / "peer-tls"
        wait_until("certificate files", lambda: (tls_dir / "tls.crt").exists()
                   and (tls_dir / "tls.crt").read_bytes() == first["tls.crt"])
        assert (tls_dir / "tls.key").stat().st_mode & 0o077 == 0
        group = wait_until("group file", lambda: (cache / "group.json").exists()
                           and load_group(cache / "group.json"))
        assert group.tls is not None and group.tls.cert == str(tls_dir / "tls.crt")
        host, _, port = listen.rpartition(":")
        wait_until("peer server", lambda: _connects(host, int(port)))
        # a renewal reaches the files without a restart
        second = issue(tmp_path, "n1", "2")
        secret = fake.get("v1", "Secret", "prefetchd-peer-n1", namespace="fusecache-system")
        secret["data"] = tls_secret(cert, second)["data"]
        fake.replace(secret)
        wait_until("renewed certificate", lambda: (tls_dir / "tls.crt").read_bytes()
                   == second["tls.crt"])
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0, log_path.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log_path.read_text()
    assert "BEGIN" not in text  # no key material in the log


def _connects(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=2).close()
        return True
    except OSError:
        return False


def test_peer_flags_are_checked(tmp_path):
    kube = write_kubeconfig(tmp_path / "k", "http://127.0.0.1:1")
    base = [sys.executable, "-m", "prefetchd.cli", "run", "--kubernetes", "--kubeconfig",
            str(kube), "--node-name", "n1", "--cache-dir", str(tmp_path / "c")]
    cases = [
        (["--peer-listen", "7471"], "--peer-listen 7471: not HOST:PORT"),
        (["--peer-listen", "0.0.0.0:7471"], "needs a certificate"),
        (["--peer-listen", "0.0.0.0:7471", "--peer-tls-secret", "p", "--peer-issuer", "x"],
         "--peer-issuer x: not Issuer/NAME"),
        (["--peer-listen", "0.0.0.0:7471", "--peer-issuer", "Issuer/a"],
         "--peer-issuer needs --peer-tls-secret"),
        (["--group-striping"], "--group-striping needs --peer-listen"),
        (["--peer-listen", "0.0.0.0:7471", "--peer-ca", str(kube)],
         "--peer-ca, --peer-cert and --peer-key go together"),
        (["--peer-listen", "0.0.0.0:7471", "--peer-advertise", "x:y"], "not HOST:PORT"),
    ]
    for extra, words in cases:
        out = subprocess.run(base + extra, capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert out.returncode == 2, (extra, out.stderr)
        assert words in out.stderr and "Traceback" not in out.stderr
    out = subprocess.run([sys.executable, "-m", "prefetchd.cli", "run", "--watch-dir",
                          str(tmp_path), "--peer-listen", "0.0.0.0:1"],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 2 and "applies only with --kubernetes" in out.stderr


def test_the_cache_group_install_is_consistent() -> None:
    """manifests/prefetchd/with-cache-group: the agent's peer flags parse and agree with its
    port, env and RBAC, and the issuer it names is installed."""
    from renders import MANIFESTS, kustomize

    from prefetchd import cli
    from prefetchd.k8s import agent as ag

    docs = kustomize(MANIFESTS / "prefetchd" / "with-cache-group")
    (ds,) = [d for d in docs if d["kind"] == "DaemonSet"]
    (c,) = ds["spec"]["template"]["spec"]["containers"]
    args = cli.build_parser().parse_args(c["command"][1:] + c["args"])
    assert ag._check_peer_arguments(args) is None
    port = int(args.peer_listen.rpartition(":")[2])
    assert {p["name"]: p["containerPort"] for p in c["ports"]}["peer"] == port
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") for e in c["env"]}
    assert args.peer_listen.startswith("$(POD_IP):") and env["POD_IP"] == "status.podIP"
    kind, _, name = args.peer_issuer.partition("/")
    assert any(d["kind"] == kind and d["metadata"]["name"] == name for d in docs)
    (role,) = [d for d in docs if d["kind"] == "Role"
               and d["metadata"]["namespace"] == args.peer_tls_namespace]
    assert {"get"} <= {v for r in role["rules"] if "secrets" in r["resources"] for v in r["verbs"]}
    assert {"create"} <= {v for r in role["rules"] if "certificates" in r["resources"]
                          for v in r["verbs"]}
    (binding,) = [d for d in docs if d["kind"] == "RoleBinding"
                  and d["roleRef"]["name"] == role["metadata"]["name"]]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "prefetchd",
                                    "namespace": ds["metadata"]["namespace"]}]
    assert any(d["kind"] == "Namespace" and d["metadata"]["name"] == args.peer_tls_namespace
               for d in docs)
    # Nodes are already patched by the agent (cache-free annotation): the peer annotation too
    (cr,) = [d for d in docs if d["kind"] == "ClusterRole"
             and d["metadata"]["name"] == "prefetchd-agent"]
    assert any("nodes" in r["resources"] and "patch" in r["verbs"] for r in cr["rules"])


def test_the_webhook_steers_no_pod_when_the_group_stripes(fake, api):
    """With --group-striping no node holds a dataset whole: the webhook adds no preference."""
    import copy

    from test_k8s_webhook import TRAIN_POD, add_cluster

    from prefetchd.k8s import datasets as dsm
    from prefetchd.k8s import webhook as wh

    add_cluster(fake)
    view = dsm.ApiClusterView(api, ttl=0.0)
    pod = copy.deepcopy(TRAIN_POD)
    terms, chosen = wh.affinity_terms(pod, view, wh.WebhookConfig(replicas=2))
    assert terms and chosen  # the control: steered without striping
    assert wh.affinity_terms(pod, view, wh.WebhookConfig(replicas=2, striping=True)) == ([], [])
