"""The mutating webhook over real HTTPS with AdmissionReview v1 JSON, cluster state in the fake."""

from __future__ import annotations

import base64
import copy
import http.client
import json
import os
import shutil
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_apiserver import apply_json_patch
from k8s_helpers import node
from volume_objects import bound_pair, storage_class

from prefetchd.k8s import datasets as dsm
from prefetchd.k8s import placement as pl
from prefetchd.k8s import webhook as wh

pytestmark = pytest.mark.k8s


def make_cert(directory: Path, name: str = "tls") -> tuple[str, str]:
    """A self-signed certificate for localhost/127.0.0.1 (openssl CLI; no extra dependency)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl CLI not available")
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
         "-out", str(cert), "-days", "1", "-subj", f"/CN={name}",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
        check=True, capture_output=True)
    return str(cert), str(key)


def add_cluster(fake: Any) -> None:
    """Four agent nodes (two with GPUs, one tainted), one without agent; a fusecache PV/PVC."""
    for i, gpus in enumerate([4, 4, 0, 8]):
        n = node(f"node-{i}", {"kubernetes.io/hostname": f"host-{i}"})
        n["metadata"]["annotations"] = {pl.CACHE_FREE_ANNOTATION: str(100 * 2**30)}
        n["status"] = {"allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "32"}}
        if i == 3:
            n["spec"] = {"taints": [{"key": "dedicated", "value": "infer",
                                     "effect": "NoSchedule"}]}
        fake.create(n)
    fake.create(node("no-agent", {"kubernetes.io/hostname": "no-agent"}))
    fake.create({"apiVersion": "v1", "kind": "PersistentVolume",
                 "metadata": {"name": "pv-imagenet"},
                 "spec": {"capacity": {"storage": "1Ti"}, "accessModes": ["ReadOnlyMany"],
                          "csi": {"driver": "csi.fusecache.io", "volumeHandle": "imagenet",
                                  "volumeAttributes": {"bucket": "datasets",
                                                       "prefix": "imagenet"}}}})
    fake.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                 "metadata": {"name": "imagenet", "namespace": "ml"},
                 "spec": {"volumeName": "pv-imagenet", "accessModes": ["ReadOnlyMany"]}})


TRAIN_POD = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"generateName": "train-", "namespace": "ml",
                 "labels": {"workflows.argoproj.io/workflow": "wf-1"}},
    "spec": {
        "containers": [{
            "name": "main", "image": "pytorch:2",
            "command": ["python", "train.py"],
            "args": ["--data", "/data/train/", "--epochs=3"],
            "env": [{"name": "VAL", "value": "s3://datasets/val-set/"},
                    {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
            "resources": {"limits": {"nvidia.com/gpu": "2"}},
            "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": True}],
        }],
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "imagenet"}}],
    },
}


def admission_review(
    pod: dict, operation: str = "CREATE", uid: str = "7f0b2891-916f-4ed6-b7cd-27bff1815a8c"
) -> dict:
    """AdmissionReview v1 as the API server sends it for a pod creation."""
    return {
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "name": pod["metadata"].get("name", ""),
            "namespace": pod["metadata"].get("namespace", "default"),
            "operation": operation,
            "userInfo": {"username": "system:serviceaccount:argo:argo",
                         "uid": "e8e4b8bc-0000-4000-8000-000000000000",
                         "groups": ["system:serviceaccounts", "system:authenticated"]},
            "object": pod,
            "oldObject": None,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }


@pytest.fixture()
def certs(tmp_path: Path) -> tuple[str, str]:
    return make_cert(tmp_path)


@pytest.fixture()
def server(fake, api, certs) -> Iterator[wh.WebhookServer]:
    add_cluster(fake)
    view = dsm.ApiClusterView(api, ttl=0.0)
    with wh.WebhookServer(view, wh.WebhookConfig(replicas=2), *certs, host="127.0.0.1",
                          port=0) as srv:
        yield srv


def post(srv: wh.WebhookServer, cafile: str, body: bytes) -> tuple[int, Any]:
    ctx = ssl.create_default_context(cafile=cafile)
    conn = http.client.HTTPSConnection("localhost", srv.port, context=ctx, timeout=10)
    try:
        conn.request("POST", "/mutate", body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, json.loads(data) if resp.getheader("Content-Type") == \
            "application/json" else data
    finally:
        conn.close()


def mutate(srv: wh.WebhookServer, cafile: str, pod: dict, **kw: Any) -> tuple[dict, dict]:
    status, answer = post(srv, cafile, json.dumps(admission_review(pod, **kw)).encode())
    assert status == 200
    resp = answer["response"]
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    assert resp["allowed"] is True
    assert resp["uid"] == admission_review(pod, **kw)["request"]["uid"]
    if "patch" not in resp:
        return resp, pod
    assert resp["patchType"] == "JSONPatch"
    return resp, apply_json_patch(pod, json.loads(base64.b64decode(resp["patch"])))


def preferred(pod: dict) -> list[dict]:
    return pod["spec"]["affinity"]["nodeAffinity"][wh.PREFERRED]


def test_pod_with_fusecache_pvc_is_steered_to_chosen_eligible_nodes(fake, server, certs, api):
    resp, patched = mutate(server, certs[0], copy.deepcopy(TRAIN_POD))
    terms = preferred(patched)
    from kubernetes import client

    nodes = [pl.NodeInfo.from_node(api.sanitize_for_serialization(n))
             for n in client.CoreV1Api(api).list_node().items]
    req = pl.PodRequirements.from_pod_spec(TRAIN_POD["spec"])
    expected = []
    for ds in ("s3://datasets/val-set/", "s3://datasets/imagenet/train"):
        chosen = pl.choose(ds, nodes, req, 2)
        assert set(chosen) <= {"node-0", "node-1"}  # GPUs, untainted, agent running
        expected.append({"weight": 80, "preference": {"matchExpressions": [{
            "key": "kubernetes.io/hostname", "operator": "In",
            "values": sorted(c.replace("node", "host") for c in chosen)}]}})
    hostname_terms = [t for t in terms if t["weight"] == 80]
    assert all(t in hostname_terms for t in expected)
    holds = {t["preference"]["matchExpressions"][0]["key"] for t in terms if t["weight"] == 20}
    assert holds == {pl.holds_label("s3://datasets/val-set/"),
                     pl.holds_label("s3://datasets/imagenet/train")}
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in \
        patched["spec"]["affinity"]["nodeAffinity"]
    assert patched["metadata"]["annotations"][wh.STEERED_ANNOTATION]
    # the result is a valid Pod for the real client's models
    model = api.deserialize(json.dumps(patched), "V1Pod", "application/json")
    assert model.spec.affinity.node_affinity.preferred_during_scheduling_ignored_during_execution


def test_a_pod_whose_claim_is_bound_to_a_local_pv_is_steered_only_to_that_host(
        fake, server, certs):
    """Blind job round 41: a claim bound to a local PV pins the pod to the PV's host (the
    scheduler's VolumeBinding), yet its S3 dataset was placed on any node; the nodes chosen
    for it are now only those the PV's node affinity allows."""
    fake.create({"apiVersion": "v1", "kind": "PersistentVolume",
                 "metadata": {"name": "scratch-host-1"},
                 "spec": {"capacity": {"storage": "100Gi"}, "accessModes": ["ReadWriteOnce"],
                          "storageClassName": "local-nvme",
                          "claimRef": {"namespace": "ml", "name": "scratch"},
                          "local": {"path": "/mnt/nvme0/scratch"},
                          "nodeAffinity": {"required": {"nodeSelectorTerms": [
                              {"matchExpressions": [{"key": "kubernetes.io/hostname",
                                                     "operator": "In",
                                                     "values": ["host-1"]}]}]}}}})
    fake.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                 "metadata": {"name": "scratch", "namespace": "ml"},
                 "spec": {"volumeName": "scratch-host-1", "accessModes": ["ReadWriteOnce"],
                          "storageClassName": "local-nvme"},
                 "status": {"phase": "Bound"}})
    pod = copy.deepcopy(TRAIN_POD)
    pod["spec"]["containers"][0]["volumeMounts"].append({"name": "s", "mountPath": "/scratch"})
    pod["spec"]["volumes"].append({"name": "s", "persistentVolumeClaim": {"claimName": "scratch"}})
    _, patched = mutate(server, certs[0], pod)
    hosts = {v for t in preferred(patched) if t["weight"] == 80
             for v in t["preference"]["matchExpressions"][0]["values"]}
    assert hosts == {"host-1"}
    assert patched["metadata"]["annotations"][wh.STEERED_ANNOTATION] == "node-1"


