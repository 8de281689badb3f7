"""The S3 endpoint and credentials the node agent warms a dataset with: its volume's.

Who calls this: :class:`prefetchd.k8s.worker.WarmWorker`, once per warm, through
:meth:`VolumeCredentials.store_config` with the :class:`~prefetchd.k8s.agent.WarmRequest`;
:func:`prefetchd.k8s.agent.run` builds the :class:`VolumeCredentials` on the agent's API client.

Why: a fusecache mount gets its endpoint and credentials per volume (StorageClass parameters,
PV ``volumeAttributes``, the node-stage Secret kubelet hands to NodeStageVolume). The agent must
fetch a dataset the way the volume it comes from would, or warming silently fails wherever the
agent's own identity is not the volume's (MinIO, Ceph, AWS without pod identity).

Data flow, for one dataset ``s3://bucket/prefix/...`` requested for ``workflow NS/NAME`` or
``pod NS/NAME``:

1. **Which volume.** The PV named by the request (``WarmRequest.volume``, when the dataset
   resolution knows it), else the fusecache PVs (``spec.csi.driver``) bound to the PVCs of the
   request's namespace whose ``bucket``/``prefix`` cover the dataset: the most specific (longest
   prefix) wins, ties go to the first PV name. Only claims of the requesting namespace count, so
   a workflow never borrows another namespace's credentials. No such volume: the agent's own
   identity (boto3's chain: environment, IRSA, instance profile) and its ``--endpoint-url``.
2. **Endpoint and region**: the PV's ``volumeAttributes`` ``endpointUrl``/``region`` (what the
   mount uses), else the parameters of the PV's StorageClass, else ``--endpoint-url`` / none.
3. **Secret**: the PV's ``spec.csi.nodeStageSecretRef`` (what kubelet passes to the mount), else
   the StorageClass's ``csi.storage.k8s.io/node-stage-secret-name``/``-namespace`` with
   ``${pv.name}``, ``${pvc.namespace}`` and ``${pvc.name}`` expanded from the PV's ``claimRef``
   (as the csi-provisioner expands them), else none (the agent's own credentials with the
   volume's endpoint, as the mount would then use the plugin's own).
4. The Secret is read through the API (``get`` on that one Secret: see docs/install.md for the
   RBAC); keys ``accessKeyID``, ``secretAccessKey``, optional ``sessionToken`` (the ``AWS_*``
   spellings too), exactly those csi/node.py accepts. A Secret that is named but cannot be read
   or lacks a key is a :class:`CredentialError` (the warm fails with that one line): falling back
   to the agent's own identity there would warm with credentials the volume does not use.

Secret values live only in the returned :class:`StoreConfig` (``repr`` hides them) and in a
cache of at most ``CACHE_SIZE`` entries for ``SECRET_TTL`` seconds (a rotated Secret is used
within a minute); they are never logged, and :attr:`StoreConfig.origin` (what may be logged and
recorded) names only the PV and the Secret's namespace/name.
"""

from __future__ import annotations

import base64
import binascii
import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from prefetchd.k8s import datasets as ds_mod
from prefetchd.k8s import rest

log = logging.getLogger(__name__)

# node-stage secret key -> boto3 Session argument (the keys csi/node.py's _SECRET_ENV accepts).
SECRET_KEYS = {
    "accessKeyID": "aws_access_key_id", "AWS_ACCESS_KEY_ID": "aws_access_key_id",
    "secretAccessKey": "aws_secret_access_key",
    "AWS_SECRET_ACCESS_KEY": "aws_secret_access_key",
    "sessionToken": "aws_session_token", "AWS_SESSION_TOKEN": "aws_session_token",
}
SC_SECRET_NAME = "csi.storage.k8s.io/node-stage-secret-name"
SC_SECRET_NAMESPACE = "csi.storage.k8s.io/node-stage-secret-namespace"

OBJECT_TTL = 10.0  # PVC listings, PVs, StorageClasses: fresh enough, few GETs per burst
SECRET_TTL = 60.0  # a rotated Secret is picked up within this
CACHE_SIZE = 1024  # entries per cache (LRU): bounded memory
MAX_CLAIMS = 5000  # PVCs looked at per namespace (listed 500 per page)
API_ATTEMPTS = 3  # per GET, on connection errors, 429 and 5xx
_TEMPLATE = re.compile(r"\$\{([^}]*)\}")


class CredentialError(Exception):
    """The volume's credentials cannot be had; the message names no secret value."""


