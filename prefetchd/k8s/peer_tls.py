"""This node's cache-group certificate from a Kubernetes Secret (cert-manager's, or one made by
hand), written to files the peer server and the mounts read.

Who calls this: :func:`prefetchd.k8s.agent.run` with ``--peer-tls-secret PREFIX``: once before
the peer server starts (it must have files to start with) and then every publish interval,
so a renewed certificate reaches the files (the server and clients reload changed files).

Data flow: with ``--peer-issuer KIND/NAME`` the agent first makes sure the cert-manager
``Certificate`` ``PREFIX-<node>`` exists in its namespace (common name and DNS name = the Node's
name, client and server auth, issued by that Issuer or ClusterIssuer into the Secret of the
same name); cert-manager then issues it. Either way the ``kubernetes.io/tls`` Secret
``PREFIX-<node>`` (``tls.crt``, ``tls.key``, ``ca.crt``) -> ``<dir>/tls.crt``, ``tls.key``
(mode 0600) and ``ca.crt``, each replaced atomically and only when it changed -> the group
file's ``tls`` names them. Key material is never logged.
"""

from __future__ import annotations

import base64
import logging
import os
from pathlib import Path
from typing import Any

from fusecache.group import TlsFiles
from prefetchd.k8s import rest

log = logging.getLogger(__name__)

CERT_MANAGER_API = "cert-manager.io/v1"
FILES = {"ca.crt": 0o644, "tls.crt": 0o644, "tls.key": 0o600}


class PeerTlsError(RuntimeError):
    """The Secret is missing or unusable; the message names it (never its data)."""


class PeerTls:
    """Fetches ``PREFIX-<node>`` and keeps the files in *directory* up to date."""

    def __init__(self, api_client: Any, namespace: str, prefix: str, node_name: str,
                 directory: str | os.PathLike, issuer: str | None = None) -> None:
        self.api, self.namespace = api_client, namespace
        self.name = f"{prefix}-{node_name}"
        self.node_name = node_name
        self.dir = Path(directory)
        self.issuer = issuer  # "Issuer/NAME" or "ClusterIssuer/NAME": ensure a Certificate

    def files(self) -> TlsFiles:
        return TlsFiles(str(self.dir / "ca.crt"), str(self.dir / "tls.crt"),
                        str(self.dir / "tls.key"))

    def certificate(self) -> dict[str, Any]:
        """The cert-manager Certificate this agent asks for."""
        kind, _, name = (self.issuer or "").partition("/")
        return {
            "apiVersion": CERT_MANAGER_API, "kind": "Certificate",
            "metadata": {"name": self.name, "namespace": self.namespace,
                         "labels": {"app.kubernetes.io/part-of": "fusecache",
                                    "app.kubernetes.io/component": "cache-group-peer"}},
            "spec": {
                "secretName": self.name,
                "commonName": self.node_name,
                "dnsNames": [self.node_name],
                "usages": ["digital signature", "key encipherment", "server auth",
                           "client auth"],
                "duration": "2160h", "renewBefore": "360h",
                "privateKey": {"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Always"},
                "issuerRef": {"group": "cert-manager.io", "kind": kind, "name": name},
            },
        }

    def ensure_certificate(self) -> None:
        """Create the Certificate when absent (an existing one is left as it is)."""
        if not self.issuer:
            return
        base = f"/apis/{CERT_MANAGER_API}/namespaces/{self.namespace}/certificates"
        status = rest.request(self.api, "GET", f"{base}/{self.name}").status
        if status == 200:
            return
        if status != 404:
            raise PeerTlsError(f"certificate {self.namespace}/{self.name}: HTTP {status}")
        reply = rest.request(self.api, "POST", base, body=self.certificate())
        if reply.status not in (200, 201, 409):
            raise PeerTlsError(f"cannot create certificate {self.namespace}/{self.name}: "
                               f"HTTP {reply.status} {reply.message()}")
        log.info("asked cert-manager (%s) for certificate %s/%s", self.issuer,
                 self.namespace, self.name)

    def refresh(self) -> bool:
        """Fetch the Secret and rewrite changed files; True when any file changed.

        PeerTlsError when the Secret does not exist (yet) or lacks a key.
        """
        reply = rest.request(self.api, "GET",
                             f"/api/v1/namespaces/{self.namespace}/secrets/{self.name}")
        status, secret = reply.status, reply.json_or_none()
        if status == 404:
            raise PeerTlsError(f"secret {self.namespace}/{self.name} does not exist (yet)")
        if status != 200 or not isinstance(secret, dict):
            raise PeerTlsError(f"secret {self.namespace}/{self.name}: HTTP {status}")
        data = secret.get("data") or {}
        missing = [k for k in FILES if not data.get(k)]
        if missing:
            raise PeerTlsError(f"secret {self.namespace}/{self.name} has no "
                               f"{', '.join(missing)} (a kubernetes.io/tls Secret with ca.crt)")
        self.dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.dir, 0o700)
        changed = False
        for fname, mode in FILES.items():
            try:
                raw = base64.b64decode(data[fname], validate=True)
            except ValueError:
                raise PeerTlsError(f"secret {self.namespace}/{self.name}: {fname} is not "
                                   "base64") from None
            path = self.dir / fname
            try:
                if path.read_bytes() == raw:
                    continue
            except FileNotFoundError:
                pass
            tmp = path.with_name(f".{fname}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
            with os.fdopen(fd, "wb") as f:
                f.write(raw)
            os.replace(tmp, path)
            changed = True
        if changed:
            log.info("peer certificate from secret %s/%s written to %s", self.namespace,
                     self.name, self.dir)
        return changed