def test_existing_affinity_is_kept_and_appended_to(server, certs):
    pod = copy.deepcopy(TRAIN_POD)
    required = {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["host-0", "host-1"]}]}]}
    old_pref = {"weight": 5, "preference": {"matchExpressions": [
        {"key": "zone", "operator": "In", "values": ["a"]}]}}
    pod["spec"]["affinity"] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required,
                         wh.PREFERRED: [old_pref]},
        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []},
    }
    pod["metadata"]["annotations"] = {"keep": "me"}
    _, patched = mutate(server, certs[0], pod)
    na = patched["spec"]["affinity"]["nodeAffinity"]
    assert na["requiredDuringSchedulingIgnoredDuringExecution"] == required
    assert na[wh.PREFERRED][0] == old_pref and len(na[wh.PREFERRED]) > 1
    assert patched["spec"]["affinity"]["podAntiAffinity"] == pod["spec"]["affinity"][
        "podAntiAffinity"]
    assert patched["metadata"]["annotations"]["keep"] == "me"

    pod2 = copy.deepcopy(TRAIN_POD)
    pod2["spec"]["affinity"] = {"podAffinity": {}}
    _, patched2 = mutate(server, certs[0], pod2)
    assert patched2["spec"]["affinity"]["podAffinity"] == {} and preferred(patched2)