@dataclass(frozen=True)
class StoreConfig:
    """How to reach S3 for one dataset. ``origin`` is safe to log; ``credentials`` is not."""

    endpoint_url: str | None
    region: str | None
    origin: str
    credentials: Mapping[str, str] | None = field(default=None, repr=False, compare=False)


def _namespace(source: str) -> str | None:
    """``workflow NS/NAME`` or ``pod NS/NAME`` -> NS."""
    _, _, rest = source.partition(" ")
    ns, sep, _ = rest.partition("/")
    return ns if sep and ns else None


def covers(location: str, dataset: str) -> bool:
    """A volume at ``s3://b/p/`` serves ``dataset`` (itself or anything under it)."""
    loc = location if location.endswith("/") else location + "/"
    return dataset == location or dataset.startswith(loc)


def secret_credentials(secret: Mapping[str, Any], where: str) -> dict[str, str]:
    """boto3 Session arguments from a Secret object (``data`` is base64, as the API gives it)."""
    out: dict[str, str] = {}
    data = secret.get("data") or {}
    for key, value in data.items():
        if key in SECRET_KEYS and value:
            try:
                out[SECRET_KEYS[key]] = base64.b64decode(value, validate=True).decode()
            except (binascii.Error, UnicodeDecodeError):
                raise CredentialError(f"{where}: key {key} is not valid base64 text") from None
    if "aws_access_key_id" not in out or "aws_secret_access_key" not in out:
        raise CredentialError(
            f"{where} must hold accessKeyID and secretAccessKey (it has keys: "
            f"{', '.join(sorted(data)) or 'none'})")
    return out


def _expand(template: str, pv: Mapping[str, Any], what: str) -> str:
    """Expand the csi-provisioner's ``${pv.name}``, ``${pvc.namespace}``, ``${pvc.name}``."""
    claim = (pv.get("spec") or {}).get("claimRef") or {}
    values = {"pv.name": (pv.get("metadata") or {}).get("name", ""),
              "pvc.namespace": claim.get("namespace", ""), "pvc.name": claim.get("name", "")}

    def one(m: re.Match[str]) -> str:
        value = values.get(m.group(1))
        if not value:
            raise CredentialError(f"StorageClass {what} {template!r}: cannot expand "
                                  f"${{{m.group(1)}}} for PV {values['pv.name']}")
        return value

    return _TEMPLATE.sub(one, template)


