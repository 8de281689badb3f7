"""The agent warms each dataset with its volume's endpoint and node-stage Secret, end to end.

Real processes: ``prefetchd run --kubernetes`` against the fake API server, a real SeaweedFS
whose only valid credentials are in Secrets, a real node cache. The agent's own identity is a
key SeaweedFS refuses and its ``--endpoint-url`` is a closed port, so a dataset warms only
with what its volume says:

* ``train``: a static PV (endpointUrl, region in volumeAttributes, nodeStageSecretRef);
* ``coco``: a PV naming a StorageClass whose parameters give the endpoint and a templated
  node-stage secret (``${pvc.namespace}``), as the csi-provisioner would;
* ``denied``: a PV with the endpoint but no secret: the agent's own (refused) identity;
* ``forbidden``: a PV whose Secret the agent may not read (403): one warning, nothing warmed;
* ``loose``: an ``s3://`` URI in a pod of a namespace without fusecache claims: the agent's own
  identity at its ``--endpoint-url``.

No secret value may appear in the agent's log or in any file under the cache directory.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from k8s_helpers import node
from test_k8s_e2e_agent import cache_state, free_port, wait_until, write_kubeconfig
from volume_objects import bound_pair, pending_pod, secret, storage_class

pytestmark = pytest.mark.k8s

ROOT = Path(__file__).resolve().parents[2]
FILES = {
    "imagenet/train/a.bin": os.urandom(200_000),
    "imagenet/train/b.bin": os.urandom(9_000_000),  # more than one 8 MiB block
    "shared/coco/c.bin": os.urandom(50_000),
    "private/d.bin": os.urandom(10_000),
    "noclaim/e.bin": os.urandom(10_000),
    "locked/f.bin": os.urandom(10_000),
}


def test_each_dataset_is_warmed_with_its_volume_s_credentials(fake, local_s3, bucket, tmp_path):
    s3 = local_s3.client()
    for key, data in FILES.items():
        s3.put_object(Bucket=bucket, Key=key, Body=data)
    endpoint = local_s3.endpoint_url
    # the only working credentials: in Secrets the agent reads through the API
    fake.create(secret("fusecache", "fusecache-s3", local_s3.access_key, local_s3.secret_key))
    fake.create(secret("ml", "ml-s3", local_s3.access_key, local_s3.secret_key))
    fake.create(secret("ml", "locked", local_s3.access_key, local_s3.secret_key))
    fake.create(storage_class("fusecache-ml", {
        "bucket": bucket, "prefix": "shared", "endpointUrl": endpoint, "region": "us-east-1",
        "prefixPolicy": "pvcName",
        "csi.storage.k8s.io/node-stage-secret-name": "${pvc.namespace}-s3",
        "csi.storage.k8s.io/node-stage-secret-namespace": "${pvc.namespace}"}))
    volumes = [
        bound_pair("ml", "train", "imagenet-train",
                   {"bucket": bucket, "prefix": "imagenet/train", "endpointUrl": endpoint,
                    "region": "us-east-1", "metadataTtl": "indefinite"},
                   {"name": "fusecache-s3", "namespace": "fusecache"}),
        bound_pair("ml", "coco", "pvc-5f0c", {"bucket": bucket, "prefix": "shared/coco"},
                   storage_class_name="fusecache-ml", provisioned=True),
        bound_pair("ml", "private", "private",
                   {"bucket": bucket, "prefix": "private", "endpointUrl": endpoint}),
        bound_pair("ml", "locked", "locked", {"bucket": bucket, "prefix": "locked",
                                              "endpointUrl": endpoint},
                   {"name": "locked", "namespace": "ml"}),
    ]
    for pv, pvc in volumes:
        fake.create(pv)
        fake.create(pvc)
    fake.fail_next(count=100, code=403, path_contains="/namespaces/ml/secrets/locked")
    fake.create(node("n1"))

    cache_dir = tmp_path / "cache"
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens: the agent's own endpoint
    cmd = [sys.executable, "-m", "prefetchd.cli", "--log-level", "INFO", "run", "--kubernetes",
           "--kubeconfig", str(write_kubeconfig(tmp_path / "kubeconfig", fake.url)),
           "--node-name", "n1", "--cache-dir", str(cache_dir), "--endpoint-url", dead,
           "--publish-interval", "1"]
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("AWS_") and k not in ("NODE_NAME", "KUBERNETES_SERVICE_HOST")}
    env.update(AWS_ACCESS_KEY_ID="agent-own-key", AWS_SECRET_ACCESS_KEY="agent-own-secret",
               AWS_EC2_METADATA_DISABLED="true")
    log_path = tmp_path / "agent.log"
    with open(log_path, "w") as log_file:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log_file, stderr=log_file)
    try:
        wait_until("node published", lambda: "fusecache.io/cache-free-bytes" in (
            fake.get("v1", "Node", "n1")["metadata"].get("annotations") or {})
            or proc.poll() is not None)
        for name in ("train", "coco", "private", "locked"):
            fake.create(pending_pod("ml", f"read-{name}", name))
        fake.create({**pending_pod("other", "loose", "none", args=[
            f"--data=s3://{bucket}/noclaim/"]), "spec": {
            "restartPolicy": "Never", "containers": [{
                "name": "main", "image": "python:3.11-slim",
                "args": [f"--data=s3://{bucket}/noclaim/"]}]}})

        warmed = {k: (True, True) for k in FILES
                  if k.startswith(("imagenet/", "shared/coco/"))}
        wait_until("volume datasets warmed with their Secrets",
                   lambda: cache_state(cache_dir, bucket) == warmed or proc.poll() is not None,
                   timeout=60)
        assert proc.poll() is None, log_path.read_text()

        def failures() -> list[str]:
            return [ln for ln in log_path.read_text().splitlines() if "cannot warm" in ln]

        wait_until("three failed warms logged", lambda: len(failures()) >= 3, timeout=60)
        records = json.loads((cache_dir / "prefetchd" / "k8s-pins.json").read_text())
        origins = {r["dataset"]: r["credentials_from"] for r in records.values()}
        assert origins == {
            f"s3://{bucket}/imagenet/train/": "pv imagenet-train, secret fusecache/fusecache-s3",
            f"s3://{bucket}/shared/coco/": "pv pvc-5f0c, secret ml/ml-s3",
        }
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log_path.read_text()
    lines = failures()
    assert len(lines) == 3, text
    by_dataset = {ds: next(ln for ln in lines if ds in ln) for ds in
                  ("private/", "locked/", "noclaim/")}
    assert "access denied" in by_dataset["private/"]  # the agent's own identity
    assert ("cannot read node-stage Secret ml/locked (HTTP 403; the agent needs get on it"
            in by_dataset["locked/"])
    assert dead in by_dataset["noclaim/"] and "unreachable" in by_dataset["noclaim/"]
    assert "Traceback" not in text
    # secret values never logged nor written (pins, records, the cache itself)
    for value in (local_s3.secret_key, local_s3.access_key, "agent-own-secret"):
        assert value not in text
        for path in cache_dir.rglob("*"):
            if path.is_file():
                assert value.encode() not in path.read_bytes(), path