def test_pods_without_datasets_or_not_created_are_left_alone(server, certs):
    plain = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml"},
             "spec": {"containers": [{"name": "c", "image": "busybox", "args": ["sleep"]}]}}
    resp, out = mutate(server, certs[0], plain)
    assert "patch" not in resp and out == plain
    resp, _ = mutate(server, certs[0], copy.deepcopy(TRAIN_POD), operation="UPDATE")
    assert "patch" not in resp
    steered = copy.deepcopy(TRAIN_POD)
    steered["metadata"]["annotations"] = {wh.STEERED_ANNOTATION: "node-0"}
    resp, _ = mutate(server, certs[0], steered)
    assert "patch" not in resp


def test_s3_uris_in_args_and_env_are_datasets(server, certs):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml"},
           "spec": {"containers": [{"name": "c", "image": "x",
                                    "args": ["--train=s3://bucket-a/train/", "--out",
                                             "s3://bucket-a/out/"],
                                    "env": [{"name": "VAL", "value": "s3a://bucket-b/val/"}],
                                    "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
    resp, patched = mutate(server, certs[0], pod)
    assert "patch" in resp
    # steered by the two inputs, and only by them: the --out location is written, not read
    holds = {t["preference"]["matchExpressions"][0]["key"] for t in preferred(patched)
             if t["weight"] == 20}
    assert holds == {pl.holds_label("s3://bucket-a/train/"), pl.holds_label("s3://bucket-b/val/")}
    hosts = {h for t in preferred(patched) if t["weight"] == 80
             for h in t["preference"]["matchExpressions"][0]["values"]}
    assert hosts and hosts <= {"host-0", "host-1"}  # GPUs, untainted, agent running


class _NoVolumes:
    def pvc(self, namespace: str, name: str) -> None:
        return None

    pv = pvc

    def nodes(self) -> list:
        return []


@pytest.mark.parametrize("container, want", [
    ({"args": ["--data", "s3://bkt/in/", "--out", "s3://bkt/out/"]}, ["s3://bkt/in/"]),
    ({"args": ["--input=s3://bkt/in/", "--output=s3://bkt/out/"]}, ["s3://bkt/in/"]),
    ({"args": ["--save-to", "s3://bkt/model/", "s3://bkt/in/"]}, ["s3://bkt/in/"]),
    ({"command": ["aws", "s3", "cp"], "args": ["/local/model.pt", "s3://bkt/models/m.pt"]}, []),
    ({"command": ["sh", "-c"], "args": ["aws s3 cp s3://bkt/in/x /tmp/x && "
                                        "aws s3 cp /tmp/y s3://bkt/out/y"]}, ["s3://bkt/in/x"]),
    ({"command": ["aws", "s3", "sync", "s3://bkt/in/", "/data"]}, ["s3://bkt/in/"]),
    ({"env": [{"name": "OUTPUT_URI", "value": "s3://bkt/out/"},
              {"name": "TRAIN_URI", "value": "s3://bkt/in/"}]}, ["s3://bkt/in/"]),
])
def test_output_locations_are_not_datasets(container, want):
    """The webhook and agent name as datasets only what a pod may read: the workflow analysis's
    read/write rules (copy-tool operand order, output flag and env names) apply to pods too."""
    pod = {"metadata": {"namespace": "ml"}, "spec": {"containers": [{"name": "c", **container}]}}
    assert dsm.pod_datasets(pod, _NoVolumes()) == want


def test_failures_allow_unchanged(fake, api, certs, log_police):
    log_police.allow(r"webhook: could not steer pod ml/")

    class Broken:
        def pvc(self, namespace: str, name: str) -> Any:
            raise RuntimeError("API down")

        pv = pvc

        def nodes(self) -> list:
            raise RuntimeError("API down")

    with wh.WebhookServer(Broken(), wh.WebhookConfig(), *certs, host="127.0.0.1",
                          port=0) as srv:
        resp, out = mutate(srv, certs[0], copy.deepcopy(TRAIN_POD))
        assert "patch" not in resp and out == TRAIN_POD
        status, _ = post(srv, certs[0], b"{not json")
        assert status == 400  # no uid to answer; failurePolicy Ignore lets the pod through


def test_certificate_is_reloaded_when_rotated(fake, api, tmp_path):
    cert, key = make_cert(tmp_path, "first")
    new_cert, new_key = make_cert(tmp_path, "second")
    with wh.WebhookServer(dsm.ApiClusterView(api), wh.WebhookConfig(), cert, key,
                          host="127.0.0.1", port=0) as srv:
        mutate(srv, cert, copy.deepcopy(TRAIN_POD))
        shutil.copy(new_cert, cert)
        shutil.copy(new_key, key)
        st = os.stat(cert)
        os.utime(cert, (st.st_atime, st.st_mtime + 5))  # a later mtime, whatever the FS clock
        mutate(srv, new_cert, copy.deepcopy(TRAIN_POD))  # verifies only against the new CA


def test_pod_dataset_resolution_narrows_by_args_and_subpath():
    class View:
        def pvc(self, namespace, name):
            return {"spec": {"volumeName": "pv1"}} if name == "claim" else None

        def pv(self, name):
            return {"spec": {"csi": {"driver": "csi.fusecache.io", "volumeAttributes": {
                "bucket": "bkt", "prefix": "/base/"}}}}

        def nodes(self):
            return []

    pod = {"metadata": {"namespace": "ml"}, "spec": {
        "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "claim"}},
                    {"name": "other", "persistentVolumeClaim": {"claimName": "nfs"}},
                    {"name": "inline", "csi": {"driver": "csi.fusecache.io",
                                               "volumeAttributes": {"bucket": "bk2"}}}],
        "containers": [
            {"name": "a", "args": ["--x=/mnt/shards/0", "/mnt/../etc"],
             "volumeMounts": [{"name": "v", "mountPath": "/mnt", "subPath": "sub"}]},
            {"name": "b", "volumeMounts": [{"name": "v", "mountPath": "/whole"},
                                           {"name": "inline", "mountPath": "/in"},
                                           {"name": "other", "mountPath": "/nfs"}]},
        ]}}
    assert dsm.pod_datasets(pod, View()) == [
        "s3://bkt/base/sub/shards/0", "s3://bkt/base/", "s3://bk2/"]


EPHEMERAL_POD = {
    "apiVersion": "v1", "kind": "Pod",
    # a Job's pod as the webhook sees it: generateName only, no name yet
    "metadata": {"generateName": "resnet-", "namespace": "ml",
                 "labels": {"batch.kubernetes.io/job-name": "resnet"}},
    "spec": {
        "restartPolicy": "Never",
        "containers": [{
            "name": "train", "image": "pytorch:2",
            "args": ["--data", "/data/train/"],
            "resources": {"limits": {"nvidia.com/gpu": "1"}},
            "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": True}]}],
        "volumes": [{"name": "data", "ephemeral": {"volumeClaimTemplate": {
            "metadata": {"labels": {"team": "vision"}},
            "spec": {"accessModes": ["ReadOnlyMany"], "storageClassName": "imagenet-fixed",
                     "resources": {"requests": {"storage": "1Gi"}}}}}}],
    },
}