class VolumeCredentials:
    """Resolves a :class:`StoreConfig` per warm request (see the module docstring)."""

    def __init__(self, api_client: Any, endpoint_url: str | None = None,
                 driver: str = ds_mod.DRIVER_NAME,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.api, self.endpoint_url, self.driver = api_client, endpoint_url, driver
        self._objects = ds_mod.TtlCache(OBJECT_TTL, CACHE_SIZE, clock)
        self._secrets = ds_mod.TtlCache(SECRET_TTL, CACHE_SIZE, clock)

    # ------------------------------------------------------------ API reads

    def _get(self, path: str, query: list[tuple[str, str]] | None = None
             ) -> Mapping[str, Any] | None:
        """GET a JSON object; None on 404; CredentialError (status only) otherwise.

        A connection error, 429 or 5xx is tried ``API_ATTEMPTS`` times (0.5 s, 1 s apart):
        a warm whose credentials cannot be resolved fails, and is not retried later.
        """
        problem = ""
        for attempt in range(API_ATTEMPTS):
            if attempt:
                time.sleep(0.5 * 2 ** (attempt - 1))
            try:
                reply = rest.request(self.api, "GET", path, query=query)
            except rest.ApiUnreachable as e:  # refused, timed out, reset, TLS
                problem = e.reason
                continue
            if reply.status == 404:
                return None
            if reply.status == 200:
                return reply.json()
            problem = f"HTTP {reply.status}"
            if reply.status != 429 and reply.status < 500:
                break
        raise CredentialError(f"GET {path}: {problem}")

    def _pv(self, name: str) -> Mapping[str, Any] | None:
        return self._objects.get(("pv", name), lambda: self._get(
            f"/api/v1/persistentvolumes/{name}"))

    def _storage_class(self, name: str) -> Mapping[str, Any] | None:
        return self._objects.get(("sc", name), lambda: self._get(
            f"/apis/storage.k8s.io/v1/storageclasses/{name}"))

    def _bound_pvs(self, namespace: str) -> list[str]:
        """Names of the PVs bound to the namespace's claims (at most MAX_CLAIMS claims)."""
        def load() -> list[str]:
            names: list[str] = []
            token = ""
            for _ in range(MAX_CLAIMS // 500):
                query = [("limit", "500")] + ([("continue", token)] if token else [])
                page = self._get(f"/api/v1/namespaces/{namespace}/persistentvolumeclaims",
                                 query) or {}
                for pvc in page.get("items") or []:
                    pv = (pvc.get("spec") or {}).get("volumeName")
                    if pv and (pvc.get("status") or {}).get("phase") == "Bound":
                        names.append(pv)
                token = (page.get("metadata") or {}).get("continue") or ""
                if not token:
                    break
            return sorted(set(names))

        return self._objects.get(("claims", namespace), load)

    def _secret(self, namespace: str, name: str) -> dict[str, str]:
        where = f"node-stage Secret {namespace}/{name}"

        def load() -> dict[str, str]:
            try:
                secret = self._get(f"/api/v1/namespaces/{namespace}/secrets/{name}")
            except CredentialError as e:  # 403: the agent may not read it (RBAC)
                raise CredentialError(
                    f"cannot read {where} ({str(e).rsplit(': ', 1)[-1]}; the agent needs get "
                    "on it: docs/install.md, 'Credentials of the agent')") from None
            if secret is None:
                raise CredentialError(f"{where} does not exist")
            return secret_credentials(secret, where)

        return dict(self._secrets.get(("secret", namespace, name), load))

    # ------------------------------------------------------------ resolution

    def volume_for(self, dataset: str, source: str, pv_name: str | None = None
                   ) -> Mapping[str, Any] | None:
        """The PV the dataset comes from (see the module docstring), or None."""
        if pv_name:
            pv = self._pv(pv_name)
            if pv is None:
                raise CredentialError(f"PV {pv_name} of {dataset} does not exist")
            return pv
        namespace = _namespace(source)
        if namespace is None:
            return None
        best: tuple[int, str, Mapping[str, Any]] | None = None
        for name in self._bound_pvs(namespace):
            pv = self._pv(name)
            try:
                loc = ds_mod.csi_location(((pv or {}).get("spec") or {}).get("csi"),
                                          self.driver)
            except ValueError:  # attributes the node plugin refuses: no dataset of it
                continue
            if pv is None or loc is None or not covers(loc, dataset):
                continue
            rank = (-len(loc), name)
            if best is None or rank < best[:2]:
                best = (*rank, pv)
        return best[2] if best else None

    def store_config(self, req: Any) -> StoreConfig:
        """The StoreConfig of one :class:`~prefetchd.k8s.agent.WarmRequest`."""
        # req.volume: the VolumeDataset the analysis resolved (its PV by name), when known.
        volume = getattr(req, "volume", None)
        pv_name = volume if isinstance(volume, str) else getattr(volume, "pv", None)
        pv = self.volume_for(req.dataset, req.source, pv_name or None)
        if pv is None:
            return StoreConfig(self.endpoint_url, None, "agent identity")
        pv_name = (pv.get("metadata") or {}).get("name", "")
        spec = pv.get("spec") or {}
        csi = spec.get("csi") or {}
        attrs = csi.get("volumeAttributes") or {}
        sc_name = spec.get("storageClassName") or ""
        sc_params: Mapping[str, Any] = {}
        if sc_name and not (attrs.get("endpointUrl") and attrs.get("region")
                            and csi.get("nodeStageSecretRef")):
            sc_params = (self._storage_class(sc_name) or {}).get("parameters") or {}
        endpoint = attrs.get("endpointUrl") or sc_params.get("endpointUrl") or self.endpoint_url
        region = attrs.get("region") or sc_params.get("region") or None
        ref = csi.get("nodeStageSecretRef") or {}
        ns, name = ref.get("namespace"), ref.get("name")
        if not name and sc_params.get(SC_SECRET_NAME):
            if not sc_params.get(SC_SECRET_NAMESPACE):
                raise CredentialError(f"StorageClass {sc_name} names a node-stage secret but "
                                      f"no {SC_SECRET_NAMESPACE}")
            name = _expand(sc_params[SC_SECRET_NAME], pv, "secret name")
            ns = _expand(sc_params[SC_SECRET_NAMESPACE], pv, "secret namespace")
        if not name:
            return StoreConfig(endpoint, region, f"pv {pv_name}, agent identity")
        if not ns:
            raise CredentialError(f"PV {pv_name}: nodeStageSecretRef {name} has no namespace")
        creds = self._secret(ns, name)
        return StoreConfig(endpoint, region, f"pv {pv_name}, secret {ns}/{name}", creds)