def test_pod_with_ephemeral_fusecache_volume_is_steered_by_its_storage_class(
        fake, server, certs):
    """A generic ephemeral volume has no claim when its pod is created (the ephemeral-volume
    controller makes ``<pod>-data`` after): a fusecache StorageClass whose prefix does not
    depend on the claim's name (prefixPolicy fixed) says where it points; one whose prefix
    is the claim's name cannot be known while the pod has none, and steers nothing."""
    fake.create(storage_class("imagenet-fixed", {"bucket": "datasets", "prefix": "imagenet",
                                                 "prefixPolicy": "fixed"}))
    fake.create(storage_class("per-claim", {"bucket": "datasets", "prefix": "claims"}))
    resp, patched = mutate(server, certs[0], copy.deepcopy(EPHEMERAL_POD))
    holds = {t["preference"]["matchExpressions"][0]["key"] for t in preferred(patched)
             if t["weight"] == 20}
    assert holds == {pl.holds_label("s3://datasets/imagenet/train")}
    per_claim = copy.deepcopy(EPHEMERAL_POD)
    per_claim["spec"]["volumes"][0]["ephemeral"]["volumeClaimTemplate"]["spec"][
        "storageClassName"] = "per-claim"
    resp, _ = mutate(server, certs[0], per_claim)
    assert "patch" not in resp


def test_ephemeral_volume_of_a_named_pod_is_its_claim_once_bound():
    """The agent sees the pod with its name: its claim ``<pod>-<volume>``, bound to the PV
    the provisioner made (prefixPolicy pvcName: the claim's name in the prefix), is read
    under the mount; before the claim is bound, the class gives the same location."""
    sc = storage_class("per-claim", {"bucket": "datasets", "prefix": "claims"})
    pv, pvc = bound_pair("ml", "resnet-x7k2p-data", "pvc-0a1b", {
        "bucket": "datasets", "prefix": "claims/resnet-x7k2p-data"},
        storage_class_name="per-claim", provisioned=True)
    pvc["metadata"]["ownerReferences"] = [{
        "apiVersion": "v1", "kind": "Pod", "name": "resnet-x7k2p", "uid": "6d1c",
        "controller": True, "blockOwnerDeletion": True}]
    pod = copy.deepcopy(EPHEMERAL_POD)
    pod["metadata"]["name"] = "resnet-x7k2p"
    pod["spec"]["volumes"][0]["ephemeral"]["volumeClaimTemplate"]["spec"][
        "storageClassName"] = "per-claim"
    bound = dsm.ObjectsView([sc, pv, pvc])
    assert dsm.pod_datasets(pod, bound) == ["s3://datasets/claims/resnet-x7k2p-data/train"]
    not_yet = dsm.ObjectsView([sc])
    assert dsm.pod_datasets(pod, not_yet) == ["s3://datasets/claims/resnet-x7k2p-data/train"]
    other = storage_class("per-claim", {})
    other["provisioner"] = "ebs.csi.aws.com"
    assert dsm.pod_datasets(pod, dsm.ObjectsView([other])) == []


def test_idle_connections_beyond_the_cap_are_closed_and_service_goes_on(
        fake, api, certs, monkeypatch):
    """A flood of idle connections holds at most MAX_CONNECTIONS threads (each waits for
    its TLS handshake until the socket timeout); past that a connection is closed at
    once; once the flood goes, a review is answered again."""
    import socket
    import threading
    import time

    cap = 4
    monkeypatch.setattr(wh, "MAX_CONNECTIONS", cap)
    add_cluster(fake)
    with wh.WebhookServer(dsm.ApiClusterView(api, ttl=0.0), wh.WebhookConfig(), *certs,
                          host="127.0.0.1", port=0) as srv:
        before = threading.active_count()
        flood = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(cap + 4)]
        try:
            closed = 0
            for s in flood[cap:]:  # past the cap: closed by the server at once
                s.settimeout(3)
                try:
                    closed += s.recv(1) == b""
                except ConnectionResetError:
                    closed += 1
            assert closed == 4
            assert threading.active_count() <= before + cap
        finally:
            for s in flood:
                s.close()
        deadline = time.monotonic() + 10
        while threading.active_count() > before and time.monotonic() < deadline:
            time.sleep(0.05)
        status, _ = post(srv, certs[0], json.dumps({"request": {"uid": "u1"}}).encode())
        assert status == 200
